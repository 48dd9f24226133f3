"""The `kafkalog` streaming source: `spark.readStream.format("kafkalog")` follows a log directory as it grows,
with the schema, options and offsets of Spark's own Kafka source.

Offsets are Spark's Kafka source JSON, `{"topic": {"0": next offset, ...}}`. The latest offset of a partition is
what a consumer may read: its high watermark, or under read_committed its last stable offset. Another process's
engine makes a new high watermark visible by writing `replication-offset-checkpoint` (every
`hw_checkpoint_interval_ms`, 5 s by default): a stream never reads past it, so it never sees a partial batch or an
unreplicated record. A first run starts at `startingOffsets` (latest by default; earliest, or JSON with -2/-1) or
`startingTimestamp`; a restart resumes from the query's checkpoint. Partitions that appear later are read from
their earliest offset. Admission (Spark's rules): `maxOffsetsPerTrigger` caps a micro-batch, shared among
partitions by their lag (none starved below one record); `minOffsetsPerTrigger` waits for that many new records,
but never longer than `maxTriggerDelay` (15m); Trigger.AvailableNow reads what was there when the query started.
Records the log start offset passed (retention, delete_records) before they were read fail the query when
`failOnDataLoss` (true), else are skipped. Reading is the batch source's (engine.spark.source).
Thread-safety: Spark calls a reader from one driver thread; tasks share nothing.
"""
from __future__ import annotations

import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from engine.common.errors import OffsetOutOfRangeError
from engine.spark.source import EARLIEST, LATEST, KafkalogReader, OffsetRange, Settings
from engine.segments.fs import FileSystem
from engine.segments.partition_reader import read_checkpoints

Offsets = dict[tuple[str, int], int]


def to_json(offsets: Offsets) -> dict:
    """{(topic, partition): offset} as Spark's Kafka offsets, {"topic": {"partition": offset}}."""
    out: dict = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(doc: dict) -> Offsets:
    return {(topic, int(p)): int(offset) for topic, parts in doc.items() for p, offset in parts.items()}


def rate_limit(start: Offsets, end: Offsets, limit: int) -> Offsets:
    """Spark's Kafka admission: at most `limit` records in all, shared by each partition's lag (prorated, a
    fraction below one rounded up so no partition starves)."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if e - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    out = {}
    for tp, e in end.items():
        if tp not in sizes:
            out[tp] = e
            continue
        prorate = limit * (sizes[tp] / total)
        out[tp] = min(e, start[tp] + int(-(-prorate // 1) if prorate < 1 else prorate // 1))
    return out


class KafkalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: Settings, schema: StructType) -> None:
        self.settings, self.schema = settings, schema
        self.batch = KafkalogReader(settings, schema)  # partition planning, and the executors' read()
        self.target: Offsets | None = None  # Trigger.AvailableNow: what was there when the query started
        self.last_trigger_ms = time.time() * 1000

    # --- what the directory holds now -------------------------------------------------------------------------
    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(log start offset, latest readable offset) of every selected partition."""
        checkpoints = read_checkpoints(FileSystem(), self.settings.path)
        out = {}
        for tp, directory in self.batch.partition_dirs().items():
            with self.batch.opened(tp, directory, checkpoints) as (_, _, view):
                out[tp] = (view.log_start_offset, view.fetch_upper_bound(self.settings.isolation))
        return out

    def _latest(self) -> Offsets:
        found = {tp: bound for tp, (_, bound) in self._bounds().items()}
        if self.target is not None:
            found = {tp: min(off, self.target.get(tp, 0)) for tp, off in found.items()}
        return found

    # --- Spark's calls ------------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        s, out = self.settings, {}
        checkpoints = read_checkpoints(FileSystem(), s.path)
        dirs = self.batch.partition_dirs()
        s.check_specified(dirs)
        for tp, directory in dirs.items():
            with self.batch.opened(tp, directory, checkpoints) as (_, _, view):
                kind, value = s.start
                first, bound = view.log_start_offset, view.fetch_upper_bound(s.isolation)
                if kind in ("timestamp", "timestamps"):
                    ts = value if kind == "timestamp" else value.get(tp)
                    found = None if ts is None else view.offset_for_timestamp(ts, s.isolation)
                    if found is None and s.strategy == "error" and ts is not None:
                        raise OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: no offset has a timestamp at or after the "
                                                    f"starting timestamp", file=directory)
                    out[tp] = bound if found is None else found[1]
                elif kind == "offsets":
                    off = value.get(tp, LATEST)
                    out[tp] = first if off == EARLIEST else bound if off == LATEST else off
                else:
                    out[tp] = first if kind == "earliest" else bound
        return to_json(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_offsets is not None:
            return ReadMaxRows(self.settings.max_offsets)
        if self.settings.min_offsets is not None:
            return ReadMinRows(self.settings.min_offsets)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {tp: bound for tp, (_, bound) in self._bounds().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        bounds = self._bounds()
        latest = self._latest()
        begin.update({tp: bounds[tp][0] for tp in latest if tp not in begin})  # a new partition: from earliest
        ends = {tp: max(off, begin[tp]) for tp, off in latest.items()}
        if isinstance(limit, ReadAllAvailable):
            return to_json({**from_json(start), **ends})
        s = self.settings
        now = time.time() * 1000
        new = sum(e - begin[tp] for tp, e in ends.items())
        least = limit.min_rows if isinstance(limit, ReadMinRows) else s.min_offsets  # Python takes one limit
        if least is not None and new < least and now - self.last_trigger_ms < s.max_trigger_delay_ms:
            return start  # not enough yet, and not waited long enough
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(begin, ends, limit.max_rows)
        if ends != {tp: begin[tp] for tp in ends}:
            self.last_trigger_ms = now
        return to_json({**from_json(start), **ends})

    def reportLatestOffset(self) -> dict:
        return to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        s = self.settings
        begin, until = from_json(start), from_json(end)
        checkpoints = read_checkpoints(FileSystem(), s.path)
        dirs = self.batch.partition_dirs()
        ranges: list[OffsetRange] = []
        for tp, stop in sorted(until.items()):
            directory = dirs.get(tp)
            if directory is None:
                if s.fail_on_data_loss:
                    raise OffsetOutOfRangeError(f"{tp[0]}-{tp[1]} is gone from {s.path} (failOnDataLoss=true)",
                                                file=s.path)
                continue
            with self.batch.opened(tp, directory, checkpoints) as (reader, committed, view):
                first = view.log_start_offset
                lo = begin.get(tp, first)
                if lo < first:
                    if s.fail_on_data_loss:
                        raise OffsetOutOfRangeError(
                            f"{tp[0]}-{tp[1]}: offsets [{lo}, {first}) were deleted before the query read them "
                            f"(failOnDataLoss=false skips them)", file=directory, offset=lo)
                    lo = first
                if lo < stop:
                    ranges += self.batch.ranges(reader, committed, tp, directory, lo, stop)
        return ranges or [OffsetRange("", -1, "", 0, 0)]

    def read(self, partition: OffsetRange):
        return self.batch.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the log keeps its records by its own retention, not by the query's progress."""
