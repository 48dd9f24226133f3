"""Which implementation serves `format("kafkalog")` (the JVM source when its jar is built, else the Python source),
said and enforced; and what both read the same way: a broker's live directory (preallocated indexes) and a
corrupt batch (one line naming the file, position and offset)."""
from __future__ import annotations

import os
import shutil

import pytest

import engine
from engine.spark import jvm
from tests import vectors
from tests.spark.test_spark_source import expected_from_dump, rows

pytestmark = pytest.mark.spark


def test_the_session_is_served_by_the_path_make_test_asked_for(spark, capsys):
    import engine.spark

    asked = os.environ.get("KAFKALOG_SPARK_SOURCE", "auto")
    got = engine.spark.register(spark)
    if asked in ("jvm", "python"):
        assert got == asked  # never a silent fall back to the other path
    import pyspark
    assert (got == "jvm") == (asked != "python" and jvm.problem(pyspark.__version__) is None)


_PLAIN_SESSION = """
import json, sys
import engine.spark
from pyspark.sql import SparkSession
engine.spark.use_this_python()
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
out = {}
if sys.argv[2] == "add-jar":  # what a user may try: Spark's own ADD JAR, then register
    spark.sql("ADD JAR '" + engine.spark.jvm.JAR + "'")
try:
    out["path"] = engine.spark.register(spark)
    df = spark.read.format("kafkalog").option("subscribe", "multiseg").load(sys.argv[1])
    out["plan"] = [line for line in df._jdf.queryExecution().executedPlan().toString().splitlines() if "Scan" in line]
    out["offsets"] = sorted(r.offset for r in df.collect())
    df.selectExpr("key", "value").write.format("kafkalog").option("topic", "copy").mode("append").save(sys.argv[1])
except Exception as exc:
    out["error"] = str(exc).splitlines()[0] + " " + " ".join(l for l in str(exc).splitlines() if "kafkalog" in l)
out["copied"] = spark.read.format("kafkalog").option("subscribe", "copy").load(sys.argv[1]).count()
print(json.dumps(out))
spark.stop()
"""


def _plain_session(tmp_path, how: str) -> tuple[dict, str]:
    """A SparkSession built without engine.spark.configure() in a process of its own: what it registered, planned,
    read and copied into topic `copy`, and its stderr."""
    import json
    import subprocess
    import sys

    shutil.copytree(vectors.case_dir("multiseg-0"), tmp_path / "multiseg-0")
    with engine.open(str(tmp_path)) as eng:  # (adopts Kafka's partition as topic multiseg)
        eng.create_topic("copy")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-c", _PLAIN_SESSION, str(tmp_path), how], capture_output=True,
                          text=True, timeout=300, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _jvm_expected() -> bool:
    import pyspark
    return os.environ.get("KAFKALOG_SPARK_SOURCE") != "python" and jvm.problem(pyspark.__version__) is None


def test_a_session_built_the_ordinary_way_gets_the_jvm_source_from_register(tmp_path):
    """SparkSession.builder.getOrCreate() without engine.spark.configure(), then register(): the jar is added to the
    running session and its plan scans through the JVM source; it reads what Kafka wrote, and a write through it
    lands every row."""
    got, stderr = _plain_session(tmp_path, "register")
    want = "jvm" if _jvm_expected() else "python"
    assert "error" not in got and got["path"] == want, got
    assert any("(JVM)" in line for line in got["plan"]) == (want == "jvm"), got["plan"]
    assert got["offsets"] == sorted(r[2] for r in expected_from_dump("multiseg-0"))
    assert got["copied"] == len(got["offsets"])
    assert f"through the {'JVM' if want == 'jvm' else 'Python'} source" in stderr


def test_a_jar_loaded_twice_fails_a_write_instead_of_committing_nothing(tmp_path):
    """Spark's ADD JAR loads the jar's classes a second time, in the session's loader: the tasks' commit messages
    are then of a class the committer does not know. The write fails, naming the cause, and writes nothing (it once
    reported success and committed no row)."""
    got, _ = _plain_session(tmp_path, "add-jar")
    if not _jvm_expected():  # the Python path was asked for: a session holding the jar is refused at register
        assert "the Python source was required" in got["error"], got
    else:
        assert got["path"] == "jvm" and len(got["offsets"]) == 1500, got
        assert "loaded twice" in got["error"] and "nothing was written" in got["error"], got
    assert got["copied"] == 0


