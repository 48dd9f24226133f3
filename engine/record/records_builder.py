"""The pure-Python twin of the native encoder (engine._native._records_builder): encode_batch, encode_control_batch
and RecordsBuilder (Kafka's MemoryRecordsBuilder, which encodes a producer's records as they are sent).

Same API and same errors as the native module: every input record goes through the shared validator
engine.record.batch_format. Stateless but for a RecordsBuilder, which one thread fills at a time.
"""
from __future__ import annotations

import struct

from engine.common.errors import InvalidRecordError
from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.records import _write_varint, _write_varlong, crc32c


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
