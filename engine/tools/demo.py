"""`kafkalog demo` (what `make run` runs): the codec round trip, a topic produced and consumed through the
engine's clients, then, when Spark is available, the same directory read by Spark with the kafkalog source, and a
Spark stream over it that writes a sample of it back into the log."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

import engine
from engine.tools.output import Output

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="exercise the codec, write a topic, read it back, then aggregate it with Spark")
    p.add_argument("--records", type=int, default=200_000, help="records to encode and decode")
    p.add_argument("--produce", type=int, default=1_000_000, help="records to produce and consume")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark step")
    p.set_defaults(func=demo)


def demo(args: argparse.Namespace, out: Output) -> int:
    """Show the build, then encode and decode `--records` records with every codec and verify them."""
    hw = False
    if engine.IMPL == "cython":
        from engine._native._records import crc32c_hardware_available
        hw = crc32c_hardware_available()
    print(f"kafkalog {engine.__version__}: codec core = {engine.IMPL}"
          f" (CRC-32C {'SSE4.2 hardware' if hw else 'table-driven'})")
    os.makedirs(args.data, exist_ok=True)
    print(f"log directory: {os.path.abspath(args.data)}")
    n, per_batch = args.records, 1000
    records = [(b"key-%08d" % (i % 100_000), b"value-%08d-" % i + b"x" * 84, None, 1_700_000_000_000 + i)
               for i in range(n)]
    raw = sum(len(k) + len(v) for k, v, _, _ in records)
    print(f"{n:,} records, {raw / 1e6:.1f} MB of keys+values, {per_batch} records per batch")
    for codec in CODECS:
        t0 = time.perf_counter()
        batches = [engine.encode_batch(records[i:i + per_batch], base_offset=i, compression=codec,
                                       partition_leader_epoch=0) for i in range(0, n, per_batch)]
        t1 = time.perf_counter()
        log = b"".join(batches)
        decoded = sum(len(b.records()) for b in engine.iter_batches(log))
        t2 = time.perf_counter()
        cols = engine.decode_columnar(log)
        t3 = time.perf_counter()
        if decoded != n or len(cols) != n or memoryview(cols.offsets)[-1] != n - 1:
            print(f"  {codec}: MISMATCH after decode", file=sys.stderr)
            return 1
        print(f"  {codec:>6}: {len(log) / 1e6:6.1f} MB on disk | encode {n / (t1 - t0) / 1e6:5.2f} M rec/s"
              f" | decode {n / (t2 - t1) / 1e6:5.2f} M rec/s | columnar {n / (t3 - t2) / 1e6:6.2f} M rec/s")
    print("every record decoded back intact (objects and columns)")
    _demo_log(args.data, args.produce)
    _demo_replication(os.path.join(args.data, "replicated"), min(args.produce, 100_000))
    if args.no_spark:
        return 0
    return spark_step(args.data)


def _demo_log(directory: str, count: int) -> None:
    """Produce `count` keyed records into the 3-partition topic 'events' of `directory` with a Producer,
    read them back with a Consumer, and report per partition; the directory stays a Kafka log directory."""
    with engine.open(directory) as eng:
        if "events" not in eng.list_topics():
            eng.create_topic("events", partitions=3, config={"segment.bytes": 16 << 20})
        before = {p.partition: p.log_end_offset for p in eng.describe_topic("events").partitions}
        values = [b"value-%08d-" % i + b"x" * 84 for i in range(1000)]
        keys = [b"car-%05d" % i for i in range(10_000)]
        with eng.producer(linger_ms=5) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for i in range(count):
                send("events", values[i % 1000], keys[i % 10_000])
            producer.flush()
            produced = time.perf_counter() - t0
        print(f"produced {count:,} keyed records with Producer.send() in {produced:.2f}s "
              f"({count / produced / 1e6:.2f} M rec/s, idempotent, acks=all)")
        with eng.consumer("events", auto_offset_reset="earliest", consumer_timeout_ms=0) as consumer:
            t0 = time.perf_counter()
            got = {}
            for rec in consumer:
                got[rec.partition] = got.get(rec.partition, 0) + 1
            consumed = time.perf_counter() - t0
        total = sum(got.values())
        print(f"consumed {total:,} records by iterating a Consumer in {consumed:.2f}s "
              f"({total / consumed / 1e6:.2f} M rec/s)")
        for p in eng.describe_topic("events").partitions:
            print(f"  events-{p.partition}: LEO {p.log_end_offset:,} (+{p.log_end_offset - before[p.partition]:,}), "
                  f"{p.segments} segment(s), {p.size_bytes / 1e6:.1f} MB")
        if total < count:
            raise SystemExit(f"read back {total} records, fewer than the {count} produced")
    tool = os.path.join(os.path.dirname(sys.executable), "kafkalog")
    print(f"closed cleanly: {directory} is a Kafka log directory (try: {tool} verify {directory}, or "
          f"{tool} console-consumer --data {directory} --topic events --from-beginning --max-messages 5)")




def _demo_replication(directory: str, count: int) -> None:
    """Three in-process brokers and a topic with three replicas: produce with acks='all', fail the leader's
    broker, keep producing, bring it back, and read every record; the replicas end identical."""
    with engine.open(directory, brokers=3) as eng:
        if "replicated" not in eng.list_topics():
            eng.create_topic("replicated", replication_factor=3, config={"min.insync.replicas": 2})

        def state() -> str:
            p = eng.describe_topic("replicated").partitions[0]
            return f"leader {p.leader} (epoch {p.leader_epoch}), ISR {p.isr}, HW {p.high_watermark:,}"

        start = eng.describe_topic("replicated").partitions[0].log_end_offset
        half = count // 2
        with eng.producer(acks="all", linger_ms=5) as producer:
            for i in range(half):
                producer.send("replicated", b"before-%d" % i)
        print(f"3 brokers, topic 'replicated' with 3 replicas, acks='all': {half:,} records; {state()}")
        failed = eng.describe_topic("replicated").partitions[0].leader
        eng.fail_broker(failed)
        print(f"broker {failed} failed: {state()}")
        with eng.producer(acks="all", linger_ms=5) as producer:
            for i in range(count - half):
                producer.send("replicated", b"after-%d" % i)
        eng.restart_broker(failed)
        deadline = time.monotonic() + 30
        while len(eng.describe_topic("replicated").partitions[0].isr) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        print(f"broker {failed} restarted and caught up: {state()}")
        with eng.consumer("replicated", auto_offset_reset="earliest", consumer_timeout_ms=0) as consumer:
            read = sum(1 for rec in consumer if rec.offset >= start)
        replicas = eng.describe_topic("replicated").partitions[0].replica_states
        print(f"read back {read:,} of {count:,} records; each replica's (LEO, HW): "
              + ", ".join(f"broker {b}: ({r.log_end_offset:,}, {r.high_watermark:,})" for b, r in replicas.items()))
        if read != count or len({tuple(r) for r in replicas.values()}) != 1:
            raise SystemExit("the replicated topic lost records or its replicas disagree")


def _pipeline(spark, directory: str, topic: str) -> int:
    """The streaming pipeline over the same log: a stream samples every tenth record of `topic` (AvailableNow, from
    its checkpoint) into another topic, exactly once, read back in batch; returns the records sampled."""
    sample = f"{topic}-sample"
    with engine.open(directory) as e:
        if sample not in e.list_topics():
            e.create_topic(sample)
    t0 = time.perf_counter()
    query = (spark.readStream.format("kafkalog").option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 500_000).load(directory).where("offset % 10 = 0")
             .selectExpr("key", "value", "timestamp")
             .writeStream.format("kafkalog").option("topic", sample)
             .option("checkpointLocation", os.path.join(directory, ".demo-checkpoint", sample))
             .trigger(availableNow=True).start(directory))
    query.awaitTermination()
    batches = len([p for p in query.recentProgress if p["numInputRows"]])
    sampled = (spark.read.format("kafkalog").option("subscribe", sample).option("isolation.level", "read_committed")
               .load(directory).count())
    print(f"a Spark stream copied every tenth record of {topic} into {sample} in {batches} micro-batch(es), "
          f"{time.perf_counter() - t0:.2f}s, exactly once: {sampled:,} records sampled")
    return sampled


@contextlib.contextmanager
def jvm_output_to(path: str):
    """Processes started inside (Spark's JVM, and the Python workers it forks) write their stdout and stderr to
    `path`; this process's own are restored on exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def spark_step(directory: str, topic: str = "events", show: int = 5, spark=None) -> int:
    """Read `directory` with a local Spark session (or `spark`, left running) and the kafkalog source: records
    and bytes per partition, then the first rows. Without pyspark or Java, say what to install (exit 3)
    instead of failing in the JVM."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("Spark step skipped: pyspark is not installed (pip install 'kafkalog[spark]')", file=sys.stderr)
        return 3
    from engine.spark import java_problem

    problem = java_problem()
    if problem:
        print(f"Spark step skipped: {problem}", file=sys.stderr)
        return 3
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import engine.spark

    own = spark is None
    if own:
        engine.spark.use_this_python()
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log = os.path.join(tempfile.gettempdir(), "kafkalog-demo-spark.log")
        builder = (engine.spark.configure(SparkSession.builder).master("local[2]").appName("kafkalog-demo")
                   .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR"))
        with jvm_output_to(log):  # the JVM and its Python workers write there, the demo's lines stay alone
            spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        print(f"Spark started (local[2]); its own log: {log}")
    try:
        engine.spark.register(spark)
        t0 = time.perf_counter()
        df = spark.read.format("kafkalog").option("path", os.path.abspath(directory)).option("subscribe", topic).load()
        rows = (df.groupBy("partition").agg(F.count("*").alias("records"), F.sum(F.length("value")).alias("bytes"),
                                             F.max("offset").alias("last_offset"))
                .orderBy("partition").collect())
        took = time.perf_counter() - t0
        print(f"Spark read {directory} with the kafkalog source in {took:.2f}s (no broker):")
        for r in rows:
            print(f"  {topic}-{r['partition']}: {r['records']:,} records, {r['bytes']:,} value bytes, "
                  f"last offset {r['last_offset']:,}")
        first = (spark.read.format("kafkalog").option("path", os.path.abspath(directory))
                 .option("assign", f'{{"{topic}": [0]}}').option("endingOffsets", f'{{"{topic}": {{"0": {show}}}}}')
                 .load())  # the first records of partition 0, read by offset range (no cancelled tasks)
        for r in first.select("partition", "offset", "key", "value").collect():
            print(f"  partition {r['partition']} offset {r['offset']}: key={bytes(r['key'])!r} "
                  f"value={bytes(r['value'])[:24]!r}...")
        _pipeline(spark, os.path.abspath(directory), topic)
        return 0
    finally:
        if own:
            spark.stop()
