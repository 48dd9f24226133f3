"""spark.read.format("kafkalog") against Kafka's own vectors and against a pure-Python reference read
(the twin codec walking the `.log` files: not the reader, index or columnar code the source uses)."""
from __future__ import annotations

import datetime
import os
import random
import shutil

import pytest

import engine
from engine.record import twins
from tests import vectors

pytestmark = pytest.mark.spark
TWIN = twins.load("codec", "python")
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def reads(spark):
    import engine.spark
    engine.spark.register(spark)

    def read(path, **options):
        r = spark.read.format("kafkalog")
        for k, v in options.items():
            r = r.option(k, v)
        return r.load(str(path))
    return read


def rows(df) -> list[tuple]:
    out = []
    for r in df.collect():
        headers = None if "headers" not in r or r["headers"] is None else \
            [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]]
        ts = r["timestamp"]
        ms = None if ts is None else int(round(ts.timestamp() * 1000))
        out.append((r["topic"], r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]), ms, r["timestampType"], headers))
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def reference(path, topics=None, headers=False) -> list[tuple]:
    """Every data record of every partition directory under `path`, read with the twin codec (headers
    only when asked, as the source returns them only with includeHeaders)."""
    out = []
    for entry in sorted(os.listdir(path)):
        topic, _, part = entry.rpartition("-")
        if not part.isdigit() or (topics and topic not in topics):
            continue
        for name in sorted(f for f in os.listdir(os.path.join(path, entry)) if f.endswith(".log")):
            with open(os.path.join(path, entry, name), "rb") as f:
                data = f.read()
            for batch in TWIN.iter_batches(data):
                if batch.is_control:
                    continue
                tstype = 1 if batch.timestamp_type == "log_append" else 0
                for r in batch.records():
                    out.append((topic, int(part), r.offset, r.key, r.value, r.timestamp, tstype,
                                (r.headers or None) if headers else None))
    return out


# --- Kafka's vectors ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kafka_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-written")
    for case in vectors.CASES:  # each case folder is a partition directory: <topic>-<partition>
        shutil.copytree(vectors.case_dir(case), root / case)
    return root


def expected_from_dump(case: str) -> list[tuple]:
    topic, part = case.rsplit("-", 1)
    out, tstype = [], 0
    for line in vectors.expected(case):
        if line["type"] == "batch":
            tstype = 1 if line["timestampType"] == "LogAppendTime" else 0
        elif line["type"] == "record" and "control" not in line:
            headers = [(h["key"], vectors.b64(h["valueB64"])) for h in line["headers"]] or None
            out.append((topic, int(part), line["offset"], vectors.b64(line["keyB64"]),
                        vectors.b64(line["valueB64"]), line["timestamp"], tstype, headers))
    return out


def test_kafka_written_directories_read_exactly(reads, kafka_dir):
    for case in vectors.CASES:
        topic = case.rsplit("-", 1)[0]
        got = rows(reads(kafka_dir, subscribe=topic, includeHeaders="true"))
        assert got == expected_from_dump(case), case
    assert any(r[6] == 1 for c in vectors.CASES for r in expected_from_dump(c))  # LogAppendTime is covered


def test_headers_only_when_asked(reads, kafka_dir):
    df = reads(kafka_dir, subscribe="basic")
    assert "headers" not in df.columns
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert all(f.nullable for f in df.schema.fields)


def test_reading_changes_nothing_on_disk(reads, kafka_dir):
    before = {p: (os.path.getsize(p), os.path.getmtime(p)) for p in kafka_dir.rglob("*") if p.is_file()}
    reads(kafka_dir, subscribePattern=".*").count()
    after = {p: (os.path.getsize(p), os.path.getmtime(p)) for p in kafka_dir.rglob("*") if p.is_file()}
    assert before == after


