"""Kafka's partitioner (kafka-format.md §13) and the accumulator, native and twin side by side."""
from __future__ import annotations

import os
import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

import engine
from engine.record import twins
from engine.clients.accumulator import ProducerBatch

# clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.testMurmur2
KAFKA_VECTORS = {
    "21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


def test_murmur2_matches_kafkas_vectors(producer_impl):
    for text, expected in KAFKA_VECTORS.items():
        assert producer_impl.murmur2(text.encode()) == expected


def test_murmur2_matches_kafka_python_on_random_keys(producer_impl):
    rng = random.Random(7)
    for n in range(300):
        key = bytes(rng.randrange(256) for _ in range(n % 37))
        ours = producer_impl.murmur2(key)
        assert ours & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF
        assert -2**31 <= ours < 2**31


def test_key_partitions_of_a_column_are_kafkas_partition_of_each_key(producer_impl):
    """A column's keys (a pyarrow array, sliced, with nulls; or its buffers) partitioned at once, each as Kafka's
    partitioner places it (kafka-python's murmur2 the model), -1 where the key is null."""
    import pyarrow as pa

    rng = random.Random(11)
    keys = [t.encode() for t in KAFKA_VECTORS] + [None, b""] + [
        None if rng.random() < 0.1 else rng.randbytes(rng.randrange(40)) for _ in range(500)]
    column = pa.array([b"x"] * 3 + keys, pa.binary()).slice(3)
    for count in (1, 3, 7, 1000):
        want = [-1 if k is None else (kafka_python_murmur2(k) & 0x7FFFFFFF) % count for k in keys]
        assert list(memoryview(producer_impl.key_partitions(column, count)).cast("i")) == want
    plain = pa.array([k for k in keys if k is not None], pa.binary())
    _, offsets, data = plain.buffers()
    want = [(kafka_python_murmur2(k) & 0x7FFFFFFF) % 5 for k in keys if k is not None]
    assert list(memoryview(producer_impl.key_partitions((data, offsets), 5)).cast("i")) == want
    with pytest.raises(ValueError):
        producer_impl.key_partitions(column, 0)
    with pytest.raises(engine.InvalidRecordError):
        producer_impl.key_partitions((b"ab", bytes(memoryview(__import__("array").array("i", [0, 5])))), 3)


def accumulator(producer_impl, sealed, **kw):
    holder = {}
    acc = producer_impl.RecordAccumulator(batch_size=kw.pop("batch_size", 1000), max_request_size=1 << 20,
                                  lookup=lambda topic: (kw.get("partitions", 5), 1048588),
                                  drain=lambda batch: None, on_full=lambda: sealed.extend(holder["a"].take_sealed()),
                                  seed=3, partitioner=kw.get("partitioner"))
    holder["a"] = acc
    return acc


def test_keyed_records_go_where_java_puts_them(producer_impl):
    sealed = []
    acc = accumulator(producer_impl, sealed)
    for i in range(200):
        key = os.urandom(i % 20 + 1)
        f = acc.send("t", value=b"v", key=key)
        assert f.batch.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 5


def test_null_keys_stick_to_a_partition_until_batch_size_bytes(producer_impl):
    sealed = []
    acc = accumulator(producer_impl, sealed, batch_size=1000)
    parts = [acc.send("t", value=bytes(79)).batch.partition for _ in range(100)]  # 100 bytes each with overhead
    runs = [parts[i:i + 10] for i in range(0, 100, 10)]
    assert all(len(set(run)) == 1 for run in runs)  # 10 records = batch_size bytes, then a new pick
    assert len(set(parts)) > 1


def test_batches_seal_at_batch_size_and_keep_order(producer_impl):
    sealed = []
    acc = accumulator(producer_impl, sealed, batch_size=500)
    futures = [acc.send("t", value=b"%03d" % i + bytes(60), partition=1) for i in range(50)]
    acc.seal_all()
    sealed.extend(acc.take_sealed())
    assert [f.index for f in futures[:3]] == [0, 1, 2]
    values = [r.value[:3] for b in sealed for r in engine.RecordBatch(b.records.build()).records()]
    assert values == [b"%03d" % i for i in range(50)]
    assert all(61 + 84 * len(b.records) <= 500 for b in sealed)  # 21 + 63 bytes per record estimate


def test_native_and_twin_accumulators_agree():
    pytest.importorskip("engine._native._accumulator")
    outcomes = []
    for impl in ("cython", "python"):
        sealed = []
        acc = accumulator(twins.load("accumulator", impl), sealed, batch_size=300)
        for i in range(300):
            acc.send("t", value=b"x" * (i % 40), key=None if i % 3 else b"k%d" % i, timestamp_ms=i,
                     headers=[("h", b"1")] if i % 7 == 0 else None)
        acc.seal_all()
        sealed.extend(acc.take_sealed())
        outcomes.append([(b.partition, b.records.build(compression="lz4", producer_id=9, producer_epoch=1,
                                                        base_sequence=b.partition * 1000)) for b in sealed])
    assert outcomes[0] == outcomes[1]  # byte for byte
    records = [r for _, data in outcomes[0] for r in engine.RecordBatch(data).records()]
    assert [r.timestamp for r in sorted(records, key=lambda r: r.timestamp)] == list(range(300))
    assert sum(1 for r in records if r.headers == [("h", b"1")]) == len(range(0, 300, 7))


def test_linger_expiry_seals_only_old_batches(producer_impl):
    sealed = []
    acc = accumulator(producer_impl, sealed)
    a = acc.send("t", value=b"a", partition=0, timestamp_ms=0).batch
    assert acc.seal_expired(a.created_ms + 5, 10) == a.created_ms + 10
    assert acc.take_sealed() == []
    assert acc.seal_expired(a.created_ms + 10, 10) == -1
    assert acc.take_sealed() == [a]
    assert isinstance(a, ProducerBatch)


def test_custom_partitioner_result_is_checked(producer_impl):
    from engine.common.errors import UnknownTopicOrPartitionError
    acc = accumulator(producer_impl, [], partitioner=lambda key, allp, avail: 9)
    with pytest.raises(UnknownTopicOrPartitionError):
        acc.send("t", value=b"v")


def test_records_builder_matches_encode_batch(codec):
    b = codec.RecordsBuilder()
    rows = [(b"k", b"v" * 50, [(b"h", None)], 10), (None, None, None, 5), (b"", b"x", None, 2**40)]
    assert [b.append(*row) for row in rows] == [0, 1, 2]
    expected = engine.encode_batch([(k, v, [(h.decode(), hv) for h, hv in hs or []], ts) for k, v, hs, ts in rows],
                                   producer_id=3, producer_epoch=0, base_sequence=7)
    assert b.build(producer_id=3, producer_epoch=0, base_sequence=7) == expected
    assert b.info(0) == (10, 1, 50, 1) and b.info(1) == (5, -1, -1, -1) and len(b) == 3


def test_records_builder_refuses_what_is_not_bytes(codec):
    from engine.common.errors import InvalidRecordError
    b = codec.RecordsBuilder()
    for bad in [("k", b"v", None, 1), (b"k", 5, None, 1), (b"k", b"v", [("str-key", b"v")], 1)]:
        with pytest.raises(InvalidRecordError):
            b.append(*bad)
    with pytest.raises(InvalidRecordError):
        b.build()
