"""Spark reads and writes log directories directly: `spark.read.format("kafkalog")` (and readStream, write,
writeStream), through one of two implementations of the same source:

- the JVM source (engine.spark.jvm: kafkalog-spark.jar, Java, columnar), used when the jar fits the running Spark:
  `register(spark)` adds it to a session built the ordinary way (to the driver's class loader and the executors;
  in every new session of a process, whose executors need it again while the driver's class loader keeps it),
  `configure(SparkSession.builder)` puts it in `spark.jars` from the start, and on a cluster `--jars` /
  `spark.jars` does; on a Spark Connect session `register(spark)` uploads it to the session (`addArtifacts`) unless
  the server already loads it;
- the Python source (engine.spark.source, stream, sink: Spark's Python Data Source API), used otherwise.

`register(spark)` makes the format known to a session and says in one line which implementation serves it.
`KAFKALOG_SPARK_SOURCE` (or the session conf `spark.kafkalog.source`) = `jvm` | `python` | `auto` (default)
forces one: `jvm` fails when the jar is not there (as KAFKALOG_REQUIRE_EXTENSIONS does for the Cython core),
`python` fails when the session has the jar (Spark refuses two sources of one name). `use_this_python()` points
local PySpark workers at this interpreter, which is the one with kafkalog installed.
Imported only when pyspark is installed (the `[spark]` extra).
"""
from __future__ import annotations

import os
import subprocess
import sys

from engine.spark import jvm
from engine.spark.datasource import KafkalogDataSource, KafkalogPushdownDataSource

