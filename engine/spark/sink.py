"""The `kafkalog` sink: `df.write.format("kafkalog")` and `df.writeStream.format("kafkalog")` append DataFrames to a
log directory's topics, exactly once, with the columns of Spark's Kafka sink.

Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string; the `topic` option, when
set, overrides it), `partition` (int; null or absent: Kafka's partitioner on the key), `headers`
(array<struct<key: string, value: binary>>) and `timestamp` (timestamp; absent or null: the time of the commit).
Other columns are ignored, as Spark's sink ignores them. A missing `value` or a column of the wrong type is an
InvalidConfigurationError naming the column, raised when the query is planned, before any task runs.
Commit protocol: Spark tasks run in other processes and cannot open the engine, whose directory lock the driver
(or the application) holds. So a task stages its rows as an Arrow IPC file under `<path>/.kafkalog-staging/<job>/`
(a new file per task attempt, removed if the attempt fails) and returns its name; only the attempts Spark commits
reach the driver. The driver's `commit` appends every staged row through one transactional producer of the engine
that owns the directory in the driver's process (opened for the commit when none is), and commits the
transaction: a consumer at read_committed sees all of a write or none of it, a retried task never duplicates, and
a driver that dies mid-commit leaves an open transaction that the next writer's `init_transactions` aborts. A
streaming micro-batch also commits, in the same transaction, its batch id as the offset of a consumer group (the
`sinkId` option, by default derived from the query's checkpoint location) on partition 0 of the first topic it
writes: a micro-batch Spark re-runs after a failure whose commit had landed is recognised and skipped. `abort`,
and every commit, delete the job's staged files. Only `mode("append")` is supported.
Thread-safety: one commit at a time per writer (Spark's driver calls it once per job or micro-batch).
"""
from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from engine.staged_writes import layout as staged_layout
from engine.staged_writes import requester as staged_requester
from engine.common.errors import InvalidConfigurationError

OPTIONS = {"path", "topic", "transactionalid", "sinkid", "checkpointlocation", "committimeoutms"}
def _bad(what: str, why: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"kafkalog sink: {what} {why}")


class SinkSettings:
    """The validated options and input schema of one write."""

    def __init__(self, raw, schema: StructType, overwrite: bool) -> None:
        options = {str(k).lower(): v for k, v in dict(raw).items()}
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise _bad(f"option {unknown[0]!r}", "is unknown (known: path, topic, transactionalId, sinkId, "
                                                 "commitTimeoutMs)")
        if overwrite:
            raise _bad("mode", "must be 'append': a log is only ever appended to")
        self.path = options.get("path")
        if not self.path:
            raise _bad("option 'path'", "is required: .option('path', dir) or .save(dir)")
        self.topic = options.get("topic")
        try:
            self.commit_timeout_ms = int(options.get("committimeoutms", 120_000))
        except ValueError:
            raise _bad("option 'commitTimeoutMs'", f"must be an integer, got {options['committimeoutms']!r}") from None
        self.transactional_id = options.get("transactionalid", f"kafkalog-spark-{self.topic or 'sink'}")
        checkpoint = options.get("checkpointlocation")  # a streaming query's own: it names the query
        self.sink_id = options.get("sinkid") or (
            f"kafkalog-spark-sink-{hashlib.sha1(str(checkpoint).encode()).hexdigest()[:16]}" if checkpoint
            else "kafkalog-spark-sink")
        fields = {f.name: f.dataType for f in schema.fields}
        binary_or_string = (BinaryType, StringType)
        if "value" not in fields:
            raise _bad("column 'value'", "is required (binary or string)")
        checks = {"value": binary_or_string, "key": binary_or_string, "topic": (StringType,),
                  "partition": (IntegerType,), "timestamp": (TimestampType, TimestampNTZType),
                  "headers": (ArrayType,)}
        for name, types in checks.items():
            if name in fields and not isinstance(fields[name], types):
                raise _bad(f"column {name!r}", f"must be {' or '.join(t.typeName() for t in types)}, "
                                               f"got {fields[name].simpleString()}")
        if "headers" in fields and fields["headers"].simpleString() != "array<struct<key:string,value:binary>>":
            raise _bad("column 'headers'", f"must be array<struct<key:string,value:binary>>, got "
                                           f"{fields['headers'].simpleString()}")
        if self.topic is None and "topic" not in fields:
            raise _bad("column 'topic'", "is required unless the 'topic' option names the topic")
        self.columns = set(fields)


