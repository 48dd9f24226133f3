"""The pure-Python twin of the native codec: RecordBatch v2 encode/decode, varints, CRC-32C.

Same API and same errors as `engine._native._core`; it is the readable reference,
the fallback without a compiler, and a test oracle. Byte layout: kafka-format.md §1-2
(see engine.record.batch_format). Decoding never trusts a length: every read is bounds-checked
and every rejection is a typed error (CorruptRecordError for the batch frame and CRC,
InvalidRecordError for records inside a CRC-valid batch, as Kafka). Buffers may be
bytes, bytearray, memoryview or mmap; batches are views, not copies.
Stateless; thread-safe. Leaf module.
"""
from __future__ import annotations

import struct
from array import array
from typing import Iterable, Iterator

import crcmod.predefined

from engine.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)
from engine.common.structs import CONSUMER_RECORD_FIELDS, consumer_record_fields, consumer_record_repr, header_size
from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.columns import BinaryColumn, Columns, HeadersColumn, column_buffers

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


class RecordsBuilder:
    """Kafka's MemoryRecordsBuilder: records are encoded as they are appended (offset delta = their index,
    timestamps relative to the first), and build() frames them into one batch."""

    __slots__ = ("_body", "_infos", "_base_ts", "_max_ts")

    def __init__(self) -> None:
        self._body = bytearray()
        self._infos: list[tuple[int, int, int, int]] = []
        self._base_ts: int | None = None
        self._max_ts = -1

    def append(self, key, value, headers, timestamp: int) -> int:
        """Add a record (key/value bytes or None, headers as (bytes, bytes|None) pairs); returns its index."""
        for name, field in [("key", key), ("value", value)] + [
                (n, f) for hk, hv in headers or () for n, f in (("header key", hk), ("header value", hv))]:
            if field is not None and type(field) is not bytes or field is None and name == "header key":
                raise InvalidRecordError(f"{name} must be bytes, got {type(field).__name__}")
        delta = bf.timestamp_delta(timestamp, timestamp if self._base_ts is None else self._base_ts)
        if self._base_ts is None:
            self._base_ts = timestamp
        index = len(self._infos)
        _write_record(self._body, index, delta, key, value, headers or [])
        self._infos.append((timestamp, -1 if key is None else len(key), -1 if value is None else len(value),
                            sum(len(k) + len(v or b"") for k, v in headers) if headers else -1))
        self._max_ts = max(self._max_ts, timestamp)
        return index

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, index: int) -> tuple[int, int, int, int]:
        """(timestamp, key size, value size, header size) of record `index` (-1 sizes for null / none)."""
        return self._infos[index]

    def build(self, *, compression="none", producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, transactional: bool = False, compression_level: int | None = None) -> bytes:
        """The batch (base offset 0: the log assigns offsets), compressed at `compression_level` (None: the codec's
        default)."""
        codec, attributes, _ = bf.batch_attributes(
            base_offset=0, compression=compression, timestamp_type="create", log_append_time_ms=None,
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
            transactional=transactional, partition_leader_epoch=-1)
        if not self._infos:
            raise InvalidRecordError("a batch needs at least one record")
        return _assemble(bytes(self._body), len(self._infos), base_offset=0, ple=-1, codec=codec,
                         level=compression_level,
                         attributes=attributes, last_delta=len(self._infos) - 1, base_ts=self._base_ts,
                         max_ts=self._max_ts, pid=producer_id, epoch=producer_epoch, seq=base_sequence)


def _write_record(out: bytearray, delta: int, ts_delta: int, key, value, headers) -> None:
    body = bytearray(b"\x00")
    _write_varlong(ts_delta, body)
    _write_varint(delta, body)
    for field in (key, value):
        if field is None:
            _write_varint(-1, body)
        else:
            _write_varint(len(field), body)
            body += field
    _write_varint(len(headers), body)
    for hk, hv in headers:
        _write_varint(len(hk), body)
        body += hk
        if hv is None:
            _write_varint(-1, body)
        else:
            _write_varint(len(hv), body)
            body += hv
    if len(body) > bf.INT32_MAX:
        raise InvalidRecordError("a record body exceeds 2 GiB")
    _write_varint(len(body), out)
    out += body