# --- a directory kafkalog wrote ------------------------------------------------------------------
@pytest.fixture(scope="module")
def own_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("own") / "data"
    with engine.open(str(path), clock=engine.ManualClock(T0)) as e:
        e.create_topic("mix", partitions=3, config={"segment.bytes": 4096})
        e.create_topic("other", partitions=1)
        e.create_topic("appendtime", config={"message.timestamp.type": "LogAppendTime"})
        for n, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
            with e.producer(compression_type=codec, batch_size=700) as p:
                for i in range(120):
                    k = n * 1000 + i
                    p.send("mix", key=b"key-%d" % (k % 17), value=None if k % 29 == 0 else b"value-%d" % k,
                           headers=[("n", b"%d" % k)] if k % 5 == 0 else None, timestamp_ms=T0 + k)
        with e.producer() as p:
            for i in range(10):
                p.send("other", value=b"o%d" % i, timestamp_ms=T0 + i)
                p.send("appendtime", value=b"a%d" % i, timestamp_ms=5)
    return path


def test_a_kafkalog_directory_with_every_codec(reads, own_dir):
    got = rows(reads(own_dir, subscribe="mix,other,appendtime", includeHeaders="true"))
    assert got == sorted(reference(own_dir, headers=True), key=lambda x: x[:3])
    assert len(got) == 620 and {r[6] for r in got if r[0] == "appendtime"} == {1}


def test_offset_and_timestamp_ranges(reads, own_dir):
    ref = [r for r in reference(own_dir, {"mix"})]
    got = rows(reads(own_dir, subscribe="mix", startingOffsets='{"mix": {"0": 5, "1": -2, "2": 30}}',
                     endingOffsets='{"mix": {"0": 50, "1": -1, "2": 31}}'))
    bounds = {0: (5, 50), 1: (0, 10**9), 2: (30, 31)}
    assert got == sorted(r for r in ref if bounds[r[1]][0] <= r[2] < bounds[r[1]][1])
    got = rows(reads(own_dir, subscribe="mix", startingTimestamp=str(T0 + 2000)))
    firsts = {p: min((r[2] for r in ref if r[1] == p and r[5] >= T0 + 2000), default=None) for p in range(3)}
    assert got == sorted(r for r in ref if firsts[r[1]] is not None and r[2] >= firsts[r[1]])
    got = rows(reads(own_dir, subscribe="mix", startingOffsetsByTimestamp=f'{{"mix": {{"0": {T0 + 100}, '
                     f'"1": {T0}, "2": {T0 + 1000}}}}}', endingTimestamp=str(T0 + 3000)))
    start = {0: T0 + 100, 1: T0, 2: T0 + 1000}
    firsts = {p: min(r[2] for r in ref if r[1] == p and r[5] >= start[p]) for p in range(3)}
    ends = {p: min(r[2] for r in ref if r[1] == p and r[5] >= T0 + 3000) for p in range(3)}
    assert got == sorted(r for r in ref if firsts[r[1]] <= r[2] < ends[r[1]])


def test_timestamp_past_the_end(reads, own_dir):
    late = str(T0 + 10**9)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        reads(own_dir, subscribe="other", startingTimestamp=late).count()
    assert reads(own_dir, subscribe="other", startingTimestamp=late,
                 startingOffsetsByTimestampStrategy="latest").count() == 0


def test_subscribe_pattern_and_assign(reads, own_dir):
    assert {r[0] for r in rows(reads(own_dir, subscribePattern="mi.|oth.*"))} == {"mix", "other"}
    got = rows(reads(own_dir, assign='{"mix": [2], "other": [0]}'))
    assert got == sorted(r for r in reference(own_dir) if (r[0], r[1]) in {("mix", 2), ("other", 0)})
    with pytest.raises(Exception, match="assign"):
        reads(own_dir, assign='{"mix": [7]}').count()


def test_splits_keep_the_result(reads, own_dir):
    whole = reads(own_dir, subscribe="mix")
    split = reads(own_dir, subscribe="mix", minPartitions="7")
    by_size = reads(own_dir, subscribe="mix", maxBytesPerPartition="4096")
    assert whole.rdd.getNumPartitions() == 3
    assert split.rdd.getNumPartitions() >= 7 and by_size.rdd.getNumPartitions() > 3
    assert rows(split) == rows(whole) == rows(by_size)


