"""The pure-Python twin of the native cleaner records (engine._native._cleaner_records): rebuild_batch, the log
cleaner's rewrite of a batch keeping only some of its records.

Same API and same errors as the native module. Stateless; thread-safe.
"""
from __future__ import annotations

from engine.record import batch_format as bf
from engine.record.records_builder import _assemble, _encode_records


def rebuild_batch(batch, records, delete_horizon_ms: int | None = None) -> bytes:
    """The log cleaner's rewrite of `batch` keeping only `records` (Records, at their own offsets): the same base
    offset, last offset, compression, timestamp type, producer fields, transactional and control flags and leader
    epoch; with `delete_horizon_ms` the base timestamp holds it (attribute bit 6). Without records, the header-only
    empty batch Kafka keeps for a producer's sequence: uncompressed, base timestamp -1, the original max timestamp."""
    items = list(records)
    kept = batch.attributes & (bf.LOG_APPEND_TIME_FLAG | bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG)
    fields = dict(base_offset=batch.base_offset, ple=batch.partition_leader_epoch, level=None,
                  last_delta=batch.last_offset_delta, pid=batch.producer_id, epoch=batch.producer_epoch,
                  seq=batch.base_sequence)
    if not items:
        return _assemble(b"", 0, codec=0, attributes=kept, base_ts=-1, max_ts=batch.max_timestamp, **fields)
    if delete_horizon_ms is not None:
        kept |= bf.DELETE_HORIZON_FLAG
        bf.check_timestamp(delete_horizon_ms)
    codec = batch.attributes & bf.COMPRESSION_MASK
    body, prev, base_ts, max_seen = _encode_records(items, batch.base_offset, delete_horizon_ms)
    bf.last_offset_delta(prev, batch.last_offset_delta)
    log_append = batch.attributes & bf.LOG_APPEND_TIME_FLAG
    return _assemble(body, len(items), codec=codec, attributes=kept | codec, base_ts=base_ts,
                     max_ts=batch.max_timestamp if log_append else max_seen, **fields)
