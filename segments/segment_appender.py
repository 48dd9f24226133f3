"""The append half of one log segment (Kafka's LogSegment.shouldRoll and LogSegment.append): the roll check,
the write of whole batches to the `.log` and the sparse-index cadence, with the counters they keep.

This module is the pure-Python twin; the native one is engine._native._segment_appender, same API and the same
bytes written, the twin "segment_appender" of engine.record.twins.
Byte layout: the `.log` takes the batches as they are (segments.segment); an offset-index entry (the last
offset of a batch, its start position) and a time-index entry (the max timestamp so far) are added when more
than `index.interval.bytes` accumulated since the previous entry, checked before each batch counts.
Crash policy: a write that fails is cut back to where it started (or before the next append, or by recovery),
so the `.log` never keeps a partial batch that a later append would follow; a missing index entry only makes
the index sparser (logged, not raised).
Thread-safety: the owning segment's lock is held for the write and the index entries (readers take it too).
"""
from __future__ import annotations

from engine.common.errors import KafkaStorageError
from engine.record import batch_format as bf
from engine.record import codec, twins

INT32_MAX = 2**31 - 1


class SegmentAppender:
    """The counters a segment's appends keep, and the appends themselves (the segment delegates to it)."""

    def __init__(self, segment, size: int, created_ms: int, roll_ms: int) -> None:
        self.segment = segment
        self.size = size                       # bytes in the `.log`
        self.created_ms = created_ms
        self.roll_ms = roll_ms                 # segment.ms less the segment's jitter
        self.bytes_since_last_index_entry = 0
        self.max_ts: tuple[int, int] | None = None  # (max timestamp so far, last offset of its batch); None: not read
        self.rolling_ts: int | None = None     # the first batch's max timestamp (None: empty segment)
        self.rolling_ts_loaded = False
        self.cut_pending: int | None = None    # where a failed write must be cut back to before the next one
        self.handle = None                     # the append handle last used (pinned again while writing)

    # --- the roll check ------------------------------------------------------------------------
    def _time_waited_for_roll(self, now_ms: int, incoming_max_ts: int) -> int:
        rolling = self.rolling_ts if self.rolling_ts_loaded else self.segment.rolling_timestamp()
        if rolling is not None and rolling >= 0:
            return incoming_max_ts - rolling
        return now_ms - self.created_ms

    def should_roll(self, incoming_bytes: int, incoming_max_ts: int, incoming_last_offset: int, now_ms: int,
                    segment_bytes: int) -> bool:
        """Kafka's LogSegment.shouldRoll."""
        seg = self.segment
        waited = self.size > 0 and self._time_waited_for_roll(now_ms, incoming_max_ts) > self.roll_ms
        return (self.size > segment_bytes - incoming_bytes or waited or seg.indexes_full()
                or not 0 <= incoming_last_offset - seg.base_offset <= INT32_MAX)

    def try_append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int, data, size: int,
                   batches: list[tuple[int, int]] | None, segment_bytes: int, clock) -> bool:
        """Append, unless the segment must roll first (False, nothing written)."""
        if self.should_roll(size, largest_timestamp, largest_offset, clock.time_ms(), segment_bytes):
            return False
        self.append(largest_offset, largest_timestamp, offset_of_max_timestamp, data, size, batches)
        return True

    def append_batch(self, data, first_offset: int, leader_epoch: int, log_append_time: int, max_batch_bytes: int,
                     source: str, segment_bytes: int, clock, producer_id: int = -1, producer_epoch: int = -1,
                     base_sequence: int = -1, transactional: bool = False) -> tuple[int, int, int] | None:
        """A leader's append of one batch in one call, when its producer state needs no check (no producer id) or
        is the one given (`producer_id` >= 0: the batch must carry that id, `producer_epoch`, `base_sequence` and
        the `transactional` flag, and not be a control batch): the leader's checks of the batch
        (engine.record.codec.prepare_leader_append), offsets from `first_offset` and the leader epoch, the roll
        check and the write. Returns (next offset, max timestamp, offset of the max timestamp); None, with nothing
        done, when `data` is not one such batch or the segment must roll first (the log's general path then
        checks, rolls and appends)."""
        view = memoryview(data).cast("B")
        n = view.nbytes
        if n < bf.HEADER_SIZE:
            return None
        base, length, _, magic, _, attributes, last_delta, _, max_ts, pid, epoch, sequence, _ = bf.HEADER.unpack_from(
            view)
        if length + bf.LOG_OVERHEAD != n or magic != 2 or base < 0 or last_delta < 0:
            return None
        if producer_id < 0:
            if pid >= 0:
                return None
        elif (pid, epoch, sequence, attributes & (bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG)) != (
                producer_id, producer_epoch, base_sequence, bf.TRANSACTIONAL_FLAG if transactional else 0):
            return None
        last = first_offset + last_delta
        if self.should_roll(n, log_append_time if log_append_time >= 0 else max_ts, last, clock.time_ms(),
                            segment_bytes):
            return None
        pieces, end, max_ts, offset_of_max, _ = codec.prepare_leader_append(
            view, first_offset, leader_epoch, log_append_time, max_batch_bytes, False, source)
        self.append(end - 1, max_ts, offset_of_max, pieces, n)
        return end, max_ts, offset_of_max

    # --- the append -----------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int, data,
               size: int | None = None, batches: list[tuple[int, int]] | None = None) -> None:
        """Append whole batches (a buffer, or a list of buffers written in order with `size` bytes in all); index
        them as Kafka's LogSegment.append does: each batch in turn when `batches` gives their (last offset, size),
        else the whole append as one."""
        seg = self.segment
        if size is None:
            size = len(data)
        if not size:
            return
        with seg.lock:
            position = self._start(largest_offset, largest_timestamp, size)
            max_ts = seg.max_timestamp_and_offset()[0]  # before the write: it may open the indexes
            self._write(data, size, position)
            if largest_timestamp > max_ts:
                self.max_ts = (largest_timestamp, offset_of_max_timestamp)
            for last, batch_size in batches or [(largest_offset, size)]:
                if self.bytes_since_last_index_entry > seg.config.index_interval_bytes:
                    seg.add_index_entries(last, position)
                    self.bytes_since_last_index_entry = 0
                self.bytes_since_last_index_entry += batch_size
                position += batch_size

    def _start(self, largest_offset: int, largest_timestamp: int, size: int) -> int:
        """The checks before a write (and the cut an earlier failed write left): the position it starts at."""
        if self.cut_pending is not None:
            self.segment.cut_failed_append()
        position = self.size
        if position == 0:
            self.rolling_ts, self.rolling_ts_loaded = largest_timestamp, True
        self.segment.check_append_fits(largest_offset, position, size)
        return position

    def _write(self, data, size: int, position: int) -> None:
        seg = self.segment
        try:
            with seg.append_handle() as f:
                if isinstance(data, list):
                    seg.fs.writev(f, data, size)
                else:
                    seg.fs.write(f, data)
        except OSError as exc:
            seg.restore_after_failed_write(position)
            raise KafkaStorageError(f"append failed: {exc}", file=seg.log_path, position=position) from exc
        self.size = position + size  # the batches are in the log: nothing below may undo that


def _native() -> type:
    from engine._native import _segment_appender
    return _segment_appender.SegmentAppender


twins.register("segment_appender", python=lambda: SegmentAppender, native=_native)
selected = twins.selected("segment_appender")  # the appender class
