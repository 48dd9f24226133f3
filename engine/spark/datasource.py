"""The Python `kafkalog` data source: what Spark's Python Data Source API calls (engine.spark.register registers
it when the JVM source does not serve the session). It only ties the parts together: batch reads are
engine.spark.source's, streaming reads engine.spark.stream's, writes engine.spark.sink's.
Stateless; Spark builds one per query.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from engine.spark.sink import KafkalogStreamWriter, KafkalogWriter, SinkSettings
from engine.spark.source import KafkalogPushdownReader, KafkalogReader, Settings, bool_option, spark_schema
from engine.spark.stream import KafkalogStreamReader


class KafkalogDataSource(DataSource):
    """`spark.read.format("kafkalog").option("path", dir).option("subscribe", "events").load()`."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> StructType:
        options = {str(k).lower(): v for k, v in dict(self.options).items()}
        return spark_schema(bool_option(options, "includeHeaders"))

    def reader(self, schema: StructType) -> KafkalogReader:
        return KafkalogReader(Settings(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool):
        """`df.write.format("kafkalog")` (engine.spark.sink)."""
        return KafkalogWriter(SinkSettings(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):
        """`df.writeStream.format("kafkalog")` (engine.spark.sink)."""
        return KafkalogStreamWriter(SinkSettings(self.options, schema, overwrite))

    def streamReader(self, schema: StructType):
        """`spark.readStream.format("kafkalog")` (engine.spark.stream)."""
        return KafkalogStreamReader(Settings(self.options, streaming=True), schema)


class KafkalogPushdownDataSource(KafkalogDataSource):
    """The same source, with a reader that accepts pushed-down filters (Spark refuses such a reader unless
    spark.sql.python.filterPushdown.enabled=true, so engine.spark.register() picks the class that fits)."""

    def reader(self, schema: StructType) -> KafkalogPushdownReader:
        return KafkalogPushdownReader(Settings(self.options), schema)