@pytest.mark.parametrize("pushdown", ["true", "false"])
def test_filters_with_and_without_pushdown(spark, reads, own_dir, pushdown):
    import engine.spark
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    engine.spark.register(spark)
    try:
        df = reads(own_dir, subscribe="mix")
        cut = datetime.datetime.fromtimestamp((T0 + 2500) / 1000)
        got = rows(df.filter((df.partition.isin(0, 2)) & (df["offset"] >= 20) & (df["offset"] < 90)
                             & (df.timestamp < cut)))
        ref = reference(own_dir, {"mix"})
        assert got == sorted(r for r in ref if r[1] in (0, 2) and 20 <= r[2] < 90 and r[5] < T0 + 2500)
        got = rows(df.filter((df.timestamp >= cut) & (df.partition == 1)))
        assert got == sorted(r for r in ref if r[1] == 1 and r[5] >= T0 + 2500)
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
        engine.spark.register(spark)


def test_pushed_filters_leave_sparks_plan(spark, reads, own_dir):
    import engine.spark
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    engine.spark.register(spark)
    try:
        df = reads(own_dir, subscribe="mix")
        plan = df.filter((df.partition == 1) & (df["offset"] > 3) & df.value.isNotNull())._jdf \
            .queryExecution().executedPlan().toString()
        kept = [line for line in plan.splitlines() if "Filter" in line]
        assert kept and "isnotnull(value" in kept[0] and "> 3" not in kept[0] and "= 1)" not in kept[0]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
        engine.spark.register(spark)


# --- data loss ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trimmed_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("trimmed") / "data"
    with engine.open(str(path), clock=engine.ManualClock(T0)) as e:
        e.create_topic("t", config={"segment.bytes": 1024})
        with e.producer(batch_size=200) as p:
            for i in range(200):
                p.send("t", value=b"v%03d" % i, timestamp_ms=T0 + i)
        lg = e.log("t", 0)
        lg.delete_records(100)
        lg.delete_old_segments()
        start = lg.log_start_offset
    return path, start


def test_fail_on_data_loss(reads, trimmed_dir):
    path, start = trimmed_dir
    assert start >= 100
    with pytest.raises(Exception, match="failOnDataLoss"):
        reads(path, subscribe="t", startingOffsets='{"t": {"0": 0}}').count()
    got = rows(reads(path, subscribe="t", startingOffsets='{"t": {"0": 0}}', failOnDataLoss="false"))
    assert [r[2] for r in got] == list(range(start, 200))
    assert [r[2] for r in rows(reads(path, subscribe="t"))] == list(range(start, 200))  # earliest is no loss


def test_gaps_and_markers_are_not_data_loss(reads, kafka_dir):
    """compacted-0 has offset gaps, txn-0 ends ranges on markers: strict reads neither fail nor hang."""
    for case in ("compacted-0", "txn-0"):
        topic = case.rsplit("-", 1)[0]
        expect = expected_from_dump(case)
        last = max(line["lastOffset"] for line in vectors.expected(case) if line["type"] == "batch")
        for end in range(0, last + 2, 3):
            got = rows(reads(kafka_dir, subscribe=topic, endingOffsets=f'{{"{topic}": {{"0": {end}}}}}',
                             includeHeaders="true"))
            assert got == [r for r in expect if r[2] < end], (case, end)


# --- bad options -------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, named", [
    ({"subscribe": "mix", "kafka.bootstrap.servers": "x:9092"}, "kafka.bootstrap.servers"),
    ({"subscribe": "mix", "assign": '{"mix": [0]}'}, "subscribe"),
    ({}, "subscribe"),
    ({"subscribe": "mix", "startingOffsets": "{not json"}, "startingOffsets"),
    ({"subscribe": "mix", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "mix", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "mix", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "mix", "kafka.isolation.level": "read_commited"}, "kafka.isolation.level"),
    ({"subscribe": "mix", "kafka.isolation.level": "read_committed", "isolation.level": "read_uncommitted"},
     "isolation.level"),
    ({"subscribePattern": "("}, "subscribePattern"),
    ({"subscribe": "mix", "maxDecompressedBytes": "0"}, "maxDecompressedBytes"),
    ({"subscribe": "mix,../etc"}, "subscribe"),
    ({"assign": '{"mix": [-1]}'}, "assign"),
    ({"subscribe": "mix", "startingOffsets": '{"a/b": {"0": 1}}'}, "startingOffsets"),
])
def test_bad_options_name_the_option(reads, own_dir, options, named):
    with pytest.raises(Exception, match=named.replace(".", r"\.")):
        reads(own_dir, **options).count()