__all__ = ["KafkalogDataSource", "KafkalogPushdownDataSource", "configure", "java_problem", "register",
           "use_this_python"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
SOURCE_ENV, SOURCE_CONF = "KAFKALOG_SPARK_SOURCE", "spark.kafkalog.source"
JVM_PROVIDER = "kafkalog.spark.KafkalogTable$Provider"
NAME = "kafkalog"
_said: set = set()


def configure(builder, require: bool = False):
    """A SparkSession builder with kafkalog's JVM source on its classpath (spark.jars), when the jar is built and
    fits this pyspark (building it first if javac is there); returns the builder. Unless the JVM path is forced
    (`require`, or KAFKALOG_SPARK_SOURCE=jvm), a jar that cannot serve leaves the builder as it was."""
    import pyspark

    mode = os.environ.get(SOURCE_ENV, "auto")
    if mode == "python":
        return builder
    why = _jar_problem(pyspark.__version__)
    if why is not None:  # the Python source serves, unless the JVM one is required
        if require or mode == "jvm":
            raise RuntimeError(f"kafkalog: the JVM source was required ({SOURCE_ENV}=jvm) but {why}")
        return builder
    existing = getattr(builder, "_options", {}).get("spark.jars")
    return builder.config("spark.jars", ",".join(p for p in (existing, jvm.JAR) if p))


def _jar_problem(version: str) -> str | None:
    """Why kafkalog-spark.jar cannot serve Spark `version` (building it first when javac is there); None if it can."""
    why = jvm.problem(version)
    if why is not None and jvm.javac() is not None:
        try:
            jvm.build()
            why = jvm.problem(version)
        except (RuntimeError, OSError) as exc:  # javac refused, or the package is read-only
            why = str(exc).splitlines()[0]
    return why


def _mode(spark) -> str:
    mode = os.environ.get(SOURCE_ENV) or str(spark.conf.get(SOURCE_CONF, "auto"))
    if mode not in ("auto", "jvm", "python"):
        raise ValueError(f"kafkalog: {SOURCE_ENV}/{SOURCE_CONF} must be auto, jvm or python, got {mode!r}")
    return mode


def _has_jvm_source(spark) -> bool | None:
    """Whether the session's driver loads kafkalog's JVM source; None when it cannot be asked (Spark Connect)."""
    gateway = getattr(spark, "_jvm", None)
    if gateway is None:
        return None
    try:
        _provider(gateway)
        return True
    except Exception:  # py4j's error for ClassNotFoundException
        return False


def _provider(gateway):
    """The driver's class of kafkalog's JVM source (py4j's error when it does not load it)."""
    loader = gateway.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    return gateway.java.lang.Class.forName(JVM_PROVIDER, False, loader)


def register(spark, pushdown: bool | None = None) -> str:
    """Make `format("kafkalog")` available in this SparkSession; returns "jvm" or "python", the implementation
    that serves it, and says which in one line the first time.

    The Python source prunes partitions, offsets and timestamps itself when pushdown is on (by default when
    spark.sql.python.filterPushdown.enabled is true at this call: Spark refuses a pushdown-capable Python source
    while that setting is false, so register again after changing it); the JVM source always does."""
    mode = _mode(spark)
    present = _has_jvm_source(spark)
    why = None
    if present is False and mode != "python":
        present, why = _add_jar(spark)
    elif present and mode != "python":
        _ship_jar(spark)
    if present is None:  # Spark Connect
        if mode != "python" and not _connect_serves_kafkalog(spark):
            present, why = _add_artifact(spark)
        if not present:  # the server has the jar if it refuses a Python source of the same name
            present = _register_python(spark, pushdown, probe=True)
    elif not present and mode != "jvm":
        _register_python(spark, pushdown)
    if mode == "jvm" and not present:
        raise RuntimeError(f"kafkalog: the JVM source was required ({SOURCE_ENV}=jvm) but this session cannot load "
                           f"kafkalog-spark.jar ({why})")
    if mode == "python" and present:
        raise RuntimeError(f"kafkalog: the Python source was required ({SOURCE_ENV}=python) but this session loads "
                           f"kafkalog-spark.jar (spark.jars), and Spark refuses two sources named kafkalog")
    path = "jvm" if present else "python"
    if path not in _said:
        _said.add(path)
        if not present and why is None:
            why = f"{SOURCE_ENV}=python"
        print("kafkalog: Spark reads and writes through the " + (
            f"JVM source ({jvm.JAR})" if present else f"Python source ({why})"), file=sys.stderr)
    return path


def _add_jar(spark) -> tuple[bool, str | None]:
    """Add kafkalog-spark.jar to a running session: (whether the session now loads the JVM source, why not). The jar
    goes into the driver's base class loader (the one Spark's own `--jars` use, so the driver's planning and the
    task results it reads see one copy of its classes) and to the executors through the SparkContext. Spark's
    `ADD JAR` is not used: it loads the classes a second time in the session's own loader, and a write's commit
    then misses what its tasks staged."""
    why = _jar_problem(spark.version)
    if why is not None:
        return False, why
    try:
        base = spark._jsparkSession.sharedState().jarClassLoader().getParent()
        if base.getClass().getName() != "org.apache.spark.util.MutableURLClassLoader":
            return False, f"the driver's class loader ({base.getClass().getName()}) takes no jar at run time"
        base.addURL(spark._jvm.java.io.File(jvm.JAR).toURI().toURL())
        spark.sparkContext._jsc.addJar(jvm.JAR)
    except Exception as exc:  # py4j's error: the session refused the jar
        return False, f"adding the jar failed: {str(exc).splitlines()[0]}"
    if not _has_jvm_source(spark):
        return False, "the driver was given kafkalog-spark.jar but does not load the source"
    return True, None


def _ship_jar(spark) -> None:
    """The driver loads the source: when it loads it from the jar an earlier session of this process added (the
    driver's class loader outlives a stopped SparkContext, its list of jars for the executors does not), give the jar
    to this context's executors too. A source that came with the context (spark.jars, --jars) is listed there."""
    jsc = spark.sparkContext._jsc
    name = os.path.basename(jvm.JAR)
    if any(os.path.basename(j) == name for j in str(jsc.sc().listJars().mkString("\n")).splitlines()):
        return
    source = _provider(spark._jvm).getProtectionDomain().getCodeSource()
    if source is not None and os.path.realpath(str(source.getLocation().getPath())) == os.path.realpath(jvm.JAR):
        jsc.addJar(jvm.JAR)


def _connect_serves_kafkalog(spark) -> bool:
    """Spark Connect: whether the server resolves format("kafkalog") in this session (its own jar, one this session
    uploaded, or a Python source registered before)."""
    try:
        spark.read.format(NAME).load().schema  # analysed on the server: a source that cannot plan still exists
    except Exception as exc:  # the Connect client's error for what the server raised
        return "DATA_SOURCE_NOT_FOUND" not in str(exc)
    return True


def _add_artifact(spark) -> tuple[bool, str | None]:
    """Spark Connect: upload kafkalog-spark.jar to this session (the server loads it in the session's class loader
    and ships it to the session's executors): (whether the server now serves the JVM source, why not)."""
    why = _jar_problem(spark.version)  # (the server's Spark)
    if why is not None:
        return False, why
    try:
        spark.addArtifacts(jvm.JAR)
    except Exception as exc:  # the Connect client's error: the server refused the artifact
        return False, f"uploading the jar to the Spark Connect server failed: {str(exc).splitlines()[0]}"
    if not _connect_serves_kafkalog(spark):
        return False, "the Spark Connect server was given kafkalog-spark.jar but does not load the source"
    return True, None


def _register_python(spark, pushdown: bool | None, probe: bool = False) -> bool:
    """Register the Python source; with `probe`, True (and nothing registered) when Spark already has a JVM
    source named kafkalog."""
    if pushdown is None:
        pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    try:
        spark.dataSource.register(KafkalogPushdownDataSource if pushdown else KafkalogDataSource)
    except Exception as exc:
        if probe and "DATA_SOURCE_ALREADY_EXISTS" in str(exc):
            return True
        raise
    return False


def use_this_python() -> None:
    """Run local PySpark workers (and the driver's Python) with this interpreter: call before building a
    local SparkSession, so workers import the same kafkalog build as the driver."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def java_problem() -> str | None:
    """None when a Java runtime Spark can start is there; else one line saying what to install."""
    java = jvm.java()
    fix = "install a Java 17 or newer runtime (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    if not java or not os.path.exists(java):
        return f"no Java runtime found for Spark: {fix}"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Java at {java} does not run ({exc}): {fix}"
    return None
