"""The JVM sink's batch encoder (MemoryRecordsBuilder in engine/spark/jvm) held to Kafka's bytes and to the engine's
encoders: each uncompressed data batch Kafka's own producer wrote in the vectors, re-encoded on the JVM from its
records, is byte for byte Kafka's batch once the fields the committing producer and the log set are set alike; and
seeded random records encode on the JVM to exactly what each implementation's `encode_batch` makes of them. The JVM's
side runs as one `java` process (kafkalog.spark.EncoderCheck)."""
from __future__ import annotations

import random
import struct

import pytest

from engine.record import batch_format as bf
from engine.record import codec as selector
from engine.record import twins
from tests import vectors
from tests.spark.jvm_checks import run_check

pytestmark = pytest.mark.spark


def _jvm_batches(cases: list[list[tuple]], tmp_path) -> list[bytes]:
    """The JVM's batch of each case's (key, value, headers, timestamp) records."""
    def field(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    path = tmp_path / "cases"
    with open(path, "wb") as f:
        for records in cases:
            f.write(struct.pack(">i", len(records)))
            for key, value, headers, ts in records:
                f.write(struct.pack(">q", ts) + field(key) + field(value) + struct.pack(">i", len(headers)))
                for hk, hv in headers:
                    f.write(field(hk.encode()) + field(hv))
    lines = run_check("EncoderCheck", path)
    assert len(lines) == len(cases)
    return [bytes.fromhex(line) for line in lines]


def _as_staged(batch: bytes) -> bytes:
    """A producer's batch with the fields the sink's tasks leave to others as they leave them: base offset 0, leader
    epoch -1, no producer, not transactional; the CRC recomputed."""
    out = bytearray(batch)
    struct.pack_into(">qii", out, 0, 0, len(out) - bf.LOG_OVERHEAD, -1)
    attributes = struct.unpack_from(">h", out, bf.ATTRIBUTES_OFFSET)[0] & ~bf.TRANSACTIONAL_FLAG
    struct.pack_into(">h", out, bf.ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">qhi", out, bf.PRODUCER_ID_OFFSET, -1, -1, -1)
    struct.pack_into(">I", out, 17, selector.crc32c(memoryview(out)[bf.ATTRIBUTES_OFFSET:]))
    return bytes(out)


def test_kafkas_uncompressed_batches_encode_on_the_jvm_to_kafkas_bytes(tmp_path):
    cython = twins.load("codec", "cython")
    cases, expected = [], []
    for _, path, _ in vectors.all_logs():
        for batch in cython.iter_batches(path.read_bytes()):
            records = list(batch.records())
            if batch.is_control or batch.compression != "none" or batch.timestamp_type != "create" or not records \
                    or [r.offset - batch.base_offset for r in records] != list(range(batch.last_offset_delta + 1)):
                continue  # only what a producer's MemoryRecordsBuilder makes: uncompressed data batches
            cases.append([(r.key, r.value, list(r.headers), r.timestamp) for r in records])
            expected.append(_as_staged(bytes(batch.buffer[:batch.size_in_bytes])))
    assert len(cases) >= 5, "the vectors hold uncompressed producer batches"
    assert [b.hex() for b in _jvm_batches(cases, tmp_path)] == [b.hex() for b in expected]


def _random_records(rng: random.Random) -> list[tuple]:
    def blob(null_ok: bool = True) -> bytes | None:
        if null_ok and rng.random() < 0.2:
            return None
        return rng.randbytes(rng.choice([0, 1, 7, 63, 64, 200, 20_000]))
    base = rng.choice([0, 1_700_000_000_000, 2**62])
    return [(blob(), blob(), [(rng.choice(["", "k", "trace-id", "é" * 70]), blob()) for _ in range(rng.randrange(4))],
             base + rng.randrange(-10**6, 10**6) if base else rng.randrange(0, 10**6))
            for _ in range(rng.choice([1, 2, 3, 50, 130]))]


@pytest.mark.parametrize("impl", ["cython", "python"])
def test_random_records_encode_on_the_jvm_as_each_implementation_encodes_them(impl, tmp_path):
    codec = twins.load("codec", impl)
    rng = random.Random(71)
    cases = [_random_records(rng) for _ in range(300)]
    got = _jvm_batches(cases, tmp_path)
    for records, jvm_batch in zip(cases, got):
        assert jvm_batch == codec.encode_batch(records), records[:2]