@dataclass
class Staged(WriterCommitMessage):
    """What one task attempt staged: its file (None when it had no rows) and its row count."""

    file: str | None
    rows: int


def stage(settings: SinkSettings, job: str, batches) -> Staged:
    """A task's side: its rows, in the staged schema, as one Arrow IPC file of this attempt."""
    target = staged_layout.staged_schema()
    directory = staged_layout.make_job_dir(settings.path, job)
    path = os.path.join(directory, f"{uuid.uuid4().hex}.arrow")
    rows = 0
    try:
        rows = _stage_into(path, settings, batches, target)
    except BaseException:
        if os.path.exists(path):  # a failed attempt leaves nothing behind for the commit to find
            os.remove(path)
        raise
    if not rows:
        os.remove(path)
        return Staged(None, 0)
    return Staged(path, rows)


def _stage_into(path: str, settings: SinkSettings, batches, target) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = 0
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, target) as out:
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue

            def column(name, kind):
                if name not in settings.columns:
                    return pa.nulls(n, kind)
                col = batch.column(name)
                if name == "timestamp":
                    col = pc.divide(pc.cast(col, pa.int64()), 1000) if pa.types.is_timestamp(col.type) else col
                return col.cast(kind)
            topic = (pa.repeat(pa.scalar(settings.topic, pa.string()), n) if settings.topic is not None
                     else column("topic", pa.string()))
            if topic.null_count:
                raise _bad("column 'topic'", "holds a null: every row needs a topic")
            value = column("value", pa.binary())
            out.write_batch(pa.RecordBatch.from_arrays(
                [topic, column("partition", pa.int32()), column("key", pa.binary()), value,
                 column("headers", target.field("headers").type), column("timestamp", pa.int64())], schema=target))
            rows += n
    return rows


def _request(settings: SinkSettings, job: str, messages, batch_id: int | None) -> dict:
    return {"job": job, "files": [m.file for m in messages if isinstance(m, Staged) and m.file is not None],
            "transactional_id": settings.transactional_id, "sink_id": settings.sink_id, "batch_id": batch_id}


def abort(settings: SinkSettings, job: str, messages) -> None:
    """Spark gave up the job (or micro-batch): its staged files go."""
    staged_layout.discard_request(settings.path, _request(settings, job, messages, None))


def commit(settings: SinkSettings, job: str, messages, batch_id: int | None = None) -> int:
    """The driver's side (Spark runs it in a Python worker of its own): apply the staged rows of the committed
    attempts (engine.staged_writes.requester.commit); returns the rows appended."""
    return staged_requester.commit(settings.path, _request(settings, job, messages, batch_id), settings.commit_timeout_ms)


class KafkalogWriter(DataSourceArrowWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self.job = uuid.uuid4().hex

    def write(self, iterator) -> Staged:
        return stage(self.settings, self.job, iterator)

    def commit(self, messages) -> None:
        commit(self.settings, self.job, messages)

    def abort(self, messages) -> None:
        abort(self.settings, self.job, messages)


class KafkalogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self.job = uuid.uuid4().hex

    def write(self, iterator) -> Staged:
        from pyspark import TaskContext

        batch = TaskContext.get().getLocalProperty("streaming.sql.batchId")
        return stage(self.settings, f"{self.job}-{batch}", iterator)

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 (Spark's name)
        commit(self.settings, f"{self.job}-{batchId}", messages, batchId)

    def abort(self, messages, batchId: int) -> None:  # noqa: N803 (Spark's name)
        abort(self.settings, f"{self.job}-{batchId}", messages)