def _assemble(records_bytes, count: int, *, base_offset, ple, codec, level, attributes,
              last_delta, base_ts, max_ts, pid, epoch, seq) -> bytes:
    payload = comp.compress(codec, records_bytes, level) if codec else records_bytes
    size = bf.HEADER_SIZE + len(payload)
    if size - bf.LOG_OVERHEAD > bf.INT32_MAX:
        raise InvalidRecordError("a batch exceeds 2 GiB")
    out = bytearray(bf.HEADER.pack(base_offset, size - bf.LOG_OVERHEAD, ple, bf.MAGIC, 0, attributes,
                                   last_delta, base_ts, max_ts, pid, epoch, seq, count))
    out += payload
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[bf.ATTRIBUTES_OFFSET:]))
    return bytes(out)


def encode_batch(records, *, base_offset: int = 0, compression="none", compression_level: int | None = None,
                 timestamp_type: str = "create", log_append_time_ms: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False, partition_leader_epoch: int = -1,
                 last_offset_delta: int | None = None) -> bytes:
    """Encode one RecordBatch v2 from (key, value, headers, timestamp_ms) tuples or Records.

    Tuples take consecutive offsets; a Record keeps its own offset (relative to base_offset),
    so decoded records re-encode to the same offsets. `last_offset_delta` may extend the batch's
    offset range past its last record, as the log cleaner does.
    """
    codec, attributes, max_ts = bf.batch_attributes(
        base_offset=base_offset, compression=compression, timestamp_type=timestamp_type,
        log_append_time_ms=log_append_time_ms, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, transactional=transactional, partition_leader_epoch=partition_leader_epoch)
    items = list(records) if not isinstance(records, (list, tuple)) else records
    if not items:
        raise InvalidRecordError("a batch needs at least one record")
    body, prev, base_ts, max_seen = _encode_records(items, base_offset, None)
    last = bf.last_offset_delta(prev, last_offset_delta)
    return _assemble(body, len(items), base_offset=base_offset, ple=partition_leader_epoch, codec=codec,
                     level=compression_level, attributes=attributes, last_delta=last, base_ts=base_ts,
                     max_ts=max_seen if max_ts == -2 else max_ts, pid=producer_id, epoch=producer_epoch,
                     seq=base_sequence)


def _encode_records(items: list, base_offset: int, base_ts: int | None) -> tuple[bytearray, int, int, int]:
    """(records section, last offset delta, base timestamp, max timestamp) of validated input records; the base
    timestamp is the first record's unless given."""
    body = bytearray()
    prev = max_seen = -1
    for i, rec in enumerate(items):
        delta, key, value, headers, ts = bf.unpack_record(i, rec, prev, base_offset)
        if base_ts is None:
            base_ts = ts
        max_seen = max(max_seen, ts)
        _write_record(body, delta, bf.timestamp_delta(ts, base_ts), key, value, headers)
        prev = delta
    return body, prev, base_ts, max_seen


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


def _columns_to_records(keys, values, timestamps) -> list:
    vals = column_buffers("values", values)
    if vals is None:
        raise InvalidRecordError("values column is required")
    n = len(vals[1]) - 1
    ks = column_buffers("keys", keys)
    if ks is not None and len(ks[1]) - 1 != n:
        raise InvalidRecordError("keys and values columns differ in length")
    if isinstance(timestamps, int) and not isinstance(timestamps, bool):
        tss = [timestamps] * n
    else:
        tss = memoryview(timestamps).cast("B").cast("q") if timestamps is not None else [-1] * n
        if len(tss) != n:
            raise InvalidRecordError("timestamps column differs in length from values")

    def cell(col, i):
        data, offs, bits = col
        if bits is not None and not bits[0][(bits[1] + i) >> 3] >> ((bits[1] + i) & 7) & 1:
            return None
        lo, hi = offs[i], offs[i + 1]
        if not 0 <= lo <= hi <= len(data):
            raise InvalidRecordError(f"column offsets [{lo}, {hi}) out of bounds at row {i}")
        return bytes(data[lo:hi])

    return [(cell(ks, i) if ks else None, cell(vals, i), None, tss[i]) for i in range(n)]


def encode_columnar(*, values, keys=None, timestamps=None, **batch_kwargs) -> bytes:
    """Encode one batch from columns: `values`/`keys` as (data, int32 offsets[, validity bitmap])
    tuples or pyarrow binary arrays; `timestamps` an int64 buffer or one int for all records.
    Keywords are encode_batch's. No headers."""
    return encode_batch(_columns_to_records(keys, values, timestamps), **batch_kwargs)


