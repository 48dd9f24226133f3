"""A read of one UnifiedLog in one call (the common case of UnifiedLog.read): the batches from the one holding an
offset, when the read is bounded by the log end (no `upper_bound` below it), located through the offset index of
the segment holding the offset and served from that segment's shared mapping, with every check the layers make
(segments.local_log.LocalLog.read, segments.segment.LogSegment.read) passing on batch headers alone. Anything
else returns None with nothing read (an offset outside the log, a bound below the log end, a segment with no
batch at or after the offset, a check that fails, a read of a window's size or more) and the layers serve the
read, raising the precise error or repairing an index as they do.

A lookup by timestamp (UnifiedLog.offset_for_timestamp) is the other call: the native reader searches the time and
offset indexes and walks the batch headers from the indexed position in one call, the steps of the layers'
segments.log_segments.LogSegments.offset_for_timestamp (read with pread where its reads have not touched the
mapping, as segments.segment.LogSegment.lookup_read chooses); this twin leaves the lookup to those layers.

This module is the pure-Python twin; the native one (engine._native._log_read.LogReader) takes the same steps
with no Python frame between the call and the answer. They are the twin "log_read" of
engine.record.twins (the native one takes the segments' locks as the native core makes them).
Byte layout: none of its own (the segment's `.log` and `.index`).
Crash policy: none (it reads).
Thread-safety: the LEO, the active segment and its size are read together under the log's lock (UnifiedLog.tail),
as the layers read them; each segment structure is read under its own lock.
"""
from __future__ import annotations

from engine.record import codec, twins

_EMPTY = memoryview(b"")


class LogReader:
    """The one-call read of one UnifiedLog."""

    def __init__(self, log, fetch_type: type, window_bytes: int) -> None:
        self.log = log
        self.fetch = fetch_type
        self.window = window_bytes  # the read size from which a segment maps a window of its own (LogSegment.window)

    def read(self, start_offset: int, max_bytes: int, upper_bound: int | None, min_one_message: bool):
        """UnifiedLog.read's FetchData, or None with nothing read when the layers must serve the read."""
        log = self.log
        leo, active_base, active_size = log.tail()
        if not log.log_start_offset <= start_offset <= leo:
            return None
        bound = leo if upper_bound is None else min(upper_bound, leo)
        if start_offset >= bound:  # nothing to read below the bound
            return self.fetch(start_offset, active_base, active_size, _EMPTY)
        if bound < leo:
            return None
        seg, nxt = log.local.segments.holding(start_offset)
        entry_offset, position = seg.offset_index.lookup(start_offset)
        view = seg.view(position)
        upper = leo if nxt is None else nxt
        found = codec.scan_to_offset(view, position, start_offset, entry_offset, seg.base_offset - 1, upper)
        if found is None:
            return None
        at, size, before = found[1:]
        limit = min(active_size, seg.size) if seg.base_offset == active_base else seg.size
        if at >= limit:
            return self.fetch(start_offset, seg.base_offset, at, _EMPTY)
        stop = min(limit, at + (max(max_bytes, size) if min_one_message else max_bytes))
        if stop - at >= self.window or stop - position > len(view):
            return None
        data = view[at - position:stop - position]
        end = codec.take_span(data, max_bytes, min_one_message, before, upper, log.leader_epochs.entries)
        if end is None:
            return None
        seg.note_read(position, at + end - position)  # the headers scanned and the batches returned
        return self.fetch(start_offset, seg.base_offset, at, data[:end])


    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None | bool:
        """UnifiedLog.offset_for_timestamp for a timestamp other than -1 and -2, or False when the layers must answer
        (the native twin answers in one call; this one always leaves it to the layers)."""
        return False


def _native() -> type:
    """The native reader: it takes the segment layer's locks as segments.fs.new_lock makes them with the native core
    loaded."""
    from engine._native import _log_read
    return _log_read.LogReader


twins.register("log_read", python=lambda: LogReader, native=_native)
