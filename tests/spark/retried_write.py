"""A Spark job in its own JVM (local[2, 4], so a failed task is retried), for
tests/spark/test_spark_stream.py: writes N numbered rows to topic `big` of a log directory through the kafkalog
sink, with the first attempt of one task failing after it staged part of its rows."""
from __future__ import annotations

import os
import sys

import engine.spark

FAIL_AT = "600000"  # a row well inside one task: that task has staged rows before it fails


def fail_once(value: str) -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if value == FAIL_AT and ctx.attemptNumber() == 0:
        with open(os.environ["KAFKALOG_FAILED_ATTEMPT"], "w") as f:  # the test checks that the failure happened
            f.write(f"task {ctx.partitionId()} attempt 0 failed")
        raise RuntimeError("injected failure of the first attempt")
    return value


def main(path: str, n: int) -> None:
    engine.spark.use_this_python()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (engine.spark.configure(SparkSession.builder).master("local[2, 4]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    engine.spark.register(spark)
    from pyspark.sql import functions as F

    df = spark.range(n, numPartitions=4).selectExpr("CAST(id AS STRING) AS value", "CAST(id % 100 AS STRING) AS key")
    df = df.withColumn("value", F.udf(fail_once, "string")("value"))
    df.write.format("kafkalog").option("topic", "big").mode("append").save(path)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
