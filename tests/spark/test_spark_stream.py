"""Spark Structured Streaming from a growing log (engine.spark.stream), DataFrames written into kafkalog
(engine.spark.sink), and the batch source's parity with Spark's Kafka source."""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys

import pytest

import engine
from engine import TopicPartition
from tests.crash.children import ROOT
from tests.log_checks import read_log

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("registered")]


def _append(log, first: int, count: int, seconds: float = 60) -> int:
    """Run tests/spark/appender.py, a writer in another process; returns the next number it would write."""
    out = subprocess.run([sys.executable, "-m", "tests.spark.appender", str(log), str(first), str(count),
                          str(seconds)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return int(out.stdout.split()[-1])


def _stream(spark, log, **options):
    reader = spark.readStream.format("kafkalog").option("subscribe", "t").option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(log))


def _to_files(df, out, checkpoint, **trigger):
    return (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def _rows(spark, out) -> list[tuple[int, int, int]]:
    return [(r.partition, r.offset, int(r.value)) for r in spark.read.parquet(str(out)).collect()]


def _check_exactly_once(rows, written: int, log) -> None:
    assert sorted(v for _, _, v in rows) == list(range(written))  # every record once
    with engine.open(log, background=False) as e:
        for p in range(e.partitions_for("t")):
            offsets = sorted(o for q, o, _ in rows if q == p)
            assert offsets == list(range(e.log("t", p).log_end_offset)), f"partition {p}: gaps or duplicates"


def test_a_stream_follows_a_log_another_process_appends_to(spark, tmp_path):
    log, out, checkpoint = tmp_path / "log", tmp_path / "out", tmp_path / "checkpoint"
    with engine.open(log) as e:
        e.create_topic("t", 3)
    writer = subprocess.Popen([sys.executable, "-m", "tests.spark.appender", str(log), "0", "100000", "4"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    query = _to_files(_stream(spark, log, maxOffsetsPerTrigger=700), out, checkpoint, processingTime="200 milliseconds")
    try:
        written = int(writer.communicate(timeout=300)[0].split()[-1])
        query.processAllAvailable()
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) > 1
    assert max(p["numInputRows"] for p in progress) <= 700  # maxOffsetsPerTrigger held
    for before, after in zip(progress, progress[1:]):  # micro-batches follow each other in offset order
        assert json.loads(after["sources"][0]["startOffset"]) == json.loads(before["sources"][0]["endOffset"])
    drain = _to_files(_stream(spark, log), out, checkpoint, availableNow=True)  # the rest, if any, from the checkpoint
    drain.awaitTermination(300)
    _check_exactly_once(_rows(spark, out), written, log)

    more = _append(log, written, 500)  # appended while no query runs; a restart continues where it stopped
    again = _to_files(_stream(spark, log), out, checkpoint, availableNow=True)
    again.awaitTermination(300)
    _check_exactly_once(_rows(spark, out), more, log)


def test_partitions_added_later_are_read_from_their_start(spark, tmp_path):
    log, out, checkpoint = tmp_path / "log", tmp_path / "out", tmp_path / "checkpoint"
    with engine.open(log) as e:
        e.create_topic("t", 1)
    written = _append(log, 0, 50)
    _to_files(_stream(spark, log), out, checkpoint, availableNow=True).awaitTermination(300)
    with engine.open(log) as e:
        e.create_partitions("t", 3)
    written = _append(log, written, 90)
    _to_files(_stream(spark, log), out, checkpoint, availableNow=True).awaitTermination(300)
    rows = _rows(spark, out)
    assert {p for p, _, _ in rows} == {0, 1, 2}
    _check_exactly_once(rows, written, log)


def test_data_loss_follows_fail_on_data_loss(spark, tmp_path):
    log, out = tmp_path / "log", tmp_path / "out"
    with engine.open(log) as e:
        e.create_topic("t", 1)
    _append(log, 0, 20)
    start = _stream(spark, log, startingOffsets='{"t": {"0": 0}}')
    with engine.open(log) as e:
        e.log("t", 0).delete_records(10)  # retention passed the query's start before it read anything
    with pytest.raises(Exception, match="failOnDataLoss"):
        _to_files(start, out, tmp_path / "c1", availableNow=True).awaitTermination(300)
    _to_files(_stream(spark, log, startingOffsets='{"t": {"0": 0}}', failOnDataLoss="false"), out, tmp_path / "c2",
              availableNow=True).awaitTermination(300)
    assert sorted(v for _, _, v in _rows(spark, out)) == list(range(10, 20))


def test_the_seeds_late_vehicle_data_watermark(spark, tmp_path):
    """Seed 003: 5-minute windows, a 1-minute watermark, append mode; an idle partition does not hold it back."""
    log, out, checkpoint = tmp_path / "log", tmp_path / "out", tmp_path / "checkpoint"
    with engine.open(log) as e:
        e.create_topic("t", 2)  # events go to partition 0 only: partition 1 stays idle

    def event(hh_mm_ss: str) -> None:
        ts = datetime.datetime.fromisoformat(f"2024-06-01T{hh_mm_ss}+00:00")
        with engine.open(log) as e, e.producer() as p:
            p.send("t", value=hh_mm_ss.encode(), partition=0, timestamp_ms=int(ts.timestamp() * 1000))

    def windows() -> dict:
        query = (_stream(spark, log).withWatermark("timestamp", "1 minute")
                 .groupBy(__import__("pyspark.sql.functions", fromlist=["window"]).window("timestamp", "5 minutes"))
                 .count().selectExpr("date_format(window.start, 'HH:mm') AS start", "count")
                 .writeStream.format("parquet").outputMode("append").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(300)
        found = spark.read.parquet(str(out)).collect() if out.exists() and any(out.glob("*.parquet")) else []
        return {r.start: r["count"] for r in found}

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    event("12:03:43")
    event("12:05:23")
    assert "12:00" not in windows()  # the watermark (12:04:23) has not passed the window's end
    event("12:06:00")
    assert windows() == {"12:00": 1}  # now it has (12:05:00): the window is emitted, once
    event("12:04:49")
    assert windows() == {"12:00": 1}  # late: behind the watermark, dropped


# --- the writer ----------------------------------------------------------------------------------------------
def test_a_dataframe_written_reads_back_equal(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("out", 3)
    df = spark.createDataFrame(
        [(b"k%d" % i, b"v%d" % i, "out", i % 3, [("trace", b"t%d" % i)], datetime.datetime(2024, 1, 1, 0, 0, i))
         for i in range(30)],
        "key binary, value binary, topic string, partition int, headers array<struct<key:string,value:binary>>, "
        "timestamp timestamp")
    df.write.format("kafkalog").mode("append").save(str(log))
    back = (spark.read.format("kafkalog").option("subscribe", "out").option("includeHeaders", "true").load(str(log))
            .select("key", "value", "topic", "partition", "headers", "timestamp"))
    assert sorted(map(tuple, back.collect())) == sorted(map(tuple, df.collect()))
    assert not (log / ".kafkalog-staging").exists()


def test_bad_columns_and_modes_are_refused_naming_them(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("out")
    cases = [(spark.createDataFrame([(b"k",)], "key binary"), "column 'value'"),
             (spark.createDataFrame([(1,)], "value int"), "column 'value'"),
             (spark.createDataFrame([(b"v", 3)], "value binary, topic int"), "column 'topic'"),
             (spark.createDataFrame([(b"v",)], "value binary"), "column 'topic'")]
    for df, named in cases:
        with pytest.raises(Exception, match=named):
            df.write.format("kafkalog").mode("append").save(str(log))
    ok = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="append"):
        ok.write.format("kafkalog").option("topic", "out").mode("overwrite").save(str(log))
    with engine.open(log) as e:
        assert e.log("out", 0).log_end_offset == 0  # nothing was written by any of them


def test_a_write_the_topic_refuses_for_its_timestamps_fails_in_one_line(spark, tmp_path):
    """A row stamped 2100 on a topic whose message.timestamp.after.max.ms is an hour: the job fails, saying why on
    one line of its error, and nothing of it is appended."""
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("out", config={"message.timestamp.after.max.ms": 3_600_000})
    df = spark.createDataFrame([(b"now", None), (b"2100", datetime.datetime(2100, 1, 1))],
                               "value binary, timestamp timestamp")
    with pytest.raises(Exception) as err:
        df.write.format("kafkalog").option("topic", "out").mode("append").save(str(log))
    lines = [line for line in str(err.value).splitlines() if "InvalidTimestampError: " in line]
    assert lines and re.search(r"record \d+ of the batch has timestamp 41\d{11}, outside \[", lines[-1]), lines
    with engine.open(log) as e:
        assert e.log("out", 0).last_stable_offset == e.log("out", 0).log_end_offset  # the transaction was aborted
        with e.consumer("out", auto_offset_reset="earliest", consumer_timeout_ms=0,
                        isolation_level="read_committed") as c:
            assert list(c) == []


def test_a_million_rows_with_a_failed_task_land_exactly_once(tmp_path):
    """In its own Spark (local[2, 4]: tasks retry): one task fails after staging part of its rows."""
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("big", 4)
    mark = tmp_path / "failed-attempt"
    out = subprocess.run([sys.executable, "-m", "tests.spark.retried_write", str(log), "1000000"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "KAFKALOG_FAILED_ATTEMPT": str(mark)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert mark.read_text().endswith("attempt 0 failed")  # the injected failure happened, and Spark retried
    with engine.open(log) as e:
        c = e.consumer(isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False)
        tps = [TopicPartition("big", p) for p in range(4)]
        c.assign(tps)
        assert sum(c.end_offsets(tps).values()) > 1_000_000  # the records and the transaction's markers
        seen = set()
        for _ in range(100_000):
            if all(c.position(tp) >= c.end_offsets([tp])[tp] for tp in tps):
                break
            for records in c.poll(timeout_ms=0, max_records=500_000).values():
                seen.update(int(r.value) for r in records)
        assert seen == set(range(1_000_000))
    assert not (log / ".kafkalog-staging").exists()


def test_a_stream_written_into_kafkalog_is_exactly_once_across_restarts(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 2)
        e.create_topic("copy", 2)
    written = _append(log, 0, 300)
    copy = (_stream(spark, log).selectExpr("key", "value", "partition")
            .writeStream.format("kafkalog").option("topic", "copy").option("checkpointLocation", str(tmp_path / "c"))
            .trigger(availableNow=True))
    copy.start(str(log)).awaitTermination(300)
    written = _append(log, written, 200)
    copy.start(str(log)).awaitTermination(300)
    back = spark.read.format("kafkalog").option("subscribe", "copy").option("isolation.level", "read_committed")
    values = sorted(int(r.value) for r in back.load(str(log)).select("value").collect())
    assert values == list(range(written))
    assert not (log / ".kafkalog-staging").exists()  # every micro-batch's staged files went with its commit


# --- the batch source, as Spark's Kafka source ---------------------------------------------------------------
@pytest.mark.parametrize("options,named", [
    ({"startingOffsets": "latest"}, "startingOffsets"),
    ({"startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets"),
    ({"startingOffsets": '{"t": {"0": 0, "7": 0}}'}, "startingOffsets"),
    ({"endingOffsets": '{"t": {"0": 1, "3": 1}}'}, "endingOffsets"),
    ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
])
def test_batch_queries_refuse_what_sparks_kafka_source_refuses(spark, tmp_path, options, named):
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 1)
    reader = spark.read.format("kafkalog").option("subscribe", "t")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=named):
        reader.load(str(log)).collect()


def test_a_reader_in_another_process_sees_nothing_above_the_checkpointed_high_watermark(spark, tmp_path):
    log = tmp_path / "log"
    with engine.open(log, background=False) as e:
        e.create_topic("t", 1)
        p = e.producer(linger_ms=0)
        for i in range(10):
            p.send("t", value=b"%d" % i).get()
        e._logs.checkpoint_high_watermarks()
        for i in range(10, 20):
            p.send("t", value=b"%d" % i).get()

        def read():
            return spark.read.format("kafkalog").option("subscribe", "t").load(str(log)).count()
        assert read() == 10  # what the engine has not yet published is not read
        e._logs.checkpoint_high_watermarks()
        assert read() == 20
    assert os.path.exists(log / "replication-offset-checkpoint")


def test_a_micro_batch_committed_twice_lands_once(tmp_path):
    """Spark re-runs a micro-batch whose commit landed when it failed before recording it: the sink skips it."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from engine.spark import sink

    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 2)
    settings = sink.SinkSettings({"path": str(log), "topic": "t", "checkpointLocation": str(tmp_path / "c")},
                                 StructType([StructField("value", BinaryType())]), False)
    rows = pa.RecordBatch.from_arrays([pa.array([b"a", b"b", b"c"], pa.binary())], ["value"])
    for job in ("job", "job", "restarted"):  # the same batch id, staged and committed again (by a restarted query too)
        staged = sink.stage(settings, job, [rows])
        appended = sink.commit(settings, job, [staged], batch_id=7)
        assert appended == (0 if job == "restarted" else 3)  # a job landed before answers with the rows it appended
    assert sink.commit(settings, "job", [sink.stage(settings, "job", [rows])], batch_id=8) == 3
    with engine.open(log) as e:
        assert sorted(r[2] for p in range(2) for r in read_log(e, "t", partition=p)) == [b"a", b"a", b"b", b"b",
                                                                                          b"c", b"c"]
    assert not (log / ".kafkalog-staging").exists()


def test_admission_follows_sparks_kafka_rules(tmp_path):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from engine.spark import stream
    from engine.spark.source import Settings, spark_schema

    # maxOffsetsPerTrigger: prorated by lag, a share below one rounded up so no partition starves
    got = stream.rate_limit({("t", 0): 0, ("t", 1): 0, ("t", 2): 10}, {("t", 0): 1000, ("t", 1): 3, ("t", 2): 10}, 100)
    assert got == {("t", 0): 99, ("t", 1): 1, ("t", 2): 10}
    log = tmp_path / "log"
    with engine.open(log) as e:
        e.create_topic("t", 2)
    _append(log, 0, 40)
    options = {"path": str(log), "subscribe": "t", "startingOffsets": "earliest", "minOffsetsPerTrigger": "100",
               "maxTriggerDelay": "1h"}
    reader = stream.KafkalogStreamReader(Settings(options, streaming=True), spark_schema(False))
    start = reader.initialOffset()
    assert sum(start["t"].values()) == 0 and isinstance(reader.getDefaultReadLimit(), ReadMinRows)
    assert reader.latestOffset(start, ReadMinRows(100)) == start  # 40 new records: wait for 100
    assert sum(reader.latestOffset(start, ReadAllAvailable())["t"].values()) == 40  # a trigger that reads all
    reader.settings.max_trigger_delay_ms = 0
    assert sum(reader.latestOffset(start, ReadMinRows(100))["t"].values()) == 40  # waited long enough
    assert 0 < sum(reader.latestOffset(start, ReadMaxRows(10))["t"].values()) <= 10  # the limit Spark passes
    with pytest.raises(Exception, match="maxTriggerDelay"):
        Settings({**options, "maxTriggerDelay": "soon"}, streaming=True)
