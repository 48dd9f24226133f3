"""The pure-Python twin of the native decode (engine._native._records): CRC-32C, varints, the RecordBatch v2 view and
its records, the batch walk of a buffer.

Same API and same errors as the native module; it is the readable reference, the fallback without a compiler, and a
test oracle. Byte layout: kafka-format.md §1-2 (see engine.record.batch_format). Decoding never trusts a length:
every read is bounds-checked and every rejection is a typed error (CorruptRecordError for the batch frame and CRC,
InvalidRecordError for records inside a CRC-valid batch, as Kafka). Buffers may be bytes, bytearray, memoryview or
mmap; batches are views, not copies. Stateless; thread-safe. The other twins (records_builder, columnar, log_scan,
log_validator, cleaner_records) build on it.
"""
from __future__ import annotations

import struct
from typing import Iterable, Iterator

import crcmod.predefined

from engine.common.errors import CorruptRecordError, InvalidRecordError, KafkaError, UnsupportedMessageFormatError
from engine.common.structs import CONSUMER_RECORD_FIELDS, consumer_record_fields, consumer_record_repr, header_size
from engine.record import batch_format as bf
from engine.record import compression as comp

_crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of `data`, continuing from `crc`."""
    return _crc32c(memoryview(data).cast("B") if not isinstance(data, bytes) else data, crc)


# --- varints ---------------------------------------------------------------------------------
def _uvarint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_varint(n: int, out: bytearray) -> None:
    _uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF, out)


def _write_varlong(n: int, out: bytearray) -> None:
    _uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def _read_uvarint(buf, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise InvalidRecordError("varint is truncated")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if i == max_bytes - 1 and b >> (1 if max_bytes == 10 else 4):
                raise InvalidRecordError("varint overflows its width")
            return value, pos
        shift += 7
    raise InvalidRecordError("varint is too long")


def _read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    v, pos = _read_uvarint(buf, pos, end, 5)
    return (v >> 1) ^ -(v & 1), pos


def _read_varlong(buf, pos: int, end: int) -> tuple[int, int]:
    v, pos = _read_uvarint(buf, pos, end, 10)
    return (v >> 1) ^ -(v & 1), pos


# --- records ---------------------------------------------------------------------------------
class Record:
    """One record: offset, timestamp (ms, as Kafka reports it), key, value, headers.

    For a control record `control_type` is its type id (0 ABORT, 1 COMMIT, 2-6 KRaft,
    -1 unknown) and, for COMMIT/ABORT, `coordinator_epoch` is set; both are None otherwise.
    """

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "control_type", "coordinator_epoch")

    def __init__(self, offset, timestamp, key, value, headers=None, control_type=None, coordinator_epoch=None):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers if headers else bf.NO_HEADERS
        self.control_type = control_type
        self.coordinator_epoch = coordinator_epoch

    def __eq__(self, other) -> bool:
        return bf.record_equals(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return ("Record(offset={!r}, timestamp={!r}, key={!r}, value={!r}, headers={!r}, "
                "control_type={!r}, coordinator_epoch={!r})").format(*bf.record_fields(self))

    def __reduce__(self):
        return (Record, bf.record_fields(self))


class ConsumerRecord:
    """A record as a consumer sees it, with kafka-python's fields (timestamp_type 0 CreateTime, 1 LogAppendTime)."""

    __slots__ = CONSUMER_RECORD_FIELDS

    def __init__(self, *fields) -> None:
        for name, value in zip(CONSUMER_RECORD_FIELDS, fields, strict=True):
            setattr(self, name, value)
        if not self.headers:
            self.headers = bf.NO_HEADERS

    def __eq__(self, other) -> bool:
        return consumer_record_fields(self) == consumer_record_fields(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return consumer_record_repr(self)

    def __reduce__(self):
        return (consumer_record, consumer_record_fields(self))


consumer_record = ConsumerRecord



# --- batches ---------------------------------------------------------------------------------
class RecordBatch:
    """A view of one RecordBatch v2 in a buffer; header fields are parsed, records decode on demand."""

    __slots__ = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
                 "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "records_count", "buffer", "position", "source")

    def __init__(self, view: memoryview, position: int = 0, source: str | None = None) -> None:
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence, self.records_count) = bf.HEADER.unpack_from(view, 0)
        self.buffer = view
        self.position = position
        self.source = source

    last_offset = property(lambda self: self.base_offset + self.last_offset_delta)
    next_offset = property(lambda self: self.base_offset + self.last_offset_delta + 1)
    size_in_bytes = property(lambda self: self.batch_length + bf.LOG_OVERHEAD)
    compression = property(lambda self: comp.NAMES[self.attributes & bf.COMPRESSION_MASK]
                           if self.attributes & bf.COMPRESSION_MASK < 5 else "invalid")
    timestamp_type = property(lambda self: bf.TIMESTAMP_TYPES[bool(self.attributes & bf.LOG_APPEND_TIME_FLAG)])
    is_transactional = property(lambda self: bool(self.attributes & bf.TRANSACTIONAL_FLAG))
    is_control = property(lambda self: bool(self.attributes & bf.CONTROL_FLAG))
    has_delete_horizon = property(lambda self: bool(self.attributes & bf.DELETE_HORIZON_FLAG))
    delete_horizon_ms = property(lambda self: self.base_timestamp if self.has_delete_horizon else None)
    last_sequence = property(lambda self: bf.increment_sequence(self.base_sequence, self.last_offset_delta))

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size_in_bytes}, compression={self.compression})")

    def compute_crc(self) -> int:
        """CRC-32C of the bytes the stored crc covers."""
        return crc32c(self.buffer[bf.ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        """Kafka's isValid(): large enough and the stored CRC matches."""
        return self.size_in_bytes >= bf.HEADER_SIZE and self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless is_valid()."""
        if not self.is_valid():
            raise CorruptRecordError(
                f"record batch CRC mismatch (stored {self.crc:#010x}, computed {self.compute_crc():#010x})",
                file=self.source, position=self.position, offset=self.base_offset)

    def _error(self, cls, message: str):
        return cls(message, file=self.source, position=self.position, offset=self.base_offset)

    def first_keyless_offset(self) -> int | None:
        """The offset of the first record without a key, or None (a compacted topic refuses such records)."""
        found = []
        self.walk(lambda offset, ts, key, *rest: found.append(offset) if key is None and not found else None)
        return found[0] if found else None

    def check_records(self) -> None:
        """Kafka's LogValidator reading every record (decompressed, bounded): the count, each record's framing, offset
        delta and timestamp, nothing after the last; InvalidRecordError (or the codec's error) naming the batch. The
        CRC is not checked here."""
        self.walk(_ignore)

    def first_at_or_after(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record (control records count, as in Kafka's ListOffsets) whose
        timestamp >= `timestamp` and offset >= `start_offset`, or None (CRC checked)."""
        for rec in self.records():
            if rec.timestamp >= timestamp and rec.offset >= start_offset:
                return rec.timestamp, rec.offset
        return None

    def _records_section(self, max_decompressed_bytes: int):
        codec = self.attributes & bf.COMPRESSION_MASK
        raw = self.buffer[bf.HEADER_SIZE:]
        if codec == 0:
            return raw
        try:
            return memoryview(comp.decompress(codec, raw, max_decompressed_bytes))
        except KafkaError as exc:
            raise self._error(type(exc), exc.message) from None

    def records(self, *, verify_crc: bool = True,
                max_decompressed_bytes: int = comp.DEFAULT_MAX_DECOMPRESSED) -> list[Record]:
        """Decode every record (control records included, with control_type set)."""
        if verify_crc:
            self.ensure_valid()
        out: list[Record] = []
        self.walk(lambda *fields: out.append(Record(*fields[:7])), max_decompressed_bytes)
        return out

    def __iter__(self) -> Iterator[Record]:
        """The records in order, CRC checked (this twin decodes them all first, so a bad record raises before any
        is returned; the native core decodes one per step and raises when it reaches it)."""
        return iter(self.records())

    def consumer_records(self, topic: str, partition: int, start_offset: int, max_records: int,
                         max_decompressed_bytes: int = comp.DEFAULT_MAX_DECOMPRESSED) -> tuple[list, int]:
        """The batch's records at or after `start_offset` as ConsumerRecords, at most `max_records`
        (none for a control batch); returns (records, next_offset to fetch from)."""
        if self.is_control:
            return [], self.next_offset
        if max_records <= 0:
            return [], start_offset
        self.ensure_valid()
        out: list[ConsumerRecord] = []
        epoch = self.partition_leader_epoch if self.partition_leader_epoch >= 0 else None
        tstype = 1 if self.attributes & bf.LOG_APPEND_TIME_FLAG else 0

        def keep(offset, ts, key, value, headers, *_ignored):
            if offset >= start_offset:
                out.append(ConsumerRecord(topic, partition, epoch, offset, ts, tstype, key, value, headers, None,
                                          -1 if key is None else len(key), -1 if value is None else len(value),
                                          header_size(headers)))
        self.walk(keep, max_decompressed_bytes)
        if len(out) > max_records:
            return out[:max_records], out[max_records].offset
        return out, self.next_offset

    def walk(self, emit, max_decompressed_bytes: int = comp.DEFAULT_MAX_DECOMPRESSED) -> None:
        """The reference record walker (no CRC check): for each record call
        emit(offset, timestamp, key, value, headers, control_type, coordinator_epoch,
        stored_timestamp, size_in_bytes), where timestamp is as Kafka reports it and
        stored_timestamp is baseTimestamp + delta as written."""
        count = self.records_count
        if count < 0:
            raise self._error(InvalidRecordError, f"invalid record count {count}")
        buf = self._records_section(max_decompressed_bytes)
        end = len(buf)
        if count * bf.MIN_RECORD_SIZE > end:
            raise self._error(InvalidRecordError, f"record count {count} cannot fit in {end} bytes")
        log_append = self.attributes & bf.LOG_APPEND_TIME_FLAG
        control = self.attributes & bf.CONTROL_FLAG
        pos = 0
        try:
            for _ in range(count):
                start = pos
                size, pos = _read_varint(buf, pos, end)
                if size < 0 or end - pos < size:
                    raise InvalidRecordError(bf.SIZE_OVERRUN)
                rend = pos + size
                if size < 1:
                    raise InvalidRecordError(bf.SIZE_MISMATCH)
                pos += 1  # attributes, unused
                ts_delta, pos = _read_varlong(buf, pos, rend)
                off_delta, pos = _read_varint(buf, pos, rend)
                key, pos = _read_field(buf, pos, rend)
                value, pos = _read_field(buf, pos, rend)
                n_headers, pos = _read_varint(buf, pos, rend)
                if n_headers < 0:
                    raise InvalidRecordError(f"invalid number of record headers {n_headers}")
                headers = []
                for _h in range(n_headers):
                    hk, pos = _read_field(buf, pos, rend)
                    if hk is None:
                        raise InvalidRecordError("invalid negative header key size")
                    hv, pos = _read_field(buf, pos, rend)
                    headers.append((hk.decode("utf-8", "surrogateescape"), hv))
                if pos != rend:
                    raise InvalidRecordError(bf.SIZE_MISMATCH)
                if not 0 <= off_delta <= self.last_offset_delta:
                    raise InvalidRecordError(bf.BAD_OFFSET_DELTA)
                stored = self.base_timestamp + ts_delta
                if not -2**63 <= stored <= bf.INT64_MAX:
                    raise InvalidRecordError(bf.TIMESTAMP_OVERFLOW)
                ts = self.max_timestamp if log_append else stored
                ctype = epoch = None
                if control:
                    ctype, epoch = bf.control_fields(key, value)
                emit(self.base_offset + off_delta, ts, key, value, headers, ctype, epoch, stored, pos - start)
        except InvalidRecordError as exc:
            raise self._error(InvalidRecordError, exc.message) from None
        if pos != end:
            raise self._error(InvalidRecordError,
                              f"incorrect declared batch size: {end - pos} bytes remain after {count} records")


def _ignore(*_fields) -> None:
    """A walk's emit that keeps nothing (check_records)."""


def _read_field(buf, pos: int, end: int):
    n, pos = _read_varint(buf, pos, end)
    if n < 0:
        return None, pos
    if end - pos < n:
        raise InvalidRecordError(f"field of {n} bytes overruns the record")
    return bytes(buf[pos:pos + n]), pos + n


def _as_view(buffer) -> memoryview:
    mv = memoryview(buffer)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def iter_batches(buffer, *, position: int = 0, source: str | None = None) -> Iterator[RecordBatch]:
    """Walk the batches of a buffer (a `.log` file's bytes or a slice of it).

    Like Kafka's file iterator it stops silently at a partial tail (fewer than 17 bytes, or a
    batch that runs past the end); a size field below 14 is CorruptRecordError; magic 0/1 is
    UnsupportedMessageFormatError. `position` is added to reported positions; `source` names
    the file in errors. CRCs are checked when records are decoded (or by is_valid()).
    """
    mv = _as_view(buffer)
    n = len(mv)
    pos = 0
    while n - pos >= bf.HEADER_SIZE_UP_TO_MAGIC:
        base_offset, size = struct.unpack_from(">qi", mv, pos)
        if size < bf.MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"record size {size} is smaller than the minimum {bf.MIN_ENTRY_SIZE}",
                                     file=source, position=position + pos, offset=base_offset)
        end = pos + bf.LOG_OVERHEAD + size
        if end > n:
            return
        magic = mv[pos + 16]
        if magic != bf.MAGIC:
            cls = UnsupportedMessageFormatError if magic in (0, 1) else CorruptRecordError
            what = "legacy message format" if magic in (0, 1) else "unknown magic"
            raise cls(f"{what} (magic {magic}) is not supported", file=source, position=position + pos,
                      offset=base_offset)
        if size < bf.HEADER_SIZE - bf.LOG_OVERHEAD:
            raise CorruptRecordError(f"batch size {size + bf.LOG_OVERHEAD} is below the 61-byte header",
                                     file=source, position=position + pos, offset=base_offset)
        (last_delta,) = struct.unpack_from(">i", mv, pos + 23)
        if base_offset < 0 or last_delta < 0 or base_offset >= bf.INT64_MAX - last_delta:
            raise CorruptRecordError(bf.BAD_BATCH_OFFSETS, file=source, position=position + pos, offset=base_offset)
        yield RecordBatch(mv[pos:end], position + pos, source)
        pos = end


def first_at_or_after(buffer, timestamp: int, start_offset: int, *, position: int = 0,
                      source: str | None = None) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record (control records count) with timestamp >= `timestamp` and offset >=
    `start_offset` in the batches of `buffer` (walked as iter_batches walks them), or None; only a batch whose header
    says it may hold one is decoded (CRC checked)."""
    return first_in_batches(iter_batches(buffer, position=position, source=source), timestamp, start_offset)


def first_in_batches(batches: Iterable[RecordBatch], timestamp: int, start_offset: int) -> tuple[int, int] | None:
    """first_at_or_after over batches given one by one (a read-only segment's, read with pread)."""
    for batch in batches:
        if batch.max_timestamp >= timestamp and batch.last_offset >= start_offset:
            found = batch.first_at_or_after(timestamp, start_offset)
            if found is not None:
                return found
    return None
