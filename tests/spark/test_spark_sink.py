"""The kafkalog sink's rows as Kafka's producer would have written them, on the path the session serves (make test
runs this file on the JVM sink, whose tasks encode Kafka batches, and on the Python sink): keyed rows in the
partition Kafka's partitioner picks, rows without a key or partition spread over the topic, timestamps kept or
taken from the commit, each partition's rows in their order however many partitions a task writes, and rows Kafka
cannot store refused with Kafka's typed error, none of the write visible (the JVM's tasks refuse them before
anything is appended)."""
from __future__ import annotations

import datetime
import time

import pytest

import engine
from engine import TopicPartition
from engine.clients.accumulator import murmur2

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("registered")]

# Kafka's own murmur2 vectors (UtilsTest.testMurmur2) among the keys, with their hashes
KAFKA_KEYS = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
              "a-little-bit-longer-string": -1486304829, "abc": 479470107,
              "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}


def _records(log, topic: str, partitions: int) -> dict[int, list]:
    """Every committed record of `topic`, by partition, in offset order."""
    with engine.open(log) as e:
        c = e.consumer(isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        out: dict[int, list] = {p: [] for p in range(partitions)}
        while any(c.position(tp) < ends[tp] for tp in tps):
            for tp, records in c.poll(timeout_ms=0, max_records=100_000).items():
                out[tp.partition] += records
        c.close()
        return out


def test_keyed_rows_land_where_kafkas_partitioner_puts_them_and_keyless_rows_anywhere(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 7)
    assert all(murmur2(k.encode()) == h for k, h in KAFKA_KEYS.items())  # the model the rows are checked against
    keys = list(KAFKA_KEYS) + [f"device-{i}" for i in range(300)] + ["", "é"]
    rows = [(k, f"v{i}") for i, k in enumerate(keys)] + [(None, f"n{i}") for i in range(500)]
    spark.createDataFrame(rows, "key string, value string").repartition(3) \
        .write.format("kafkalog").option("topic", "t").mode("append").save(str(log))
    found = _records(log, "t", 7)
    keyed = {r.value.decode(): (p, r.key.decode()) for p, rs in found.items() for r in rs if r.key is not None}
    assert sorted(keyed) == sorted(f"v{i}" for i in range(len(keys)))
    for partition, key in keyed.values():
        assert partition == (murmur2(key.encode()) & 0x7FFFFFFF) % 7, key
    keyless = [r.value for rs in found.values() for r in rs if r.key is None]
    assert sorted(keyless) == sorted(f"n{i}".encode() for i in range(500))


def test_a_directory_without_a_catalogue_is_partitioned_by_its_partition_folders(spark, tmp_path):
    """A broker's directory has no kafkalog catalogue: the tasks count a topic's partitions from its folders (and the
    commit's engine adopts the directory)."""
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 3)
    (log / "kafkalog.metadata").unlink()
    keys = [f"k{i}" for i in range(60)]
    spark.createDataFrame([(k, k) for k in keys], "key string, value string") \
        .write.format("kafkalog").option("topic", "t").mode("append").save(str(log))
    found = _records(log, "t", 3)
    assert sorted(r.key.decode() for rs in found.values() for r in rs) == sorted(keys)
    assert all((murmur2(r.key) & 0x7FFFFFFF) % 3 == p for p, rs in found.items() for r in rs)


