"""Columnar decode results in Arrow's memory layout, shared by both codec twins.

A binary column is `data` (concatenated bytes), `offsets` (int32, n+1 entries)
and `validity` (an LSB-first bitmap, or None when nothing is null), exactly the
buffers of an Arrow `binary`/`string` array, so `to_arrow()` copies nothing.
Buffers are any objects with the buffer protocol (array.array in the twin,
native buffers in the core). Immutable once built; safe to share between threads.
Leaf module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.common.errors import InvalidRecordError


def _ints(buf: Any) -> list[int]:
    return memoryview(buf).tolist() if buf is not None else []


def _is_valid(validity: Any, i: int) -> bool:
    return validity is None or bool(memoryview(validity)[i >> 3] >> (i & 7) & 1)


@dataclass(frozen=True)
class BinaryColumn:
    """n variable-length values, each bytes or null."""

    data: Any
    offsets: Any
    validity: Any
    null_count: int

    def __len__(self) -> int:
        return len(memoryview(self.offsets)) - 1

    def to_pylist(self, text: bool = False) -> list:
        """Values as bytes (str when `text`), None for nulls."""
        offs = _ints(self.offsets)
        data = memoryview(self.data)
        out: list = []
        for i in range(len(offs) - 1):
            if not _is_valid(self.validity, i):
                out.append(None)
            else:
                raw = bytes(data[offs[i]:offs[i + 1]])
                out.append(raw.decode("utf-8", "surrogateescape") if text else raw)
        return out

    def to_arrow(self, text: bool = False):
        """A pyarrow binary (or string) array over the same buffers."""
        import pyarrow as pa

        validity = None if self.validity is None else pa.py_buffer(self.validity)
        return pa.Array.from_buffers(
            pa.string() if text else pa.binary(),
            len(self),
            [validity, pa.py_buffer(self.offsets), pa.py_buffer(self.data)],
            null_count=self.null_count,
        )


@dataclass(frozen=True)
class HeadersColumn:
    """Per record a list of (key: str, value: bytes|None); null where a record has no headers."""

    list_offsets: Any
    validity: Any
    null_count: int
    keys: BinaryColumn
    values: BinaryColumn

    def to_pylist(self) -> list:
        offs = _ints(self.list_offsets)
        keys = self.keys.to_pylist(text=True)
        values = self.values.to_pylist()
        return [
            list(zip(keys[offs[i]:offs[i + 1]], values[offs[i]:offs[i + 1]]))
            if _is_valid(self.validity, i) else None
            for i in range(len(offs) - 1)
        ]

    def to_arrow(self):
        import pyarrow as pa

        struct = pa.StructArray.from_arrays(
            [self.keys.to_arrow(text=True), self.values.to_arrow()], names=["key", "value"]
        )
        validity = None if self.validity is None else pa.py_buffer(self.validity)
        n = len(memoryview(self.list_offsets)) - 1
        return pa.Array.from_buffers(
            pa.list_(struct.type), n, [validity, pa.py_buffer(self.list_offsets)],
            null_count=self.null_count, children=[struct],
        )


@dataclass(frozen=True)
class Columns:
    """Data records of a buffer, column by column (control records are never included).

    `next_offset` is where a following read continues: one past the last offset of the
    last batch examined (None when no batch was examined).
    """

    offsets: Any            # int64
    timestamps: Any         # int64 milliseconds, as Kafka reports them (LogAppendTime applied)
    timestamp_types: Any    # int32: 0 CreateTime, 1 LogAppendTime
    keys: BinaryColumn
    values: BinaryColumn
    headers: HeadersColumn | None
    next_offset: int | None

    def __len__(self) -> int:
        return len(memoryview(self.offsets))

    def to_pylist(self) -> list[dict]:
        """One dict per record (for tests and small reads; not a fast path)."""
        rows = zip(
            _ints(self.offsets), _ints(self.timestamps), _ints(self.timestamp_types),
            self.keys.to_pylist(), self.values.to_pylist(),
            self.headers.to_pylist() if self.headers is not None else [None] * len(self),
        )
        names = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")
        return [dict(zip(names, row)) for row in rows]

    def to_arrow(self):
        """A pyarrow.RecordBatch sharing these buffers (needs pyarrow)."""
        import pyarrow as pa

        n = len(self)
        arrays = [
            self.keys.to_arrow(),
            self.values.to_arrow(),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]),
            pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(self.timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self.timestamp_types)]),
        ]
        names = ["key", "value", "offset", "timestamp", "timestampType"]
        if self.headers is not None:
            arrays.append(self.headers.to_arrow())
            names.append("headers")
        return pa.RecordBatch.from_arrays(arrays, names=names)


def column_buffers(name: str, col):
    """(data, int32 offsets, (validity, bit offset) | None) of a binary column input.

    `col` is (data, offsets[, validity bitmap]) or a pyarrow Binary/String array; None stays None.
    """
    if col is None:
        return None
    if hasattr(col, "buffers") and hasattr(col, "offset"):  # pyarrow Binary/String array
        validity, offsets, data = col.buffers()[:3]
        offs = memoryview(offsets).cast("B").cast("i")[col.offset:col.offset + len(col) + 1]
        bits = None if col.null_count == 0 else (memoryview(validity).cast("B"), col.offset)
        return memoryview(data if data is not None else b"").cast("B"), offs, bits
    if not isinstance(col, tuple) or len(col) not in (2, 3):
        raise InvalidRecordError(f"{name} must be (data, offsets[, validity]) or a pyarrow binary array")
    data, offsets = memoryview(col[0]).cast("B"), memoryview(col[1])
    if offsets.format not in ("i", "l") or offsets.itemsize != 4:
        offsets = offsets.cast("B").cast("i")
    validity = col[2] if len(col) == 3 else None
    return data, offsets, None if validity is None else (memoryview(validity).cast("B"), 0)
