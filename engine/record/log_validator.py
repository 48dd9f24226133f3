"""The pure-Python twin of the native log validator (engine._native._log_validator): prepare_leader_append checks
a producer's batches (every record read, as Kafka's LogValidator reads them: RecordBatch.check_records) and stamps
their offsets and leader epoch for a leader's append; leader_copy reads the records
where the topic's codec or timestamp bounds require it, as Kafka's LogValidator, and re-encodes the batch.

Same API and same errors as the native module. Stateless; thread-safe.
"""
from __future__ import annotations

import struct

from engine.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from engine.record import batch_format as bf
from engine.record.records import RecordBatch, _as_view, crc32c, iter_batches
from engine.record.records_builder import _assemble, _write_record


def prepare_leader_append(buffer, first_offset: int, leader_epoch: int, log_append_time: int,
                          max_batch_bytes: int, allow_control: bool = False, source: str | None = None,
                          checks: tuple | None = None):
    """Check a producer's batches and prepare them for a leader's append.

    Every batch must be whole, within `max_batch_bytes`, CRC-valid, have consecutive offsets, hold exactly its
    count of well-framed records (RecordBatch.check_records) and (unless `allow_control`) not be a control batch. Each gets offsets from `first_offset` on and the leader
    epoch; with `log_append_time` >= 0 also the LogAppendTime flag and timestamp (and a new CRC).
    With `checks` = (target codec, level, bounds), the records are read as Kafka's LogValidator reads them
    (`leader_copy`): a batch is re-encoded in the topic's codec, and a CreateTime outside `bounds` refuses it.
    Returns (pieces, next_offset, max_timestamp, offset_of_max_timestamp, batch_count), where pieces
    alternate a patched 61-byte header copy and a zero-copy view of the rest of the batch, ready for writev.
    """
    mv = _as_view(buffer)
    offset, max_ts, off_max, pieces, end = first_offset, -1, first_offset, [], 0
    batches = 0
    for b in iter_batches(mv, source=source):
        pos, end = b.position, b.position + b.size_in_bytes
        if b.size_in_bytes > max_batch_bytes:
            raise RecordTooLargeError(f"batch of {b.size_in_bytes} bytes exceeds max.message.bytes={max_batch_bytes}",
                                      file=source, offset=b.base_offset)
        if not b.is_valid():
            raise CorruptRecordError("record batch CRC mismatch", file=source, position=pos, offset=b.base_offset)
        if b.is_control:
            if not allow_control:
                raise InvalidRecordError("clients may not write control batches", file=source, offset=b.base_offset)
        elif b.records_count != b.last_offset_delta + 1:
            raise InvalidRecordError("a produced batch must have consecutive offsets", file=source,
                                     offset=b.base_offset)
        b.check_records()
        copy = None if checks is None else leader_copy(b, offset, leader_epoch, log_append_time, *checks)
        if copy is None:
            header, body = bytearray(mv[pos:pos + bf.HEADER_SIZE]), mv[pos + bf.HEADER_SIZE:end]
            struct.pack_into(">q", header, 0, offset)
            struct.pack_into(">i", header, 12, leader_epoch)
            batch_max, last_delta = b.max_timestamp, b.last_offset_delta
            if log_append_time >= 0:
                batch_max = log_append_time
                struct.pack_into(">h", header, 21, b.attributes | bf.LOG_APPEND_TIME_FLAG)
                struct.pack_into(">q", header, 35, log_append_time)
                struct.pack_into(">I", header, 17, crc32c(body, crc32c(bytes(header[bf.ATTRIBUTES_OFFSET:]))))
        else:
            if len(copy) > max_batch_bytes:
                raise RecordTooLargeError(f"batch of {len(copy)} bytes once re-encoded exceeds max.message.bytes="
                                          f"{max_batch_bytes}", file=source, offset=offset)
            head = bf.HEADER.unpack_from(copy)
            header, body = memoryview(copy)[:bf.HEADER_SIZE], memoryview(copy)[bf.HEADER_SIZE:]
            batch_max, last_delta = head[8], head[6]
        pieces += (header, body)
        if batch_max > max_ts:
            max_ts, off_max = batch_max, offset + last_delta
        offset += last_delta + 1
        batches += 1
    if end != len(mv) or batches == 0:
        raise CorruptRecordError("the appended bytes are not a sequence of whole record batches", file=source)
    return pieces, offset, max_ts, off_max, batches


def leader_copy(b: RecordBatch, offset: int, leader_epoch: int, log_append_time: int, target: int, level,
                bounds: tuple[int, int] | None) -> bytes | None:
    """Kafka's LogValidator reading the records of one client batch (CRC and framing checked before): with `bounds`
    (lo, hi), a CreateTime record stamped outside them (not -1) refuses the batch (InvalidTimestampError); when the
    topic's codec `target` differs (batch_format.reencoded), the batch is re-encoded as Kafka's MemoryRecordsBuilder
    writes it: base offset `offset`, the leader epoch, offset deltas 0..n-1, each record's timestamp, key, value and
    headers, base timestamp the first record's, max timestamp the records' (or `log_append_time`), producer id,
    epoch, base sequence, transactional and control flags kept, the codec at `level`. None: stored as sent."""
    convert = bf.reencoded(b.attributes, target)
    if not convert and bounds is None:
        return None
    items = []

    def keep(_offset, ts, key, value, headers, *_rest):
        if bounds is not None and ts != -1 and not bounds[0] <= ts <= bounds[1]:
            raise bf.timestamp_out_of_range(len(items), offset + len(items), ts, bounds, b.source)
        items.append((key, value, headers, ts))
    b.walk(keep)
    if not convert:
        return None
    if not items:
        raise b._error(InvalidRecordError, "a batch needs at least one record")
    body = bytearray()
    base_ts = items[0][3]
    for i, (key, value, headers, ts) in enumerate(items):
        _write_record(body, i, bf.timestamp_delta(ts, base_ts), key, value,
                      [(k.encode("utf-8", "surrogateescape"), v) for k, v in headers])
    kept = b.attributes & (bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG)
    if log_append_time >= 0:
        kept |= bf.LOG_APPEND_TIME_FLAG
    return _assemble(body, len(items), base_offset=offset, ple=leader_epoch, codec=target, level=level,
                     attributes=kept | target, last_delta=len(items) - 1, base_ts=base_ts,
                     max_ts=log_append_time if log_append_time >= 0 else max(item[3] for item in items),
                     pid=b.producer_id, epoch=b.producer_epoch, seq=b.base_sequence)
