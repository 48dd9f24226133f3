"""Spark streaming from kafkalog and Spark writing into it, beside Spark's own paths in the same run.

- Streaming throughput: a Trigger.AvailableNow query reading a prepared log into Spark's `noop` sink, against
  Spark's file stream source reading the same rows from Parquet files into the same sink (records/s).
- End-to-end latency at a fixed input rate: an engine in this process appends records stamped with their send
  time (2,000/s) while a query with a 100 ms processing-time trigger reads them; for each record, the time from
  its send to the end of the micro-batch that read it (foreachBatch), p50 and p99. The floor is the engine's
  `hw_checkpoint_interval_ms` (set to 100 ms here) plus a trigger: a reader in another process only learns of
  records through that file.
Each kafkalog row is the JVM source or sink when its jar is built (engine.spark.jvm), with kafkalog's Python source
or sink beside it on the same rows.
- Writer rows/s: `df.write.format("kafkalog")` (staging tasks, one transactional commit), against Spark writing the
  same rows as Parquet, and against a tuple-yielding Python writer (`DataSourceWriter` fed Rows, building the
  same staged batches from Rows collected one by one) committed the same way.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time

import engine
from bench.runner import figure, rotated
from bench.spark import PYTHON_SOURCE, _session

RATE, LATENCY_SECONDS, HW_MS = 2000, 6, 100


def _log(directory: str, rows: int) -> None:
    with engine.open(directory) as e:
        e.create_topic("s", partitions=2)
        with e.producer(batch_size=1 << 20, linger_ms=50) as p:
            p.send_batch("s", [(b"k%d" % (i % 100), b"v" * 100, None, 1_700_000_000_000 + i) for i in range(rows)])


def stream_throughput(spark, scratch: str, rows: int, rep: int) -> list[float]:
    """(kafkalog stream records/s, Parquet file stream records/s, kafkalog's Python source stream records/s) over
    the same rows."""
    log = tempfile.mkdtemp(dir=scratch)
    _log(log, rows)
    parquet = os.path.join(scratch, f"rows-{rows}")
    if not os.path.exists(parquet):
        spark.read.format("kafkalog").option("subscribe", "s").load(log).write.parquet(parquet)

    def run(reader) -> float:
        start = time.perf_counter()
        q = (reader.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(dir=scratch))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        return rows / (time.perf_counter() - start)
    def ours(name: str):
        return spark.readStream.format(name).option("subscribe", "s").option("startingOffsets", "earliest").load(log)
    return rotated(rep, [lambda: run(ours("kafkalog")),
                         lambda: run(spark.readStream.schema(spark.read.parquet(parquet).schema).parquet(parquet)),
                         lambda: run(ours(PYTHON_SOURCE))])


def latency(spark, scratch: str) -> tuple[float, float]:
    """(p50, p99) in ms from a record's send to the end of the micro-batch that read it."""
    log = tempfile.mkdtemp(dir=scratch)
    seen: list[float] = []
    with engine.open(log, hw_checkpoint_interval_ms=HW_MS) as e:
        e.create_topic("s", partitions=2)
        stop = threading.Event()

        def writer():
            with e.producer(linger_ms=0) as p:
                next_at = time.time()
                while not stop.is_set():
                    p.send("s", value=b"x", timestamp_ms=int(time.time() * 1000))
                    next_at += 1 / RATE
                    time.sleep(max(0.0, next_at - time.time()))

        def collect(df, _batch_id):
            stamps = [r[0] for r in df.selectExpr("CAST(unix_millis(timestamp) AS LONG)").collect()]
            now = time.time() * 1000
            seen.extend(now - t for t in stamps)

        q = (spark.readStream.format("kafkalog").option("subscribe", "s").load(log).writeStream.foreachBatch(collect)
             .option("checkpointLocation", tempfile.mkdtemp(dir=scratch)).trigger(processingTime="100 milliseconds")
             .start())
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(LATENCY_SECONDS)
        stop.set()
        thread.join()
        # the last records reach the HW checkpoint the source reads and the query reads them: stopped then, it is
        # inside no foreachBatch call (a stop that interrupts one kills Spark's stream thread with a
        # StackOverflowError, in Spark's own check of the Py4J error's message)
        time.sleep(2 * HW_MS / 1000)
        q.processAllAvailable()
        q.stop()
    seen.sort()
    return statistics.median(seen), seen[int(len(seen) * 0.99)]


def writer_rates(spark, scratch: str, rows: int, rep: int) -> list[float]:
    """(kafkalog sink rows/s, Parquet rows/s, tuple-yielding Python writer rows/s, kafkalog's Python sink rows/s)
    for the same DataFrame."""
    df = spark.range(rows, numPartitions=4).selectExpr("CAST(id % 1000 AS STRING) AS key",
                                                       "repeat('v', 100) AS value").cache()
    df.count()

    def run(write) -> float:
        d = tempfile.mkdtemp(dir=scratch)
        with engine.open(d) as e:
            e.create_topic("w", partitions=4)
        start = time.perf_counter()
        write(d)
        return rows / (time.perf_counter() - start)
    out = rotated(rep, [
        lambda: run(lambda d: df.write.format("kafkalog").option("topic", "w").mode("append").save(d)),
        lambda: run(lambda d: df.write.parquet(os.path.join(d, "parquet"))),
        lambda: run(lambda d: df.write.format("kafkalog-rows").option("topic", "w").mode("append").save(d)),
        lambda: run(lambda d: df.write.format(PYTHON_SOURCE).option("topic", "w").mode("append").save(d))])
    df.unpersist()
    return out


def _row_source():
    """A Python data source writing the same staged files from Rows (the tuple path Spark offers)."""
    from pyspark.sql.datasource import DataSource, DataSourceWriter

    from engine.spark import sink

    class RowWriter(DataSourceWriter):
        def __init__(self, settings):
            self.settings, self.job = settings, f"rows-{os.getpid()}-{time.time_ns()}"

        def write(self, rows):
            import pyarrow as pa

            keys, values = [], []
            for row in rows:  # one Python object per row, as the tuple-yielding API hands them over
                keys.append(row.key.encode())
                values.append(row.value.encode())
            n = len(keys)
            batch = pa.RecordBatch.from_arrays([pa.array(values, pa.binary()), pa.array(keys, pa.binary())],
                                               ["value", "key"])
            return sink.stage(self.settings, self.job, [batch] if n else [])

        def commit(self, messages):
            sink.commit(self.settings, self.job, messages)

    class RowSource(DataSource):
        @classmethod
        def name(cls):
            return "kafkalog-rows"

        def writer(self, schema, overwrite):
            return RowWriter(sink.SinkSettings(self.options, schema, overwrite))

    return RowSource


def figures(quick: bool, scratch: str) -> list[dict]:
    rows = 200_000 if quick else 2_000_000
    reps = 1 if quick else 3
    spark = _session()
    spark.dataSource.register(_row_source())
    ours, files, python_stream = zip(*[stream_throughput(spark, scratch, rows, rep) for rep in range(reps)])
    p50s, p99s = zip(*[latency(spark, scratch) for _ in range(reps)])
    sink_rates, parquet, tuples, python_sink = zip(*[writer_rates(spark, scratch, rows, rep) for rep in range(reps)])
    return [
        figure(f"Spark stream (AvailableNow, noop sink) of {rows:,} records", list(ours), "records/s",
                "Spark file stream of the same rows (Parquet)", list(files), False, ratio_target=0.6),
        figure(f"Spark stream (AvailableNow, noop sink) of {rows:,} records", list(ours), "records/s",
                "kafkalog's Python source streaming the same rows", list(python_stream), False),
        figure(f"Spark stream end-to-end latency at {RATE:,} records/s, p50 (HW checkpoint every {HW_MS} ms, "
                f"100 ms trigger)", list(p50s), "ms", "the same, p99", list(p99s), True),
        figure(f"df.write.format('kafkalog') of {rows:,} rows (one transaction)", list(sink_rates), "rows/s",
                "Spark writing the same rows as Parquet", list(parquet), False, ratio_target=0.6),
        figure(f"df.write.format('kafkalog') of {rows:,} rows (one transaction)", list(sink_rates), "rows/s",
                "a tuple-yielding Python writer staging the same rows", list(tuples), False),
        figure(f"df.write.format('kafkalog') of {rows:,} rows (one transaction)", list(sink_rates), "rows/s",
                "kafkalog's Python sink writing the same rows", list(python_sink), False),
    ]