def test_a_brokers_live_directory_with_preallocated_indexes_and_empty_checkpoints(spark, tmp_path):
    """A running broker keeps its active segment's .index and .timeindex preallocated (10 MiB of zeros past the
    entries): they read as exactly their entries. A broker that has just started has its checkpoint files, empty (the
    ones a Kafka broker made at start-up, from tests/data/kafka-checkpoints): they read as no entries."""
    import engine.spark
    engine.spark.register(spark)
    for name in vectors.OFFSET_CHECKPOINTS:
        shutil.copy(vectors.KAFKA_CHECKPOINTS / f"broker-startup.{name}", tmp_path / name)
        assert os.path.getsize(tmp_path / name) == 0
    for case in ("multiseg-0", "codecs-0"):
        shutil.copytree(vectors.case_dir(case), tmp_path / case)
        for name in os.listdir(tmp_path / case):
            if name.endswith((".index", ".timeindex")):
                with open(tmp_path / case / name, "r+b") as f:
                    f.truncate(10 << 20)
        topic = case.rsplit("-", 1)[0]
        df = spark.read.format("kafkalog").option("subscribe", topic).option("includeHeaders", "true").load(str(tmp_path))
        assert rows(df) == expected_from_dump(case)
        late = max(r[5] for r in expected_from_dump(case))
        got = rows(spark.read.format("kafkalog").option("subscribe", topic).option("startingTimestamp", str(late))
                   .load(str(tmp_path)))
        assert got and all(r[5] >= late for r in got) and got[0][2] == min(
            r[2] for r in expected_from_dump(case) if r[5] >= late)


def test_a_malformed_checkpoint_fails_the_query_as_a_storage_error_naming_it(spark, tmp_path):
    """A high-watermark checkpoint that is not one: the query fails with KafkaStorageError (code 56) naming the file,
    on either path (the JVM path once failed to attach the parse error as the cause and threw another error)."""
    import engine.spark
    path = engine.spark.register(spark)
    log = tmp_path / "log"
    with engine.open(str(log)) as e:
        e.create_topic("t")
        with e.producer() as p:
            p.send("t", value=b"v")
    checkpoint = log / "replication-offset-checkpoint"
    checkpoint.write_text("0\nnot a count\n")
    with pytest.raises(Exception) as err:
        spark.read.format("kafkalog").option("subscribe", "t").load(str(log)).collect()
    text = str(err.value)
    assert any("KafkaStorageError" in line and str(checkpoint) in line for line in text.splitlines()), text[-2000:]
    assert "overwrite cause" not in text
    if path == "jvm":  # a failed read keeps its cause; an interrupted one (a stopped query) stays an interruption
        from py4j.java_gateway import get_field

        jvm = spark.sparkContext._jvm
        failed = jvm.kafkalog.spark.KafkalogError.readFailed("f", jvm.java.io.IOException("disk"))
        assert (get_field(failed, "kind"), get_field(failed, "code")) == ("KafkaStorageError", 56)
        assert failed.getCause().getMessage() == "disk" and "(file f)" in failed.getMessage()
        stopped = jvm.kafkalog.spark.KafkalogError.readFailed("f", jvm.java.nio.channels.ClosedByInterruptException())
        assert stopped.getClass().getName() == "java.io.UncheckedIOException"
        assert stopped.getCause().getClass().getName() == "java.nio.channels.ClosedByInterruptException"


def test_a_corrupt_batch_fails_the_query_in_one_line(spark, tmp_path):
    import engine.spark
    path = engine.spark.register(spark)
    log = tmp_path / "log"
    with engine.open(str(log)) as e:
        e.create_topic("t")
        with e.producer(batch_size=300) as p:
            for i in range(40):
                p.send("t", value=b"value-%03d" % i)
    segment = log / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    batches = list(engine.iter_batches(bytes(data)))
    victim = batches[2]
    position = sum(b.size_in_bytes for b in batches[:2])
    data[position + victim.size_in_bytes - 3] ^= 0xFF  # inside the last record: only the CRC tells
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception) as err:
        spark.read.format("kafkalog").option("subscribe", "t").load(str(log)).collect()
    text = str(err.value)
    named = [line for line in text.splitlines() if "CorruptRecordError" in line and str(segment) in line]
    assert named and f"position {position}" in named[0] and f"offset {victim.base_offset}" in named[0], text[-2000:]
    if path == "jvm":
        assert "at kafkalog.spark." not in text  # the error carries no stack of ours


