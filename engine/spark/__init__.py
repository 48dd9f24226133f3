"""Spark reads log directories directly: `spark.read.format("kafkalog")` (see engine.spark.source).

Imported only when pyspark is installed (the `[spark]` extra). `register(spark)` makes the format
known to a session; `use_this_python()` points local PySpark workers at this interpreter, which is
the one with kafkalog installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from engine.spark.source import KafkalogDataSource, KafkalogPushdownDataSource

__all__ = ["KafkalogDataSource", "KafkalogPushdownDataSource", "java_problem", "register", "use_this_python"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark, pushdown: bool | None = None) -> None:
    """Make `spark.read.format("kafkalog")` available in this SparkSession.

    With pushdown (by default, when spark.sql.python.filterPushdown.enabled is true at this call) the
    source prunes partitions, offsets and timestamps itself; Spark refuses a pushdown-capable Python
    source while that setting is false, so register again after changing it."""
    if pushdown is None:
        pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    spark.dataSource.register(KafkalogPushdownDataSource if pushdown else KafkalogDataSource)


def use_this_python() -> None:
    """Run local PySpark workers (and the driver's Python) with this interpreter: call before building a
    local SparkSession, so workers import the same kafkalog build as the driver."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def java_problem() -> str | None:
    """None when a Java runtime Spark can start is there; else one line saying what to install."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    fix = "install a Java 17 or newer runtime (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    if not java or not os.path.exists(java):
        return f"no Java runtime found for Spark: {fix}"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Java at {java} does not run ({exc}): {fix}"
    return None
