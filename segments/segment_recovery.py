"""A segment's recovery and index rebuild (Kafka's LogSegment.recover): the `.log`'s batches walked from its start,
each checked (size, CRC, offsets continuing and within the segment's int32 range and below the next segment's base),
and both indexes rewritten from the valid prefix at Kafka's cadence (an offset-index entry and a time-index entry once
more than `index.interval.bytes` accumulated since the previous one), in one write each.
On disk: the segment's `.index` and `.timeindex` (and with a recovery its `.txnindex`, which the log's producer-state
replay writes again), rewritten whole; the `.log` itself is cut by the caller (LogSegment.recover). A crash meanwhile
leaves indexes that the next open finds wrong and rebuilds.
Thread-safety: called with the segment's lock held.
"""
from __future__ import annotations

import logging

from engine.common.errors import CorruptRecordError, KafkaError
from engine.record.batch_format import INT32_MAX
from engine.segments import names
from engine.segments.offset_index import OffsetIndex
from engine.segments.time_index import TimeIndex

log = logging.getLogger("kafkalog.segment")


def index_valid_prefix(seg, upper: int | None, recovering: bool) -> int:
    """Re-index the valid prefix of `seg`'s `.log` (its lock held): its batches checked (size, CRC, offsets continuing
    and below `upper`) up to the first that fails; with `recovering`, its `.txnindex` starts again empty too (the
    producer-state replay writes it). The prefix's length."""
    for kind in (names.INDEX, names.TIME_INDEX):
        seg.open_index(kind, check=False)
    seg.offset_index.reset(seg.config.max_index_size)
    seg.time_index.reset(seg.config.max_index_size)
    if recovering:
        seg.txn_index.reset()
    valid = last_index_entry = 0
    max_ts = (-1, seg.base_offset)
    offsets, times, last_indexed_ts = bytearray(), bytearray(), -1  # entries, written in one go
    base, interval, prev_last = seg.base_offset, seg.config.index_interval_bytes, seg.base_offset - 1
    try:
        for batch in seg.batches():
            batch.ensure_valid()  # size and CRC, as Kafka's recovery checks them
            seg.check_follows(batch, prev_last, upper)
            if batch.last_offset - base > INT32_MAX:
                raise CorruptRecordError("batch offset out of the segment's int32 range",
                                         file=seg.log_path, position=batch.position)
            prev_last = batch.last_offset
            if batch.max_timestamp > max_ts[0]:
                max_ts = (batch.max_timestamp, batch.last_offset)
            if valid - last_index_entry > interval:  # Kafka's cadence, as in append()
                offsets += OffsetIndex.ENTRY.pack(batch.last_offset - base, valid)
                if max_ts[0] > last_indexed_ts:
                    times += TimeIndex.ENTRY.pack(max_ts[0], max_ts[1] - base)
                    last_indexed_ts = max_ts[0]
                last_index_entry = valid
            valid += batch.size_in_bytes
    except KafkaError as exc:  # the first invalid batch ends the valid prefix
        log.warning("%s %s: stopped at position %d: %s", "recovering" if recovering else "indexing",
                    seg.log_path, valid, exc)
    seg.appender.max_ts = max_ts
    # a segment written under a larger segment.index.bytes (or brought back by a power cut) may need more
    # room than the config gives now: the rebuilt index holds every entry, as the one it replaces did
    for index, needed in ((seg.offset_index, len(offsets)), (seg.time_index, len(times) + TimeIndex.ENTRY.size)):
        index.resize(max(index.max_entries * index.entry_size, needed))
    seg.offset_index.load_entries(offsets)
    seg.time_index.load_entries(times)
    seg.offset_index.trim_to_valid_size()
    seg.time_index.maybe_append(*max_ts, skip_full_check=True)
    seg.time_index.trim_to_valid_size()
    seg.appender.bytes_since_last_index_entry = 0
    seg.appender.rolling_ts_loaded = False
    return valid