def test_timestamps_are_kept_and_missing_ones_are_the_commits(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 1)
    stamps = [None, datetime.datetime(2024, 5, 1, 12, 0, 0, 123000), None, None,
              datetime.datetime(2001, 1, 1), datetime.datetime(2024, 5, 1, 12, 0, 0, 122000), None]
    rows = [(b"%d" % i, ts) for i, ts in enumerate(stamps)]
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = spark.createDataFrame(rows, "value binary, timestamp timestamp").coalesce(1)
    before = int(time.time() * 1000)
    df.write.format("kafkalog").option("topic", "t").mode("append").save(str(log))
    after = int(time.time() * 1000)
    got = _records(log, "t", 1)[0]
    assert [r.value for r in got] == [v for v, _ in rows]  # one task, one partition: the rows' order
    for r, ts in zip(got, stamps):
        if ts is None:
            assert before <= r.timestamp <= after
        else:
            assert r.timestamp == int(ts.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def test_one_task_writing_many_partitions_keeps_each_partitions_order(spark, tmp_path):
    """One task spreads 48 MB over 64 partitions: more than the batches a JVM task keeps open at once (32 MiB), so
    partitions' batches are written before they are full; each partition still holds its rows in the task's order."""
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 64)
    n = 48_000
    spark.range(n, numPartitions=1).selectExpr(
        "CAST(id % 977 AS STRING) AS key", "concat(lpad(CAST(id AS STRING), 8, '0'), repeat('x', 992)) AS value") \
        .write.format("kafkalog").option("topic", "t").mode("append").save(str(log))
    found = _records(log, "t", 64)
    seen = []
    for p, records in found.items():
        ids = [int(r.value[:8]) for r in records]
        assert ids == sorted(ids), p
        assert all((murmur2(str(i % 977).encode()) & 0x7FFFFFFF) % 64 == p for i in ids)
        seen += ids
    assert sorted(seen) == list(range(n))


def test_batches_keep_within_the_topics_max_message_bytes_with_headers_and_all(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 1, config={"max.message.bytes": 50_000})
    n = 3_000
    df = spark.range(n, numPartitions=1).selectExpr(
        "CAST(id AS STRING) AS value", "repeat('k', 300) AS key",
        "IF(id % 3 = 0, array(named_struct('key', repeat('h', 200), 'value', CAST(repeat('x', 400) AS BINARY))), "
        "NULL) AS headers")
    df.write.format("kafkalog").option("topic", "t").mode("append").save(str(log))
    got = _records(log, "t", 1)[0]
    assert [int(r.value) for r in got] == list(range(n))
    assert [len(r.headers) for r in got] == [1 if i % 3 == 0 else 0 for i in range(n)]
    from engine.record.codec import iter_batches

    data = b"".join(p.read_bytes() for p in sorted((log / "t-0").glob("*.log")))
    sizes = [b.size_in_bytes for b in iter_batches(data) if not b.is_control]
    assert len(sizes) > 1 and max(sizes) <= 50_000, sizes


@pytest.mark.parametrize("rows,schema,options,error", [
    ([(b"v", datetime.datetime(1969, 12, 31, 23, 0))], "value binary, timestamp timestamp", {},
     "InvalidTimestampError"),
    ([(b"v", [("trace", b"t"), (None, b"x")])], "value binary, headers array<struct<key:string,value:binary>>", {},
     "InvalidRecordError"),
    ([(b"v", 0), (b"w", 3)], "value binary, partition int", {}, "UnknownTopicOrPartitionError"),
    ([(b"v", "t"), (b"w", "missing")], "value binary, topic string", {"topic": None}, "UnknownTopicOrPartitionError"),
    ([(b"v",)], "value binary", {"topic": "missing"}, "UnknownTopicOrPartitionError"),
])
def test_rows_kafka_cannot_store_fail_the_write_typed_and_commit_nothing(spark, tmp_path, rows, schema, options,
                                                                         error):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 3)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    writer = spark.createDataFrame(rows, schema).coalesce(1).write.format("kafkalog").mode("append")
    topic = options.get("topic", "t")
    if topic is not None:
        writer = writer.option("topic", topic)
    with pytest.raises(Exception, match=error):
        writer.save(str(log))
    assert _records(log, "t", 3) == {0: [], 1: [], 2: []}  # (a commit that had begun aborted its transaction)
    with engine.open(log) as e:
        assert all(e.log("t", p).last_stable_offset == e.log("t", p).log_end_offset for p in range(3))
    assert not (log / ".kafkalog-staging").exists()
