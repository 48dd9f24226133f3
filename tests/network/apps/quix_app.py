"""A Quix Streams application, run by tests/network/test_quix_streams.py with the interpreter of a virtual environment
that has Quix Streams installed (it pins its own confluent-kafka): exactly-once, a filter and a map, then the sum of
each key's values over tumbling one-second windows (a windowed aggregation whose state Quix keeps in RocksDB and
backs up in a compacted changelog topic it creates), each closed window written to the output topic.

Usage: python quix_app.py BOOTSTRAP STATE_DIR INPUT OUTPUT COMMIT_INTERVAL_S IDLE_S
It commits (a transaction) every COMMIT_INTERVAL_S and stops once no message has arrived for IDLE_S.
"""
import sys

from quixstreams import Application


def main(bootstrap: str, state_dir: str, source: str, sink: str, commit_interval_s: str, idle_s: str) -> None:
    app = Application(broker_address=bootstrap, consumer_group="quix-sums", auto_offset_reset="earliest",
                      processing_guarantee="exactly-once", state_dir=state_dir,
                      commit_interval=float(commit_interval_s),
                      # a killed run's member leaves the group when its session ends: 6 s (Kafka's least) not 45 s
                      consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
                      # one transactional.id for every run (Quix draws a new one per run by default): a restarted run
                      # fences the killed one and aborts its open transaction at once, where a new id would leave it
                      # open, holding back read_committed readers, until its transaction timeout (60 s)
                      producer_extra_config={"transactional.id": "quix-sums-app"})
    inputs = app.topic(source, value_deserializer="json")
    outputs = app.topic(sink, value_serializer="json")
    sdf = app.dataframe(inputs)
    sdf = sdf.filter(lambda v: v["n"] % 2 == 0).apply(lambda v: v["n"] * 10)
    sdf = sdf.tumbling_window(duration_ms=1000).sum().final()
    sdf.to_topic(outputs)
    app.run(timeout=float(idle_s))


if __name__ == "__main__":
    main(*sys.argv[1:7])
