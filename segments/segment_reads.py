"""How one segment's `.log` is read, chosen once when the segment is opened (segments.segment.LogSegment.reads):

- `MappedReads`, for the segment's owner: zero-copy views of one shared mapping of the file (made again when the
  file grew past it), a mapping of its own for a view of WINDOW_BYTES or more (unmapped once its reader drops it, so a
  scan of a large log does not keep every page it read mapped), and what readers moved through reported for
  residency (segments.residency);
- `PositionalReads`, for a reader beside a writer it does not control (another engine, a Kafka broker, Spark's
  executors): copies read with pread, a window at a time, never a mapping. A writer in another process may truncate
  the file (a follower's truncation, a failed append cut), and touching a mapped page past the end of its file is
  SIGBUS.

Lifetime of mappings: a mapping is closed only when no view of it is alive (Python's mmap refuses to close with
exported buffers, and every view is taken under the segment's lock before anything else may look for mappings to
drop), so a reader always finishes on the bytes it started on, whatever rolls, truncates, deletes or cleans.
On disk: nothing of its own (the segment's `.log`). Thread-safety: the methods said to run under the segment's lock
are called with it held; the others take it where they touch the mappings.
"""
from __future__ import annotations

import mmap
from typing import NamedTuple

from engine.common.errors import CorruptIndexError
from engine.record import batch_format as bf
from engine.record import codec
from engine.record.records import first_in_batches
from engine.segments.residency import Residency

WINDOW_BYTES = 1 << 20
LOOKUP_READ_BYTES = 256 << 10  # the most a lookup by time reads with pread before it reads through the mapping
POSITIONAL_READ_BYTES = 64 << 10  # a positional reader's window


class OffsetPosition(NamedTuple):
    """The batch that holds (or follows) an offset: its base offset, position and size."""

    offset: int
    position: int
    size: int


class MappedReads:
    """The owner's reads: views of the segment's mappings."""

    mapped = True

    def __init__(self, segment) -> None:
        self.segment = segment
        self.maps: tuple = ()  # every mmap of the .log that may still have live views
        self.map = None  # the newest one
        self._residency: Residency | None = None  # made by the first read (a log only appended to never makes it)

    @property
    def residency(self) -> Residency:
        residency = self._residency
        if residency is None:
            residency = self._residency = Residency()
        return residency

    def view(self, start: int, end: int) -> memoryview:
        """A view of the bytes [start, end) (within the file; lock held) through the shared mapping."""
        seg = self.segment
        if self.map is None or len(self.map) < end:
            whole = self.remap()
        else:
            whole = memoryview(self.map)  # taken before the pool may look for mappings to drop
            seg.fs.track_map(seg)
        return whole[start:end]

    def window(self, start: int, end: int) -> memoryview:
        """A view for a reader to keep (lock held): one of WINDOW_BYTES or more maps only its own page-aligned window;
        smaller ones are views of the shared mapping."""
        if end - start < WINDOW_BYTES:
            return self.view(start, end)
        seg = self.segment
        self.release()
        aligned = start - start % mmap.ALLOCATIONGRANULARITY
        with seg.fs.open(seg.log_path, "rb") as f:
            mapping = seg.fs.mmap(f, end - aligned, writable=False, offset=aligned)
        self.maps += (mapping,)
        whole = memoryview(mapping)
        seg.fs.track_map(seg)
        return whole[start - aligned:end - aligned]

    def remap(self) -> memoryview:
        """Map the whole `.log` again (lock held); a view of the new mapping, taken before the pool may look for
        mappings to drop."""
        seg = self.segment
        self.release()
        with seg.fs.open(seg.log_path, "rb") as f:  # the mapping outlives this descriptor
            self.map = seg.fs.mmap(f, seg.appender.size, writable=False)
        self.maps += (self.map,)
        self.residency.mapped(self.map)
        whole = memoryview(self.map)
        seg.fs.track_map(seg)
        return whole

    def release(self) -> bool:
        """Close every mapping without live views (lock held); True if none is left."""
        alive = []
        for m in self.maps:
            try:
                m.close()
            except BufferError:
                alive.append(m)
        self.maps = tuple(alive)
        if self.map is not None and self.map not in alive:
            self.map = None
        return not alive

    def forget(self) -> None:
        """Let go of every mapping (lock held): the live views keep theirs, nothing here maps the file any more."""
        self.maps, self.map = (), None
        if self._residency is not None:
            self._residency.unmapped()

    def batches(self, start: int, end: int | None):
        seg = self.segment
        return codec.iter_batches(seg.view(start, end), position=start, source=seg.log_path)

    def locate(self, offset: int, upper: int | None, entry_offset: int, position: int, prev_last: int):
        """LogSegment._locate from the index's entry at `position`: the header scan over one view, then (not found,
        or to name what is wrong) the checked walk over the same view."""
        seg = self.segment
        view = seg.view(position)
        found = codec.scan_to_offset(view, position, offset, entry_offset, prev_last, upper)  # headers only
        if found is not None:
            base, at, size, before = found
            return OffsetPosition(base, at, size), before, view, position
        return checked_walk(seg, lambda: codec.iter_batches(view, position=position, source=seg.log_path), offset,
                            upper, entry_offset, position, prev_last, view)

    def note_read(self, position: int, nbytes: int) -> None:
        """A reader read `nbytes` at `position` through the shared mapping (see segments.residency)."""
        with self.segment.lock:
            self.residency.note_read(self.map, position, nbytes)

    def find_by_timestamp(self, timestamp: int, starting_offset: int, position: int, following: int | None):
        """LogSegment.find_offset_by_timestamp from the indexed `position`: pread where the mapping is cold there,
        else through the mapping."""
        seg = self.segment
        data = self.cold_read(position, following)
        if data is not None:
            found = codec.first_at_or_after(data, timestamp, starting_offset, position=position, source=seg.log_path)
            if found is not None:
                return found
        return codec.first_at_or_after(seg.view(position), timestamp, starting_offset, position=position,
                                       source=seg.log_path)

    def cold_read(self, position: int, following: int | None) -> bytes | None:
        """For a lookup by time: the batches from the indexed `position` to `following` (OffsetIndex.lookup_span's;
        else the segment's end) read with pread, unless the mapping is known to be touched there or they are more than
        LOOKUP_READ_BYTES (None: read them through the mapping); known as segments.residency says."""
        seg = self.segment
        with seg.lock:
            size = seg.appender.size
            end = following if following is not None and position < following <= size else size
            if not position < end <= position + LOOKUP_READ_BYTES:
                return None
            if self.map is not None and len(self.map) >= size and self.residency.all_touched(self.map, position, end):
                return None
            return seg.read_bytes(position, end)


