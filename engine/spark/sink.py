"""The `kafkalog` sink: `df.write.format("kafkalog")` and `df.writeStream.format("kafkalog")` append DataFrames to a
log directory's topics, exactly once, with the columns of Spark's Kafka sink.

Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string; the `topic` option, when
set, overrides it), `partition` (int; null or absent: Kafka's partitioner on the key), `headers`
(array<struct<key: string, value: binary>>) and `timestamp` (timestamp; absent or null: the time of the commit).
Other columns are ignored, as Spark's sink ignores them. A missing `value` or a column of the wrong type is an
InvalidConfigurationError naming the column, raised when the query is planned, before any task runs.
Commit protocol: Spark tasks run in other processes and cannot open the engine, whose directory lock the driver
(or the application) holds. So a task encodes its rows as Kafka batches, as Kafka's producer would (the row's
partition, else murmur2 of its key over the topic's partition count, read from the catalogue, else a sticky
partition; each partition's rows in their order, batches up to 1 MiB or the topic's max.message.bytes; the Arrow
columns go to the native core's `encode_columnar` whole, rows with headers one by one), into a file of its attempt
under `<path>/.kafkalog-staging/<job>/` (engine.staged_writes.staged_batches; removed if the attempt fails), and
returns its name; only the attempts Spark commits reach the driver. The driver's `commit` appends every staged
batch through one transactional producer of the engine that owns the directory (this process's, opened for the
commit when none is, or the process that has it open; engine.staged_writes) and commits the
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
import random
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

from engine.clients import accumulator
from engine.common.errors import InvalidConfigurationError, InvalidTimestampError, UnknownTopicOrPartitionError
from engine.record import batch_format as bf
from engine.record.codec import encode_batch, encode_columnar
from engine.segments.log_config import LogConfig
from engine.staged_writes import layout as staged_layout
from engine.tools import staged_commit as staged_requester
from engine.staged_writes import staged_batches

MAX_REQUEST_SIZE = 1 << 20  # Kafka producer's max.request.size: the largest batch a task encodes
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
    """A task's side: its rows, encoded as Kafka batches, in one file of this attempt
    (engine.staged_writes.staged_batches)."""
    directory = staged_layout.make_job_dir(settings.path, job)
    path = os.path.join(directory, f"{uuid.uuid4().hex}{staged_batches.SUFFIX}")
    rows = 0
    try:
        with open(path, "wb") as out:
            rows = _encode_into(out, settings, batches)
    except BaseException:
        if os.path.exists(path):  # a failed attempt leaves nothing behind for the commit to find
            os.remove(path)
        raise
    if not rows:
        os.remove(path)
        return Staged(None, 0)
    return Staged(path, rows)


class _Topics:
    """The partition count and batch limit of each topic a task writes, from the directory's catalogue as the task
    first needs it (a directory without one, a broker's: from its partition folders), with a random sticky
    partition for its rows without key or partition."""

    def __init__(self, path: str) -> None:
        self.path, self._catalogue, self._found = path, None, {}

    def __call__(self, topic: str) -> tuple[int, int, int]:
        found = self._found.get(topic)
        if found is None:
            if self._catalogue is None:
                from engine.metadata import read as read_catalogue
                from engine.segments.fs import FileSystem

                self._catalogue = read_catalogue(FileSystem(), self.path) or _adopted(self.path)
            rec = self._catalogue.topics.get(topic)
            if rec is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in {self.path}")
            limit = min(MAX_REQUEST_SIZE, self._catalogue.log_config(topic, LogConfig()).max_message_bytes)
            found = self._found[topic] = (rec.partitions, limit, random.randrange(rec.partitions))
        return found


def _adopted(path: str):
    """What a directory without a catalogue holds, from its partition folders' names."""
    from engine.metadata import Catalogue, TopicRecord
    from engine.segments import names

    counts: dict[str, int] = {}
    for entry in os.listdir(path):
        parsed = names.parse_partition_dir(entry) if os.path.isdir(os.path.join(path, entry)) else None
        if parsed is not None:
            counts[parsed[0]] = max(counts.get(parsed[0], 0), parsed[1] + 1)
    return Catalogue(topics={t: TopicRecord("", n) for t, n in counts.items()})


def _encode_into(out, settings: SinkSettings, batches) -> int:
    import pyarrow.compute as pc

    topics, rows = _Topics(settings.path), 0
    for batch in batches:
        if not batch.num_rows:
            continue
        if settings.topic is not None:
            groups = [(settings.topic, batch)]
        else:
            column = batch.column("topic")
            if column.null_count:
                raise _bad("column 'topic'", "holds a null: every row needs a topic")
            groups = [(t, batch.filter(pc.equal(column, t))) for t in column.unique().to_pylist()]
        for topic, rows_of_topic in groups:
            for partition, stamped, data in _encoded(settings, topic, topics(topic), rows_of_topic):
                out.write(staged_batches.frame_head(topic, partition, stamped))
                out.write(data)
        rows += batch.num_rows
    return rows


def _encoded(settings: SinkSettings, topic: str, layout: tuple[int, int, int], batch):
    """(partition, stamped at commit, batch bytes) of one topic's rows of an Arrow batch: each row in the partition
    Kafka's producer would pick, each partition's rows in their order, batches up to the topic's limit."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count, limit, sticky = layout
    n = batch.num_rows

    def column(name, kind=None):
        if name not in settings.columns:
            return None
        return batch.column(name) if kind is None else batch.column(name).cast(kind)
    keys, values = column("key", pa.binary()), column("value", pa.binary())
    partitions = np.full(n, sticky, np.int32)
    if keys is not None:
        hashed = np.frombuffer(accumulator.selected.key_partitions(keys, count), np.int32)
        partitions = np.where(hashed >= 0, hashed, partitions)
    given = column("partition", pa.int32())
    if given is not None and given.null_count < n:
        bad = pc.filter(given, pc.or_(pc.less(given, 0), pc.greater_equal(given, count)))
        if len(bad):
            raise bf.bad_partition(topic, bad[0].as_py(), count)
        partitions = np.where(given.is_valid().to_numpy(zero_copy_only=False),
                              given.fill_null(0).to_numpy(zero_copy_only=False), partitions)
    micros = column("timestamp", pa.int64())
    stamped = np.ones(n, bool) if micros is None else micros.is_null().to_numpy(zero_copy_only=False)
    millis = np.zeros(n, np.int64)
    if micros is not None and micros.null_count < n:
        if pc.any(pc.less(micros, 0)).as_py():
            raise InvalidTimestampError("a row's timestamp is before 1970: Kafka stores timestamps from 0")
        millis = pc.divide(micros.fill_null(0), 1000).to_numpy(zero_copy_only=False)
    headers = column("headers")
    has_headers = headers is not None and pc.sum(pc.list_value_length(headers).fill_null(0)).as_py()
    def lengths(col):
        return pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    sizes = bf.RECORD_OVERHEAD + lengths(values) + (lengths(keys) if keys is not None else 0)
    if has_headers:  # each header's bytes as check_send counts them, summed per row
        flat = pc.list_flatten(headers)
        sizes = sizes + np.bincount(pc.list_parent_indices(headers).to_numpy(), minlength=n, weights=(
            lengths(flat.field("key")) + lengths(flat.field("value")) + 10)).astype(np.int64)
    order = np.argsort(partitions, kind="stable")
    partitions, stamped, millis, sizes = partitions[order], stamped[order], millis[order], sizes[order]
    batch = batch.take(pa.array(order))
    keys, values = column("key", pa.binary()), column("value", pa.binary())
    if has_headers:
        headers = column("headers")
    ends = np.cumsum(sizes, dtype=np.int64)
    cuts = list(np.flatnonzero((partitions[1:] != partitions[:-1]) | (stamped[1:] != stamped[:-1])) + 1) + [n]
    start = 0
    for run_end in cuts:
        while start < run_end:
            before = ends[start - 1] if start else 0
            end = min(run_end, max(start + 1, int(np.searchsorted(ends, before + limit - bf.HEADER_SIZE, "right"))))
            if has_headers:  # encode_columnar takes no headers: these rows go one by one
                records = [(k, v, [(h["key"], h["value"]) for h in hs or ()], int(t)) for k, v, hs, t in zip(
                    (keys if keys is not None else pa.nulls(n, pa.binary())).slice(start, end - start).to_pylist(),
                    values.slice(start, end - start).to_pylist(), headers.slice(start, end - start).to_pylist(),
                    millis[start:end])]
                data = encode_batch(records)
            else:
                data = encode_columnar(values=values.slice(start, end - start),
                                       keys=None if keys is None else keys.slice(start, end - start),
                                       timestamps=np.ascontiguousarray(millis[start:end]))
            yield int(partitions[start]), bool(stamped[start]), data
            start = end


def _request(settings: SinkSettings, job: str, messages, batch_id: int | None) -> dict:
    return {"job": job, "files": [m.file for m in messages if isinstance(m, Staged) and m.file is not None],
            "transactional_id": settings.transactional_id, "sink_id": settings.sink_id, "batch_id": batch_id}


def abort(settings: SinkSettings, job: str, messages) -> None:
    """Spark gave up the job (or micro-batch): its staged files go."""
    staged_layout.discard_request(settings.path, _request(settings, job, messages, None))


def commit(settings: SinkSettings, job: str, messages, batch_id: int | None = None) -> int:
    """The driver's side (Spark runs it in a Python worker of its own): apply the staged rows of the committed
    attempts (engine.tools.staged_commit.commit); returns the rows appended."""
    return staged_requester.commit(settings.path, _request(settings, job, messages, batch_id),
                                   settings.commit_timeout_ms)


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
