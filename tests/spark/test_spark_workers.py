"""Spark's Python workers import the installed kafkalog and run the same codec as the driver."""
from __future__ import annotations

import pytest

import engine

pytestmark = pytest.mark.spark


def _decode(batch: bytes):
    import engine as worker_engine

    values = [r.value for b in worker_engine.iter_batches(batch) for r in b.records()]
    return worker_engine.IMPL, values


def test_workers_decode_with_the_driver_codec(spark):
    batches = [engine.encode_batch([(None, b"v%d-%d" % (i, j), None, 1_700_000_000_000) for j in range(3)],
                                   compression="zstd") for i in range(4)]
    got = spark.sparkContext.parallelize(batches, 2).map(_decode).collect()
    assert [impl for impl, _ in got] == [engine.IMPL] * 4
    assert [values for _, values in got] == [[b"v%d-%d" % (i, j) for j in range(3)] for i in range(4)]
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false" and conf.get("spark.sql.shuffle.partitions") == "2"


def test_columns_reach_spark_as_arrow(spark):
    """decode_columnar's Arrow batch becomes a DataFrame with the values intact."""
    import pyarrow as pa

    data = engine.encode_batch([(b"k%d" % i, b"value-%d" % i, None, 1_700_000_000_000 + i) for i in range(50)])
    table = pa.Table.from_batches([engine.decode_columnar(data).to_arrow()])
    df = spark.createDataFrame(table.select(["key", "value", "offset"]))
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert [(bytes(r["key"]), bytes(r["value"]), r["offset"]) for r in rows] == [
        (b"k%d" % i, b"value-%d" % i, i) for i in range(50)]