def test_the_decompression_limit_is_an_option(reads, own_dir):
    """Compressed batches of `mix` inflate to about 700 bytes: a 100-byte limit refuses them on the executor."""
    assert reads(own_dir, subscribe="mix", maxDecompressedBytes=str(1 << 20)).count() == 600
    with pytest.raises(Exception, match="RecordTooLargeError"):
        reads(own_dir, subscribe="mix", maxDecompressedBytes="100").count()


# --- read_committed ------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["kafka.isolation.level", "isolation.level"])
def test_read_committed_on_kafkas_txn_vector(reads, kafka_dir, option):
    """Kafka's txn-0: 7002's aborted transaction [6, 14] is skipped and nothing at or past 7001's open transaction
    (offset 22) is read; the expected rows come from Kafka's own decode and its `.txnindex`."""
    lines = vectors.expected("txn-0")
    aborted = [(t["producerId"], t["firstOffset"], t["lastOffset"]) for t in lines if t["type"] == "abortedTxn"]
    producers = {line["baseOffset"]: line for line in lines if line["type"] == "batch"}
    batch_of = {}
    for line in lines:
        if line["type"] == "batch":
            current = line
        elif line["type"] == "record":
            batch_of[line["offset"]] = current
    want = [r for r in expected_from_dump("txn-0") if r[2] < 22 and not (
        batch_of[r[2]]["isTransactional"] and any(pid == batch_of[r[2]]["producerId"] and lo <= r[2] <= hi
                                                  for pid, lo, hi in aborted))]
    assert producers and len(want) < len(expected_from_dump("txn-0"))
    got = rows(reads(kafka_dir, subscribe="txn", includeHeaders="true", **{option: "read_committed"}))
    assert got == want
    assert rows(reads(kafka_dir, subscribe="txn", includeHeaders="true")) == expected_from_dump("txn-0")


def test_read_committed_returns_exactly_the_committed_rows(reads, tmp_path):
    """Transactions committed, aborted and left open across small segments and several partitions, with plain
    records between them: Spark's read_committed rows equal a read_committed consumer's, split or not."""
    path = tmp_path / "data"
    with engine.open(str(path)) as e:
        e.create_topic("tx", partitions=2, config={"segment.bytes": 2048})
        plain = e.producer()
        producers = [e.producer(transactional_id=f"p{i}") for i in range(2)]
        for p in producers:
            p.init_transactions()
        for round_ in range(12):
            for i, p in enumerate(producers):
                p.begin_transaction()
                for k in range(5):
                    p.send("tx", b"r%d-p%d-%d" % (round_, i, k), partition=(round_ + k) % 2)
                plain.send("tx", b"plain-%d-%d" % (round_, i), partition=i).get()
                if round_ < 11 or i == 0:
                    p.commit_transaction() if (round_ + i) % 3 else p.abort_transaction()
                else:
                    p.flush()  # p1's last transaction stays open
        c = e.consumer(isolation_level="read_committed", auto_offset_reset="earliest", consumer_timeout_ms=0)
        c.assign([engine.TopicPartition("tx", p) for p in (0, 1)])
        want = sorted((r.partition, r.offset, r.value) for r in c)
        assert any(b"p1-" in v for _, _, v in want) and not any(v.startswith(b"r11-p1") for _, _, v in want)
        for part in (0, 1):
            assert e.log("tx", part).last_stable_offset < e.log("tx", part).high_watermark
        e.flush()
        for p in producers:
            p.close()
        plain.close()
        snapshot = str(tmp_path / "copy")
        shutil.copytree(str(path), snapshot)  # the engine's directory as another process would see it
    for options in ({}, {"maxBytesPerPartition": "1024", "minPartitions": "7"}):
        got = [(r[1], r[2], r[4]) for r in rows(reads(snapshot, subscribe="tx", **{"kafka.isolation.level":
                                                                                  "read_committed"}, **options))]
        assert got == want, options


