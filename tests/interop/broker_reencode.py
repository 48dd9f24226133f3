"""A manual check against a real Kafka broker (not collected by pytest: it needs a broker listening on
127.0.0.1:9092, such as the one the development tools build from Kafka's sources).

`python -m tests.interop.broker_reencode produce` creates topics whose compression.type is each codec (with a level
where Kafka has one) and produces to each, through librdkafka, in every codec: idempotent batches and a gzip
transaction. Stop the broker, then `python -m tests.interop.broker_reencode compare DATA_DIR` reads every batch the
broker stored and has kafkalog's leader (native core and twin) append the same records sent in each other codec: the
header fields must equal Kafka's and the records section must be Kafka's byte for byte; it counts the batches whose
compressed bytes are identical too. It also sends a record stamped 2100 to a topic bounded by
message.timestamp.after.max.ms and prints the broker's error (INVALID_TIMESTAMP, 32)."""
from __future__ import annotations

import sys
import time

from engine.record import twins
from engine.record import compression as comp

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}
TOPICS = {"uncompressed": (0, None, {}), "gzip": (1, 9, {"compression.gzip.level": "9"}), "snappy": (2, None, {}),
          "lz4": (3, 12, {"compression.lz4.level": "12"}), "lz4-default": (3, 9, {}),
          "zstd": (4, 7, {"compression.zstd.level": "7"})}
FIELDS = ("base_offset", "partition_leader_epoch", "attributes", "last_offset_delta", "base_timestamp",
          "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count")


def produce() -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(BOOT)
    new = [NewTopic(f"conv-{name}", 1, 1, config={"compression.type": comp.NAMES[codec] if codec else "uncompressed",
                                                   **extra}) for name, (codec, _, extra) in TOPICS.items()]
    new.append(NewTopic("bounded", 1, 1, config={"message.timestamp.after.max.ms": "3600000"}))
    for future in admin.create_topics(new).values():
        future.result()
    time.sleep(2)
    now = int(time.time() * 1000)
    for source in comp.NAMES:
        p = Producer({**BOOT, "compression.type": source, "enable.idempotence": True, "linger.ms": 20})
        for name in TOPICS:
            for i in range(40):
                p.produce(f"conv-{name}", value=b"value %d %s " % (i, source.encode()) * (i % 5 + 1),
                          key=None if i % 6 == 0 else b"k%d" % i,
                          headers=[("h", b"x%d" % i), ("n", None)] if i % 3 else None,
                          timestamp=now - 5000 + (i * 37) % 500)
        p.flush(30)
    tx = Producer({**BOOT, "transactional.id": "reencode-tx", "compression.type": "gzip"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for name in TOPICS:
        for i in range(10):
            tx.produce(f"conv-{name}", value=b"txn %d" % i, key=b"t%d" % i, timestamp=now - 100 + i)
    tx.commit_transaction(30)
    errors: list = []
    p = Producer({**BOOT, "enable.idempotence": True})
    p.produce("bounded", value=b"from 2100", timestamp=4_102_444_800_000, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    print("a record stamped 2100:", [(e.code(), e.name()) if e else None for e in errors])


def compare(data_dir: str) -> None:
    impls = [twins.load("codec", "cython"), twins.load("codec", "python")]
    counts: dict = {}
    for name, (target, level, _) in TOPICS.items():
        with open(f"{data_dir}/conv-{name}-0/00000000000000000000.log", "rb") as f:
            data = f.read()
        for kafka in impls[1].iter_batches(data):
            if kafka.is_control:
                assert kafka.compression == "none", name
                continue
            stored = bytes(kafka.buffer)[61:]
            section = comp.decompress(target, stored) if target else stored
            recs = [(r.key, r.value, r.headers, r.timestamp) for r in kafka.records()]
            for source in comp.NAMES:
                if comp.codec_id(source) == target:
                    continue  # Kafka keeps a batch sent in the topic's codec as it is
                sent = impls[1].encode_batch(recs, compression=source, producer_id=kafka.producer_id,
                                             producer_epoch=kafka.producer_epoch, base_sequence=kafka.base_sequence,
                                             transactional=kafka.is_transactional)
                ours = {b"".join(bytes(p) for p in impl.prepare_leader_append(
                    sent, kafka.base_offset, kafka.partition_leader_epoch, -1, 1 << 24, False, None,
                    (target, level, None))[0]) for impl in impls}
                assert len(ours) == 1, "the native core and the twin differ"
                (mine,) = impls[1].iter_batches(ours.pop())
                assert [getattr(mine, f) for f in FIELDS] == [getattr(kafka, f) for f in FIELDS], (name, source)
                body = bytes(mine.buffer)[61:]
                assert (comp.decompress(target, body) if target else body) == section, (name, source)
                key = (name, "identical bytes" if body == stored else "same records section, other compressed bytes")
                counts[key] = counts.get(key, 0) + 1
    for key, n in sorted(counts.items()):
        print(*key, n)


if __name__ == "__main__":
    produce() if sys.argv[1] == "produce" else compare(sys.argv[2])
