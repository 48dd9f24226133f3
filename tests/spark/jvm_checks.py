"""The JVM source's check programs (tests/spark/jvm_checks/kafkalog/spark/*Check.java): each runs one part of the jar
on its own (decoder, encoder, options, checkpoint files) over a file of cases and prints what it made of them, for a
test to compare with the Cython side. They are test code, so they are not in the jar: `run_check` compiles them with
the JDK's `javac` against the jar and this pyspark's jars into .cache/jvm-checks/<fingerprint of the sources and the
jar> (once; a compilation is written to a temporary folder and renamed, so concurrent test workers never see half of
one), and runs the program asked for with the jar on its class path. They share the jar's package, so they can reach
its package-private classes.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

import pytest

from engine.spark import jvm

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm_checks")
CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".cache",
                     "jvm-checks")


def _sources() -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(SOURCES) for f in files if f.endswith(".java"))


def _classes(spark_jars: str) -> str:
    """The folder of the compiled check programs, compiled now unless they already are for these sources and jar."""
    h = hashlib.sha256()
    for path in [*_sources(), jvm.JAR]:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, SOURCES).encode() + b"\0" + f.read())
    out = os.path.join(CACHE, h.hexdigest()[:16])
    if os.path.isdir(out):
        return out
    compiler = jvm.javac()
    assert compiler is not None, "no javac to compile the check programs with"
    os.makedirs(CACHE, exist_ok=True)
    partial = tempfile.mkdtemp(prefix="compiling-", dir=CACHE)
    done = subprocess.run([compiler, "-nowarn", "-encoding", "UTF-8", "--release", "17", "-d", partial,
                           "-cp", os.pathsep.join([jvm.JAR, os.path.join(spark_jars, "*")]), *_sources()],
                          capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise AssertionError(f"javac failed on the check programs:\n{done.stdout}{done.stderr}")
    try:
        os.rename(partial, out)
    except OSError:  # another worker compiled them first
        shutil.rmtree(partial, ignore_errors=True)
    return out


def run_check(main: str, *paths, timeout: int = 600) -> list[str]:
    """The lines kafkalog.spark.`main` prints for the cases in `paths`, run against the jar on this pyspark's jars.
    Skipped where there is no JVM source (no javac, no java), failed instead when KAFKALOG_SPARK_SOURCE=jvm asked for
    one."""
    import pyspark

    why = jvm.problem(pyspark.__version__)
    java = jvm.java()
    if why is not None or not java or not os.path.exists(java) or jvm.javac() is None:
        if os.environ.get("KAFKALOG_SPARK_SOURCE") == "jvm":
            pytest.fail(f"the JVM source was asked for and cannot run: {why or 'no java or javac'}")
        pytest.skip(f"no JVM source here: {why or 'no java or javac'}")
    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    classpath = os.pathsep.join([_classes(spark_jars), jvm.JAR, os.path.join(spark_jars, "*")])
    done = subprocess.run([java, "-cp", classpath, f"kafkalog.spark.{main}", *map(str, paths)],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.splitlines()
