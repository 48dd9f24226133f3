"""Spark workloads: the same rows (16 B keys, 100 B values) read and aggregated by a local[2] Spark through
kafkalog's JVM data source, beside (a) Spark reading them from Parquet, (b) kafkalog's Python data source (what
Spark uses without the jar), (c) a Python data source that yields
ready-made Arrow batches of the same shape and does no work (the ceiling of Spark's Python data source
path) and (d) a Python data source that yields one tuple per row. In that log every value is the same 100 bytes,
which Parquet stores as one dictionary entry; a second log of 4 M records whose values are each their own random
bytes (what an event log holds) is read by the JVM source and from Parquet. A pushdown row aggregates the last 1% by
timestamp against the same aggregate over the whole log; `memory_curve` measures the Python workers' and the JVM's
peaks."""
from __future__ import annotations

import datetime
import os
import random
import shutil
import sys
import tempfile

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench.curves import peak_kib
from engine.spark.datasource import KafkalogDataSource
from bench.runner import Contender, Workload

KEY, VALUE, PARTITIONS, ARROW_ROWS = 16, 100, 2, 10_000
PYTHON_SOURCE = "kafkalog_python"
T0 = 1_700_000_000_000


class _Share(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.index, self.rows = index, rows


class _SyntheticSource(DataSource):
    """Rows of the Kafka source's shape, made up in the reader (options: rows, style=arrow|tuples)."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog_bench_synthetic"

    def schema(self):
        from engine.spark.source import spark_schema
        return spark_schema(False)

    def reader(self, schema):
        return _SyntheticReader(int(self.options["rows"]), self.options["style"], schema)


class _SyntheticReader(DataSourceReader):
    def __init__(self, rows: int, style: str, schema) -> None:
        self.rows, self.style, self.schema = rows, style, schema

    def partitions(self):
        return [_Share(i, self.rows // PARTITIONS) for i in range(PARTITIONS)]

    def read(self, share: _Share):
        if self.style == "tuples":
            key, value = b"k" * KEY, b"v" * VALUE
            ts = datetime.datetime.fromtimestamp(T0 / 1000, tz=datetime.timezone.utc)
            for i in range(share.rows):
                yield key, value, "bench", share.index, i, ts, 0
            return
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema
        n = min(ARROW_ROWS, share.rows)
        target = to_arrow_schema(self.schema, timezone="UTC")
        batch = pa.RecordBatch.from_arrays([
            pa.array([b"k" * KEY] * n, pa.binary()), pa.array([b"v" * VALUE] * n, pa.binary()),
            pa.array(["bench"] * n), pa.array([share.index] * n, pa.int32()), pa.array(range(n), pa.int64()),
            pa.array([T0 * 1000] * n, pa.int64()).cast(target.field("timestamp").type),
            pa.array([0] * n, pa.int32())], schema=target)
        for _ in range(share.rows // n):
            yield batch


def _session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    import engine.spark
    spark = (engine.spark.configure(SparkSession.builder).master(f"local[{PARTITIONS}]").appName("kafkalog-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", str(PARTITIONS)).config("spark.driver.memory", "2g")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    engine.spark.register(spark)
    spark.dataSource.register(_PythonSource)  # the Python source, beside the JVM source when that serves kafkalog
    spark.dataSource.register(_SyntheticSource)
    return spark


class _PythonSource(KafkalogDataSource):
    """kafkalog's Python source, named so that it can serve beside the JVM source in one session."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_SOURCE


def _write_log(directory: str, rows: int, distinct: bool = False) -> None:
    """`rows` records over PARTITIONS partitions: 16 B keys, 100 B values (every value the same, or with `distinct`
    each its own random bytes), timestamps rising with offsets as in a real log."""
    import engine
    rng = random.Random(11)
    with engine.open(directory) as eng:
        eng.create_topic("bench", partitions=PARTITIONS)
        with eng.producer(batch_size=1 << 20, linger_ms=60_000) as p:
            step = 100_000
            for p_index in range(PARTITIONS):
                for start in range(0, rows // PARTITIONS, step):
                    n = min(step, rows // PARTITIONS - start)
                    values = rng.randbytes(VALUE * n) if distinct else b"v" * (VALUE * n)
                    p.send_batch("bench", [(b"k%015d" % i, values[VALUE * i:VALUE * (i + 1)], None, T0 + start + i)
                                           for i in range(n)], partition=p_index)


def workloads(quick: bool, scratch: str) -> list[Workload]:
    rows = 400_000 if quick else 10_000_000
    distinct_rows = 400_000 if quick else 4_000_000
    spark = _session()
    log_dir, distinct_dir = tempfile.mkdtemp(dir=scratch), tempfile.mkdtemp(dir=scratch)
    _write_log(log_dir, rows)
    _write_log(distinct_dir, distinct_rows, distinct=True)
    kafkalog = spark.read.format("kafkalog").option("subscribe", "bench").load(log_dir)
    distinct = spark.read.format("kafkalog").option("subscribe", "bench").load(distinct_dir)
    python = spark.read.format(PYTHON_SOURCE).option("subscribe", "bench").load(log_dir)
    parquet_dir, distinct_parquet = os.path.join(scratch, "bench.parquet"), os.path.join(scratch, "distinct.parquet")
    kafkalog.write.parquet(parquet_dir)
    distinct.write.parquet(distinct_parquet)
    os.sync()  # no timed read competes with the writeback of the data it reads

    def aggregate(df):
        return _aggregate(df, rows)

    synthetic = spark.read.format("kafkalog_bench_synthetic").option("rows", str(rows))
    per_partition = rows // PARTITIONS
    cut = datetime.datetime.fromtimestamp((T0 + per_partition - per_partition // 100) / 1000, tz=datetime.timezone.utc)
    sliced = kafkalog.filter(kafkalog["timestamp"] >= cut)
    return [Workload(
        "spark", f"read and aggregate {rows / 1e6:g} M records ({KEY} B keys, {VALUE} B values), local[{PARTITIONS}]",
        rows, rows * (KEY + VALUE),
        [Contender("kafkalog (JVM source)", aggregate(kafkalog)),
         Contender("Spark reading Parquet", aggregate(spark.read.parquet(parquet_dir))),
         Contender("kafkalog's Python source", aggregate(python)),
         Contender("ready-made Arrow source", aggregate(synthetic.option("style", "arrow").load())),
         Contender("tuple source", aggregate(synthetic.option("style", "tuples").load()))],
        targets={"Spark reading Parquet": 0.8, "kafkalog's Python source": 2.0}),
        Workload("spark", f"read and aggregate {distinct_rows / 1e6:g} M records ({KEY} B keys, {VALUE} B values each "
                          f"its own random bytes), local[{PARTITIONS}]",
                 distinct_rows, distinct_rows * (KEY + VALUE),
                 [Contender("kafkalog (JVM source)", _aggregate(distinct, distinct_rows)),
                  Contender("Spark reading Parquet", _aggregate(spark.read.parquet(distinct_parquet), distinct_rows))],
                 targets={"Spark reading Parquet": 0.8}),
        Workload("spark", f"pushdown: aggregate the last 1% by timestamp of the {rows / 1e6:g} M records, "
                          f"local[{PARTITIONS}] (narrower row: the planner's time-index lookup)",
                 PARTITIONS * (per_partition // 100), PARTITIONS * (per_partition // 100) * (KEY + VALUE),
                 [Contender("kafkalog (JVM source), timestamp >= the last 1%",
                            _aggregate(sliced, PARTITIONS * (per_partition // 100))),
                  Contender("the same aggregate over a full scan", aggregate(kafkalog)),
                  Contender("the same aggregate over no record (Spark's per-query floor)",
                            _aggregate(kafkalog.filter(kafkalog["offset"] < 0), 0)),
                  Contender("the same aggregate over the last record of each partition (the same Spark jobs)",
                            _aggregate(kafkalog.filter(kafkalog["offset"] >= per_partition - 1), PARTITIONS))],
                 targets={"the same aggregate over a full scan": 20.0,   # the target: either of these two
                          "the same aggregate over no record (Spark's per-query floor)": 0.5}),
        Workload("spark", f"pushdown, narrower: one total (no grouping by partition, so Spark shuffles) of the last 1% "
                          f"by timestamp of the {rows / 1e6:g} M records, local[{PARTITIONS}]",
                 PARTITIONS * (per_partition // 100), PARTITIONS * (per_partition // 100) * (KEY + VALUE),
                 [Contender("kafkalog (JVM source), timestamp >= the last 1%",
                            _total(sliced, PARTITIONS * (per_partition // 100))),
                  Contender("the same total over no record (Spark's per-query floor)",
                            _total(kafkalog.filter(kafkalog["offset"] < 0), 0))])]


def _aggregate(df, rows: int):
    from pyspark.sql import functions as F

    def call():
        out = df.groupBy("partition").agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()
        assert sum(r["n"] for r in out) == rows, out
    return call


def _total(df, rows: int):
    """The aggregate of _aggregate over all partitions at once: Spark's plan gathers the partial sums in a shuffle
    whatever the source reports."""
    from pyspark.sql import functions as F

    def call():
        out = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()
        assert out[0]["n"] == rows, out
    return call


def _jvm_memory(spark, reset: bool = False) -> tuple[float, float]:
    """(peak heap used, peak old generation used) in MiB of the session's JVM (the driver and, in local mode, the
    executors) since the last reset, which a point starts with after a full collection. The heap's peak counts garbage
    not yet collected (it follows the collector's sizing); the old generation's holds what survived collections, which
    grows with the log if a reader keeps what it read."""
    gateway = spark.sparkContext._jvm
    pools = [p for p in gateway.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
             if p.getType().toString() == "Heap memory"]
    if reset:
        gateway.java.lang.System.gc()
        for pool in pools:
            pool.resetPeakUsage()
    heap = sum(pool.getPeakUsage().getUsed() for pool in pools) / 2**20
    old = sum(pool.getPeakUsage().getUsed() for pool in pools if "Old" in pool.getName()) / 2**20
    return heap, old


def memory_curve(quick: bool, scratch: str) -> dict:
    """Peak memory (MiB) while reading and aggregating logs of growing size: Spark's Python workers (kafkalog's
    Python source), and the JVM's peak heap and old generation (kafkalog's JVM source; local mode: the driver and
    executors are one JVM). Points run in ascending order and processes are reused, so a high-water mark that grew with the log
    would show."""
    points = [200_000, 800_000] if quick else [1_000_000, 10_000_000]
    spark = _session()
    workers, heap, old = ("Spark Python workers (kafkalog source)", "Spark JVM peak heap used (kafkalog JVM source)",
                          "Spark JVM peak old generation (kafkalog JVM source)")
    curve = {"records": points, "series": {workers: [], heap: [], old: []}}
    for n in points:
        d = tempfile.mkdtemp(dir=scratch)
        _write_log(d, n)
        os.sync()
        _jvm_memory(spark, reset=True)
        _aggregate(spark.read.format("kafkalog").option("subscribe", "bench").load(d), n)()
        jvm_heap, jvm_old = _jvm_memory(spark)
        curve["series"][heap].append(jvm_heap)
        curve["series"][old].append(jvm_old)
        _aggregate(spark.read.format(PYTHON_SOURCE).option("subscribe", "bench").load(d), n)()
        peaks = spark.sparkContext.parallelize(range(PARTITIONS * 4), PARTITIONS * 4).map(lambda _: peak_kib()).collect()
        curve["series"][workers].append(max(peaks) / 1024)
        shutil.rmtree(d)
    return curve
