"""The pure-Python twin of the native columnar codec (engine._native._columnar): decode_columnar (a span of batches
as Arrow-layout columns) and encode_columnar (one batch from such columns).

Same API and same errors as the native module; it decodes through RecordBatch.walk and encodes through encode_batch.
Stateless; thread-safe.
"""
from __future__ import annotations

from array import array
from typing import Iterable

from engine.common.errors import InvalidRecordError, RecordTooLargeError
from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.columns import BinaryColumn, Columns, HeadersColumn, column_buffers
from engine.record.records import iter_batches
from engine.record.records_builder import encode_batch


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
