"""kafkalog's Spark data source on the JVM: `kafkalog-spark.jar`, built from the Java sources in `src/` with the JDK's
`javac` against the jars of the installed pyspark (no Maven, nothing downloaded), and kept beside them.

`build()` compiles it when it is missing or older than its sources (or than the Spark it was compiled against); the
reader options' definition (engine/spark/options.json) goes into it as a resource;
`python -m engine.spark.jvm` does that and says in one line what happened. The jar records the Spark version it
was compiled for (`META-INF/kafkalog-spark.properties`): `problem(spark_version)` says why the jar cannot serve a
given Spark (not built, no javac, another Spark), None when it can.
Files: the jar is written to a temporary name and renamed, so a reader never sees half of one.
Thread-safety: build from one process at a time (setup, or the first session of a fresh install).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "src")
JAR = os.path.join(HERE, "kafkalog-spark.jar")
PROPERTIES = "META-INF/kafkalog-spark.properties"
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "kafkalog.spark.KafkalogTable$Provider"
OPTIONS_SPEC = os.path.join(os.path.dirname(HERE), "options.json")  # the reader options, shared with the Python source
OPTIONS_RESOURCE = "kafkalog/spark/options.json"


def _java_sources() -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(SOURCES) for f in files if f.endswith(".java"))


def _pyspark() -> tuple[str, str] | None:
    """(version, jars folder) of the installed pyspark, None without one."""
    try:
        import pyspark
    except ImportError:
        return None
    return pyspark.__version__, os.path.join(os.path.dirname(pyspark.__file__), "jars")


def _fingerprint(spark_version: str) -> str:
    """What the jar is built from: its sources and the Spark it compiles against."""
    h = hashlib.sha256(spark_version.encode())
    for path in [*_java_sources(), OPTIONS_SPEC]:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, SOURCES).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def built_for() -> dict[str, str]:
    """The properties the jar was built with ({} without a jar)."""
    try:
        with zipfile.ZipFile(JAR) as z:
            text = z.read(PROPERTIES).decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "javac") if home else None
    return found if found and os.path.exists(found) else shutil.which("javac")


def java() -> str | None:
    """The Java runtime: JAVA_HOME's, else the one on PATH (None without either)."""
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else shutil.which("java")


def build(force: bool = False) -> str:
    """Compile the jar if it is missing or stale; returns one line saying what was done (or why not)."""
    spark = _pyspark()
    if spark is None:
        return "kafkalog JVM source: not built (pyspark is not installed)"
    version, jars = spark
    fingerprint = _fingerprint(version)
    if not force and built_for().get("fingerprint") == fingerprint:
        return f"kafkalog JVM source: {JAR} is up to date (Spark {version})"
    compiler = javac()
    if compiler is None:
        return "kafkalog JVM source: not built (no javac: install a JDK 17 to read at JVM speed); Spark uses the Python source"
    with tempfile.TemporaryDirectory(prefix="kafkalog-jvm-") as tmp:
        classes = os.path.join(tmp, "classes")
        cmd = [compiler, "-nowarn", "-encoding", "UTF-8", "--release", "17", "-d", classes,
               "-cp", os.path.join(jars, "*"), *_java_sources()]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"kafkalog JVM source: javac failed:\n{done.stdout}{done.stderr}")
        partial = JAR + ".tmp"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: kafkalog\n\n")
            z.writestr(SERVICE, PROVIDER + "\n")
            z.writestr(PROPERTIES, f"spark.version={version}\nfingerprint={fingerprint}\n")
            z.write(OPTIONS_SPEC, OPTIONS_RESOURCE)
            for d, _, files in os.walk(classes):
                for f in sorted(files):
                    full = os.path.join(d, f)
                    z.write(full, os.path.relpath(full, classes))
        os.replace(partial, JAR)
    return f"kafkalog JVM source: built {JAR} (Spark {version})"


def problem(spark_version: str) -> str | None:
    """Why the jar cannot serve a Spark of `spark_version`; None when it can."""
    props = built_for()
    if not props:
        return "kafkalog-spark.jar is not built (" + ("no javac" if javac() is None else "run python -m engine.spark.jvm") + ")"
    built = props.get("spark.version", "")
    if built.split(".")[:2] != spark_version.split(".")[:2]:
        return f"kafkalog-spark.jar was built for Spark {built}, this is Spark {spark_version}"
    return None