def test_without_javac_the_jar_is_not_built_and_the_python_path_is_said(monkeypatch, tmp_path):
    import pyspark

    import engine.spark
    monkeypatch.setattr(jvm, "JAR", str(tmp_path / "kafkalog-spark.jar"))
    monkeypatch.setattr(jvm, "javac", lambda: None)
    said = jvm.build()
    assert "no javac" in said and "Python source" in said and not os.path.exists(jvm.JAR)
    assert "not built (no javac)" in jvm.problem(pyspark.__version__)

    class Builder:
        _options: dict = {}

        def config(self, key, value):
            raise AssertionError(f"configured {key}={value} without a jar")
    builder = Builder()
    monkeypatch.setenv("KAFKALOG_SPARK_SOURCE", "auto")
    assert engine.spark.configure(builder) is builder
    monkeypatch.setenv("KAFKALOG_SPARK_SOURCE", "jvm")
    with pytest.raises(RuntimeError, match="JVM source was required"):
        engine.spark.configure(builder)


def test_a_jar_built_for_another_spark_is_not_used():
    import pyspark
    if jvm.problem(pyspark.__version__) is not None:  # a machine without javac: no jar to judge
        assert not jvm.built_for() and "not built" in jvm.problem(pyspark.__version__)
        return
    built = jvm.built_for()["spark.version"]
    assert jvm.problem(built) is None
    assert f"built for Spark {built}, this is Spark 3.5.1" in jvm.problem("3.5.1")


def test_an_index_entry_that_points_at_the_wrong_batch_only_costs_a_scan(spark, tmp_path):
    """multiseg-0 with each segment's offset-index entries pointing at one another's batches: a read from any offset
    scans its segment instead, and returns exactly Kafka's records."""
    import engine.spark
    engine.spark.register(spark)
    case = "multiseg-0"
    shutil.copytree(vectors.case_dir(case), tmp_path / case)
    swapped = 0
    for name in sorted(os.listdir(tmp_path / case)):
        if name.endswith(".index"):
            data = bytearray((tmp_path / case / name).read_bytes())
            entries = [data[i:i + 8] for i in range(0, len(data), 8)]
            if len(entries) >= 2:
                entries[0][4:], entries[-1][4:] = entries[-1][4:], entries[0][4:]  # positions swapped
                (tmp_path / case / name).write_bytes(b"".join(entries))
                swapped += 1
    assert swapped
    expect = expected_from_dump(case)
    for start in (expect[0][2], expect[len(expect) // 2][2], expect[-1][2]):
        df = (spark.read.format("kafkalog").option("subscribe", "multiseg").option("includeHeaders", "true")
              .option("startingOffsets", f'{{"multiseg": {{"0": {start}}}}}').load(str(tmp_path)))
        assert rows(df) == [r for r in expect if r[2] >= start], start


def test_the_jvm_source_reads_only_the_columns_a_query_uses(spark, tmp_path):
    import engine.spark
    path = engine.spark.register(spark)
    case = "codecs-0"
    shutil.copytree(vectors.case_dir(case), tmp_path / case)
    df = spark.read.format("kafkalog").option("subscribe", "codecs").load(str(tmp_path)).select("partition", "value")
    got = sorted(((r.partition, None if r.value is None else bytes(r.value)) for r in df.collect()), key=repr)
    assert got == sorted(((r[1], r[4]) for r in expected_from_dump(case)), key=repr)
    scan = [line for line in df._jdf.queryExecution().executedPlan().toString().splitlines() if "BatchScan" in line]
    if path == "jvm":  # Spark's Python data sources cannot prune: only the JVM source is asked to
        assert scan and "partition#" in scan[0] and "value#" in scan[0], scan
        assert not any(f"{c}#" in scan[0] for c in ("key", "offset", "timestamp", "topic")), scan