def test_repeated_distinct_and_null_values_read_exactly(reads, tmp_path):
    """Keys and values that repeat (the JVM source hands them to Spark as one dictionary entry each), that stop
    repeating within a batch of rows (more distinct values than a dictionary takes: the rows so far become plain
    bytes), that repeat again after a run of distinct ones, with nulls and empty values among them: every row as
    the twin codec reads the segments."""
    path = tmp_path / "data"
    rng = random.Random(5)
    cycle = [b"", b"same", b"x" * 300] + [b"v%d" % i for i in range(40)]
    with engine.open(str(path)) as e:
        e.create_topic("r", partitions=1)
        with e.producer(batch_size=1 << 16) as p:
            for i in range(90_000):
                phase = (i // 7_000) % 3
                if i % 97 == 0:
                    value = None
                elif phase == 0:
                    value = cycle[i % len(cycle)]
                elif phase == 1:
                    value = rng.randbytes(rng.randrange(0, 40))
                else:
                    value = b"run" if i % 500 else b"break-%d" % i
                key = None if i % 13 == 0 else b"k%d" % (i % 3 if phase != 1 else i)
                p.send("r", key=key, value=value, partition=0)
    got = [(r[2], r[3], r[4]) for r in rows(reads(path, subscribe="r"))]
    assert got == [(o, k, v) for _, _, o, k, v, _, _, _ in reference(path, topics=["r"])]
    assert len(got) == 90_000 and sum(v is None for _, _, v in got) == len(range(0, 90_000, 97))


def _by_partition(df, *columns):
    from pyspark.sql import functions as F
    out = df.groupBy(*columns).agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b"))
    got = sorted(tuple(r) for r in out.collect())
    return got, out._jdf.queryExecution().executedPlan().toString()


def test_aggregates_and_joins_grouped_by_partition(spark, reads, own_dir):
    """Where each partition is one task, the JVM source tells Spark its rows are grouped by partition (by topic and
    partition when it reads several topics), so an aggregate or a join by those columns runs without a shuffle.
    Every shape gives the reference's answer on both paths: one topic, several topics grouped by partition alone
    (partition 0 of two topics is one group), partitions split into several tasks, a union of two scans, a join of
    two scans by partition, and a count that reads no partition column."""
    import engine.spark
    jvm = engine.spark.register(spark) == "jvm"
    ref = reference(own_dir)

    def model(keep, key):
        groups: dict = {}
        for r in ref:
            if keep(r):
                n, b = groups.get(key(r), (0, 0))
                groups[key(r)] = (n + 1, b + (0 if r[4] is None else len(r[4])))  # sum skips nulls
        return sorted(k + (n, b) for k, (n, b) in groups.items())

    mix = model(lambda r: r[0] == "mix", lambda r: (r[1],))
    got, plan = _by_partition(reads(own_dir, subscribe="mix"), "partition")
    assert got == mix and ("Exchange" in plan) != jvm, plan
    got, plan = _by_partition(reads(own_dir, subscribe="mix", minPartitions="7"), "partition")
    assert got == mix and "Exchange" in plan, plan   # a partition in several tasks: Spark shuffles
    two = reads(own_dir, subscribe="mix,other")
    got, plan = _by_partition(two, "partition")
    assert got == model(lambda r: r[0] in ("mix", "other"), lambda r: (r[1],)) and "Exchange" in plan, plan
    got, plan = _by_partition(two, "topic", "partition")
    assert got == model(lambda r: r[0] in ("mix", "other"), lambda r: (r[0], r[1])) and ("Exchange" in plan) != jvm
    got, _ = _by_partition(reads(own_dir, subscribe="mix").union(reads(own_dir, subscribe="other")), "partition")
    assert got == model(lambda r: r[0] in ("mix", "other"), lambda r: (r[1],))
    left = reads(own_dir, subscribe="mix").groupBy("partition").count().withColumnRenamed("count", "m")
    right = reads(own_dir, subscribe="other").groupBy("partition").count().withColumnRenamed("count", "o")
    joined = sorted(tuple(r) for r in left.join(right, "partition", "left").collect())
    others = {p: n for (p, n, _) in model(lambda r: r[0] == "other", lambda r: (r[1],))}
    assert joined == [(p, n, others.get(p)) for (p, n, _) in mix]
    assert reads(own_dir, subscribe="mix").count() == sum(n for (_, n, _) in mix)