def encode_control_batch(kind: str, *, base_offset: int, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int = 0, timestamp_ms: int,
                         partition_leader_epoch: int = -1) -> bytes:
    """Encode a COMMIT or ABORT transaction marker batch (78 bytes)."""
    key, value, ts = bf.control_batch_params(kind, base_offset=base_offset, producer_id=producer_id,
                                             producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
                                             timestamp_ms=timestamp_ms, partition_leader_epoch=partition_leader_epoch)
    body = bytearray()
    _write_record(body, 0, 0, key, value, [])
    return _assemble(body, 1, base_offset=base_offset, ple=partition_leader_epoch, codec=0, level=None,
                     attributes=bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG, last_delta=0, base_ts=ts, max_ts=ts,
                     pid=producer_id, epoch=producer_epoch, seq=-1)


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
                    raise InvalidRecordError(f"invalid record size {size}: only {end - pos} bytes remain")
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


def _bitmap(valid: list[bool]) -> tuple[bytes | None, int]:
    nulls = valid.count(False)
    if not nulls:
        return None, 0
    bits = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits), nulls


def _binary_column(values: Iterable) -> BinaryColumn:
    data = bytearray()
    offsets = array("i", [0])
    valid = []
    for v in values:
        valid.append(v is not None)
        if v is not None:
            data += v
            if len(data) > bf.INT32_MAX:
                raise RecordTooLargeError("columnar decode exceeds 2 GiB in one column; read a smaller range")
        offsets.append(len(data))
    bits, nulls = _bitmap(valid)
    return BinaryColumn(bytes(data), offsets, bits, nulls)


def decode_columnar(buffer, *, start_offset: int | None = None, end_offset: int | None = None,
                    include_headers: bool = False, verify_crc: bool = True,
                    max_decompressed_bytes: int = comp.DEFAULT_MAX_DECOMPRESSED,
                    position: int = 0, source: str | None = None) -> Columns:
    """Decode the data records with start_offset <= offset < end_offset into Arrow-layout columns."""
    rows: list[tuple] = []
    next_offset = None
    for batch in iter_batches(buffer, position=position, source=source):
        if end_offset is not None and batch.base_offset >= end_offset:
            break
        next_offset = batch.next_offset if end_offset is None else min(batch.next_offset, end_offset)
        if batch.is_control or (start_offset is not None and batch.last_offset < start_offset):
            continue
        if verify_crc:
            batch.ensure_valid()
        tstype = 1 if batch.attributes & bf.LOG_APPEND_TIME_FLAG else 0

        def keep(offset, ts, key, value, headers, *_ignored, tstype=tstype):
            if (start_offset is None or offset >= start_offset) and (end_offset is None or offset < end_offset):
                rows.append((offset, ts, tstype, key, value, headers))

        batch.walk(keep, max_decompressed_bytes)
    headers = None
    if include_headers:
        list_offsets = array("i", [0])
        flat: list = []
        for r in rows:
            flat.extend(r[5])
            list_offsets.append(len(flat))
        bits, nulls = _bitmap([bool(r[5]) for r in rows])
        headers = HeadersColumn(list_offsets, bits, nulls,
                                _binary_column(k.encode("utf-8", "surrogateescape") for k, _ in flat),
                                _binary_column(v for _, v in flat))
    return Columns(
        offsets=array("q", (r[0] for r in rows)),
        timestamps=array("q", (r[1] for r in rows)),
        timestamp_types=array("i", (r[2] for r in rows)),
        keys=_binary_column(r[3] for r in rows),
        values=_binary_column(r[4] for r in rows),
        headers=headers,
        next_offset=next_offset,
    )


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


def prepare_leader_append(buffer, first_offset: int, leader_epoch: int, log_append_time: int,
                          max_batch_bytes: int, allow_control: bool = False, source: str | None = None,
                          checks: tuple | None = None):
    """Check a producer's batches and prepare them for a leader's append.

    Every batch must be whole, within `max_batch_bytes`, CRC-valid, have consecutive offsets and (unless
    `allow_control`) not be a control batch. Each gets offsets from `first_offset` on and the leader
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
