"""A Spark reader of a running broker's data directory, for tests/broker/test_spark_live_broker.py:
`python -m tests.broker.spark_live <data dir> <topic> <stop file>` builds a local session the ordinary way,
registers kafkalog's source (KAFKALOG_SPARK_SOURCE picks which), prints "ready", and once the broker has formatted the
directory reads `topic` with read_committed again and again, printing "read <count>" after each (every value once, no
value of an aborted transaction)
until the stop file holds the count the broker's consumers see; then it reads until it sees that count or a minute
passes, and prints one JSON line: the path, the reads, their errors, the values seen wrongly, the final count.
"""
from __future__ import annotations

import json
import os
import sys
import time

FINAL_WAIT_S = 60  # the reader's high watermark is the broker's checkpoint of it, written every 5 s by default


def _read(spark, data: str, topic: str) -> list[bytes]:
    df = (spark.read.format("kafkalog").option("subscribePattern", topic)
          .option("kafka.isolation.level", "read_committed").load(data))
    return [bytes(r.value) for r in df.select("value").collect()]


def main(data: str, topic: str, stop: str) -> dict:
    import engine.spark
    from pyspark.sql import SparkSession

    engine.spark.use_this_python()
    spark = (SparkSession.builder.master("local[2]").appName("kafkalog-live-broker")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    got = {"path": engine.spark.register(spark), "reads": 0, "reads_with_records": 0, "errors": [], "wrong": [],
           "final": None}
    print("ready", flush=True)
    while not os.path.exists(os.path.join(data, "meta.properties")):
        time.sleep(0.05)

    def read() -> int:
        got["reads"] += 1
        try:
            values = _read(spark, data, topic)
        except Exception as exc:  # the reader's error, as Spark reports it: recorded, the test fails on it
            got["errors"].append(str(exc).strip().splitlines()[0][:500])
            return -1
        got["reads_with_records"] += bool(values)
        print(f"read {len(values)}", flush=True)
        aborted = [v for v in values if not v.startswith(b"c-")]
        if aborted or len(set(values)) != len(values):
            got["wrong"].append({"aborted": len(aborted), "duplicates": len(values) - len(set(values))})
        return len(values)

    while not (os.path.exists(stop) and open(stop).read().endswith("\n")):
        read()
    expected, deadline = int(open(stop).read()), time.monotonic() + FINAL_WAIT_S
    while got["final"] != expected and time.monotonic() < deadline:
        got["final"] = read()
        time.sleep(0.5)
    spark.stop()
    return got


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])), flush=True)
