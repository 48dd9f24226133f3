"""Real Spark deployments on 127.0.0.1 for the tests, from pyspark's own launchers: a standalone cluster (a master and
workers, `spark-class`) and a Spark Connect server (`spark-submit` of pyspark's SparkConnectServer), each bounded
in memory (256 MiB cluster daemons, 512 MiB executors, a 1 GiB Connect server) and in time, and stopped (its process group killed) on exit.
As a script, `python -m tests.spark.cluster job <master URL> <log dir> <out dir>` runs the cluster test's job in a
driver of its own (one SparkContext per process), `... restarted <master URL> <log dir>` sessions stopped and
started again in one driver process (local, then the cluster), and `... connect <sc:// URL> <log dir>` the Connect
client's;
each prints one JSON line of what it read and wrote.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
N = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp, daemon_memory: str) -> dict:
    return {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": daemon_memory,
            "SPARK_LOG_DIR": str(tmp), "SPARK_WORKER_DIR": str(tmp / "work"), "PYSPARK_PYTHON": sys.executable}


def _wait_for(log, text: str, count: int, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = log.read_text(errors="replace").count(text) if log.exists() else 0
        if seen >= count:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{text!r} x{count} not in {log} within {timeout} s:\n" + (log.read_text()[-3000:] if log.exists() else ""))


def _start(cmd: list[str], tmp, name: str, daemon_memory: str = "256m"):
    log = tmp / f"{name}.log"
    out = open(log, "w")
    proc = subprocess.Popen(cmd, env=_env(tmp, daemon_memory), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log, out


def _stop(procs) -> None:
    for proc, _, out in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc, _, out in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()


@contextlib.contextmanager
def standalone(tmp, workers: int = 2):
    """A master and `workers` workers (1 core, 768 MiB each); yields the master's spark:// URL."""
    spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
    port = free_port()
    procs = [_start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(free_port())], tmp, "master")]
    try:
        _wait_for(procs[0][1], "I have been elected leader", 1, procs[0][0], 120)
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            procs.append(_start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                 "--cores", "1", "--memory", "768m", "--webui-port", str(free_port()),
                                 "--work-dir", str(tmp / f"work-{i}"), url], tmp, f"worker-{i}"))
        for proc, log, _ in procs[1:]:
            _wait_for(log, "Successfully registered with master", 1, proc, 120)
        yield url
    finally:
        _stop(procs)


@contextlib.contextmanager
def connect_server(tmp, jars: str | None):
    """A Spark Connect server (local[2]) with `jars` on its classpath; yields its sc:// URL."""
    port = free_port()
    cmd = [os.path.join(SPARK_HOME, "bin", "spark-submit"), "--class",
           "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
           "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", f"spark.pyspark.python={sys.executable}"]
    if jars:
        cmd += ["--jars", jars]
    procs = [_start(cmd + ["spark-internal"], tmp, "connect", daemon_memory="1g")]  # spark-submit's server heap
    try:
        _wait_for(procs[0][1], "Spark Connect server started", 1, procs[0][0], 180)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop(procs)


def write_log(path: str) -> None:
    """Topic t, 2 partitions, N records (value = the record's number, gzip) and an empty topic `copy`."""
    import engine

    with engine.open(path) as e:
        e.create_topic("t", partitions=2)
        e.create_topic("copy", partitions=2)
        with e.producer(compression_type="gzip") as p:
            for i in range(N):
                p.send("t", key=b"%d" % (i % 7), value=b"%d" % i)


def _values(rows) -> list[int]:
    return sorted(int(r.value) for r in rows)


def _session(master: str):
    """A session built the ordinary way (no engine.spark.configure) on `master`, small and on loopback."""
    import engine.spark
    from pyspark.sql import SparkSession

    engine.spark.use_this_python()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(master).appName("kafkalog-cluster-test")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1").config("spark.cores.max", "2")
             .config("spark.pyspark.python", sys.executable).config("spark.sql.shuffle.partitions", "2")
             .config("spark.task.maxFailures", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def job(master: str, log: str, out: str) -> dict:
    """On the cluster: a batch read, an AvailableNow stream into Parquet, a write back into the log. `register` alone
    brings the JVM source to the driver and the executors."""
    import engine.spark

    spark = _session(master)
    try:
        path = engine.spark.register(spark)
        deadline = time.monotonic() + 60
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # the driver too
        df = spark.read.format("kafkalog").option("subscribe", "t").load(log)
        batch = _values(df.select("value").collect())
        hosts = sorted(set(spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getpid()).collect()))
        q = (spark.readStream.format("kafkalog").option("subscribe", "t").option("startingOffsets", "earliest").load(log)
             .selectExpr("CAST(value AS STRING) AS value").writeStream.format("parquet")
             .option("path", os.path.join(out, "stream")).option("checkpointLocation", os.path.join(out, "ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        stream = _values(spark.read.parquet(os.path.join(out, "stream")).collect())
        df.selectExpr("key", "value").write.format("kafkalog").option("topic", "copy").mode("append").save(log)
        written = _values(spark.read.format("kafkalog").option("subscribe", "copy")
                          .option("kafka.isolation.level", "read_committed").load(log).select("value").collect())
        return {"path": path, "executors": executors, "worker_pids": len(hosts), "batch": batch == list(range(N)),
                "stream": stream == list(range(N)), "write": written == list(range(N))}
    finally:
        spark.stop()


def restarted_job(master: str, log: str) -> dict:
    """What a notebook does: a local session, register, a read, stop; a second local one the same way; then a
    session on the cluster, register, a read. Each session's reads get the source on its own executors."""
    import engine.spark

    got = {}
    for name, where in (("local", "local[2]"), ("local again", "local[2]"), ("cluster", master)):
        spark = _session(where)
        try:
            path = engine.spark.register(spark)
            rows = spark.read.format("kafkalog").option("subscribe", "t").load(log).select("value").collect()
            got[name] = [path, _values(rows) == list(range(N))]
        finally:
            spark.stop()
    return got


def connect_job(url: str, log: str) -> dict:
    """Through Spark Connect: register, then read the log back; then the same in a second session of this process,
    started after the first was stopped."""
    import engine.spark
    from pyspark.sql import SparkSession

    got = []
    for _ in range(2):
        spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            path = engine.spark.register(spark)
            df = spark.read.format("kafkalog").option("subscribe", "t").load(log)
            plan = io.StringIO()
            with contextlib.redirect_stdout(plan):
                df.explain()
            rows = df.select("value").collect()
            got.append({"path": path, "batch": _values(rows) == list(range(N)), "scan": "jvm" if (
                "BatchScan kafkalog" in plan.getvalue() and "(JVM)" in plan.getvalue()) else "python"})
        finally:
            spark.stop()
    return {"sessions": got}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    print(json.dumps({"job": job, "restarted": restarted_job, "connect": connect_job}[kind](*args)))
