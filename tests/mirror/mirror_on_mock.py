"""`python -m tests.mirror.mirror_on_mock ARGS` runs kafkalog's CLI (as `python -m engine ARGS`) with one change: a
mirror writing into librdkafka's mock cluster reads its progress topic the way a Kafka broker serves it to a
read_committed reader.

The mock cluster does not. A transactional producer killed before it commits leaves its transaction open; on a
broker, the next producer with the same transactional.id aborts it in init_transactions, and read_committed
readers never see its records. The mock hands that producer a new producer id, aborts nothing and serves the open
transaction's records to read_committed readers as if committed. A mirror killed after sending a chunk's progress
records and before its commit would then skip that chunk on restart: a loss no broker allows, and which the
real-broker test (tests/broker, where this runner is not used) would catch in the mirror itself.
Everything else runs unchanged.
"""
from __future__ import annotations

import engine.mirror.kafka_side as kafka_side
import engine.mirror.offset_sync as offset_sync
from engine.tools.cli import main
from tests.mirror import kafka_cluster as kc


def read_progress(sink: kafka_side.KafkaSink) -> dict[tuple[str, int], offset_sync.PartitionProgress]:
    """The sink's progress from the records of its progress topic that Kafka's read_committed rule keeps."""
    kept = kc.read_committed_model(sink.cluster.servers, sink.progress_topic, 1)[0]
    return offset_sync.load(sink.name, [(key, value) for _, key, value, _, _ in kept])


if __name__ == "__main__":
    kafka_side.KafkaSink._read_progress = read_progress
    raise SystemExit(main())
