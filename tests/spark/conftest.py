"""A session-scoped local[2] SparkSession, configured to start fast and quietly.

The session loads kafkalog's JVM source when its jar is built (engine.spark.configure), unless
KAFKALOG_SPARK_SOURCE=python: make test runs these tests once on each path. Workers run this interpreter (PYSPARK_PYTHON=sys.executable), so they import the kafkalog
installed in this venv; the UI is off, everything binds to loopback, shuffles use 2 partitions
and the warehouse lives in a temp dir.
"""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    import engine.spark

    engine.spark.use_this_python()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    session = (
        engine.spark.configure(SparkSession.builder).master("local[2]")
        .appName("kafkalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.local.dir", str(tmp / "local"))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def registered(spark):
    """The session with kafkalog's source registered (engine.spark.register: the JVM source or the Python one)."""
    import engine.spark

    engine.spark.register(spark)