class PositionalReads:
    """A reader's reads beside another process's writer: pread copies, nothing mapped."""

    mapped = False

    def __init__(self, segment) -> None:
        self.segment = segment

    def view(self, start: int, end: int) -> memoryview:
        """A copy of the bytes [start, end) (fewer when the file is shorter now)."""
        return memoryview(self.segment.pread(start, end))

    window = view

    def release(self) -> bool:
        return True

    def forget(self) -> None:
        """Nothing is mapped."""

    def batches(self, start: int, end: int | None):
        """The batches of [start, end), read with pread a window at a time."""
        seg = self.segment
        limit = seg.appender.size if end is None else min(end, seg.appender.size)
        position, want = start, POSITIONAL_READ_BYTES
        while position < limit:
            data = seg.pread(position, min(limit, position + want))
            done = position
            for batch in codec.iter_batches(data, position=position, source=seg.log_path):
                done = batch.position + batch.size_in_bytes
                yield batch
            if done == position:  # no whole batch in the window
                if len(data) < bf.LOG_OVERHEAD or position + len(data) >= limit:
                    return  # a partial tail
                want = bf.entry_size(data)
            else:
                position, want = done, POSITIONAL_READ_BYTES

    def locate(self, offset: int, upper: int | None, entry_offset: int, position: int, prev_last: int):
        """LogSegment._locate: the checked walk, a window at a time (nothing to keep for the read)."""
        return checked_walk(self.segment, lambda: self.batches(position, None), offset, upper, entry_offset,
                            position, prev_last, memoryview(b""))

    def note_read(self, position: int, nbytes: int) -> None:
        """Nothing is mapped: nothing to release."""

    def find_by_timestamp(self, timestamp: int, starting_offset: int, position: int, following: int | None):
        return first_in_batches(self.batches(position, None), timestamp, starting_offset)


def checked_walk(seg, batches, offset: int, upper: int | None, entry_offset: int, position: int, prev_last: int,
                 view: memoryview):
    """The first batch that `batches()` walks (from the index's entry at `position`) whose last offset >= `offset`,
    each checked on the way: the one at the entry must end at `entry_offset` (CorruptIndexError), the others must
    follow their predecessor (CorruptRecordError); with the last offset before it, `view` and `position`. The walk
    stays off the frame's locals: an error's traceback keeps the frame, which must not keep an export of the view
    alive."""
    for batch in batches():
        if batch.position == position and position > 0:
            if batch.last_offset != entry_offset:
                raise CorruptIndexError(f"the entry for offset {entry_offset} points at a batch ending at "
                                        f"{batch.last_offset}", file=seg.offset_index.path, position=position)
        else:
            seg.check_follows(batch, prev_last, upper)
        if batch.last_offset >= offset:
            return OffsetPosition(batch.base_offset, batch.position, batch.size_in_bytes), prev_last, view, position
        prev_last = batch.last_offset
    return None
