"""The pure-Python twin of the native index search and log scanning (engine._native._log_scan): index_search,
scan_to_offset and take_span, on the bytes of an index or a log segment.

Same answers as the native module; take_span is the batch-by-batch walk it stands for. Stateless; thread-safe.
"""
from __future__ import annotations

import struct

from engine.common.errors import CorruptRecordError, UnsupportedMessageFormatError
from engine.record import batch_format as bf
from engine.record.records import _as_view, iter_batches


def index_search(buffer, entries: int, entry_size: int, target: int) -> int:
    """Slot of the largest entry whose key <= target in a Kafka index (-1 if none).

    The key is an entry's first field: a big-endian int32 relative offset (8-byte `.index`
    entries) or int64 timestamp (12-byte `.timeindex` entries). A plain binary search gives the
    same slot as Kafka's warm-section search, which only changes which pages are touched first.
    """
    if entry_size not in (8, 12):
        raise ValueError("entry_size must be 8 (offset index) or 12 (time index)")
    mv = _as_view(buffer)
    if entries < 0 or entries * entry_size > len(mv):
        raise ValueError(f"{entries} entries of {entry_size} bytes exceed the {len(mv)}-byte index")
    fmt = ">q" if entry_size == 12 else ">i"
    lo, hi = 0, entries - 1
    if entries == 0 or struct.unpack_from(fmt, mv, 0)[0] > target:
        return -1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if struct.unpack_from(fmt, mv, mid * entry_size)[0] <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def scan_to_offset(buffer, position: int, offset: int, entry_offset: int, prev_last: int, upper: int | None):
    """The first v2 batch in `buffer` (which starts at file `position`) whose last offset >= `offset`, found from
    batch headers alone: (base offset, its position, its size, the last offset before it). The batch at `position`
    (when position > 0) must end at `entry_offset`, the index entry that pointed there; every other batch must
    follow its predecessor (above `prev_last`, below `upper` unless None). None when this walk cannot answer (the
    buffer ends first, a header is short, a batch is not magic 2, or a check fails): the caller's batch-by-batch
    walk then finds the batch or raises the precise error."""
    mv = _as_view(buffer)
    n, pos = len(mv), 0
    while n - pos >= bf.HEADER_SIZE:
        base, length = struct.unpack_from(">qi", mv, pos)
        size = length + bf.LOG_OVERHEAD
        if mv[pos + 16] != bf.MAGIC or size < bf.HEADER_SIZE or size > n - pos:
            return None
        last = base + struct.unpack_from(">i", mv, pos + 23)[0]
        if not -2**63 <= last <= bf.INT64_MAX:
            return None
        if pos == 0 and position > 0:
            if last != entry_offset:
                return None
        elif base <= prev_last or last < base or (upper is not None and last >= upper):
            return None
        if last >= offset:
            return base, position + pos, size, prev_last
        prev_last, pos = last, pos + size
    return None


def take_span(buffer, max_size: int, min_one_message: bool, prev_last: int, upper: int | None,
              epochs: list[tuple[int, int]] | None) -> int | None:
    """How many bytes of `buffer` a read returns: whole batches from its start (the first one located and checked
    by the caller) while they fit `max_size` (the first always, with `min_one_message`), up to a partial tail.
    Every batch after the first must follow its predecessor (above `prev_last`, below `upper` unless None), and
    each must carry the leader epoch that `epochs` (a list of (epoch, start offset) in order, the leader-epoch
    cache's entries; None: unchecked) gives its base offset. None when the caller's batch-by-batch walk would raise
    (a malformed header, a check that fails): that walk then raises the precise error."""
    if epochs is not None and not (type(epochs) is list and all(
            type(e) is tuple and len(e) == 2 and all(type(v) is int and -2**63 <= v < 2**63 for v in e)
            for e in epochs)):
        raise TypeError("epochs must be None or a list of (epoch, start offset) int64 tuples")
    end = 0
    try:
        for batch in iter_batches(buffer):  # the twin is the loop it stands for, with None for its errors
            if end + batch.size_in_bytes > max_size and not (min_one_message and end == 0):
                break
            if end and (batch.base_offset <= prev_last or (upper is not None and batch.last_offset >= upper)):
                return None
            leading = bf.leading_epoch(epochs, batch.base_offset)
            if leading is not None and leading[0] != batch.partition_leader_epoch:
                return None
            prev_last = batch.last_offset
            end += batch.size_in_bytes
    except (CorruptRecordError, UnsupportedMessageFormatError):
        return None
    return end
