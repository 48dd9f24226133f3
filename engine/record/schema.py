"""Kafka's message-schema field encodings, as the internal topics' keys and values use them.

Non-flexible versions: int8/16/32/64 big-endian; string = int16 length + UTF-8 (-1: null); bytes = int32 length
(-1: null); array = int32 count (-1: null). Flexible versions: compact string/array = unsigned varint
(length + 1, 0: null), and every struct ends with tagged fields (uvarint count, then tag, size, data). A `Writer`
made flexible writes the compact forms; both are read. A `Reader` past its end, or given a negative length, raises
CorruptRecordError naming the field.
Pure functions over bytes; thread-safe.
"""
from __future__ import annotations

import struct

from engine.common.errors import CorruptRecordError, InvalidRecordError
from engine.record.records import _read_uvarint, _uvarint

_INTS = {8: struct.Struct(">b"), 16: struct.Struct(">h"), 32: struct.Struct(">i"), 64: struct.Struct(">q")}
_NULL16, _NULL32 = _INTS[16].pack(-1), _INTS[32].pack(-1)


def encoded_string(value: str | None) -> bytes:
    """A non-flexible string: int16 length + UTF-8 (None: a null string, length -1)."""
    if value is None:
        return _NULL16
    data = value.encode()
    return _INTS[16].pack(len(data)) + data


def encoded_int32s(values: list[int]) -> bytes:
    """A non-null array of int32: its length, then the values (one pack for them all)."""
    return struct.pack(f">i{len(values)}i", len(values), *values)


def encoded_bytes(value) -> bytes:
    """Non-flexible bytes: int32 length + the bytes (None: a null value, length -1)."""
    return _NULL32 if value is None else _INTS[32].pack(len(value)) + value


class Writer:
    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def uvarint(self, n: int) -> "Writer":
        _uvarint(n, self.out)
        return self

    def _compact(self, n: int | None) -> "Writer":
        """A compact length: n + 1, 0 for null."""
        return self.uvarint(0 if n is None else n + 1)

    def int(self, bits: int, value: int) -> "Writer":
        self.out += _INTS[bits].pack(value)
        return self

    def _compact_data(self, data) -> "Writer":
        """Compact string or bytes: the compact length, then the bytes (None: null)."""
        self._compact(None if data is None else len(data)).out += data or b""
        return self

    def string(self, value: str | None) -> "Writer":
        if self.flexible:
            return self._compact_data(None if value is None else value.encode())
        self.out += encoded_string(value)
        return self

    def bytes(self, value) -> "Writer":
        """The bytes after their length: int32 (-1: null), or compact when flexible (0: null)."""
        if self.flexible:
            return self._compact_data(None if value is None else bytes(value))
        self.out += encoded_bytes(value)
        return self

    def count(self, n: int | None) -> "Writer":
        """An array's length (None: a null array)."""
        return self._compact(n) if self.flexible else self.int(32, -1 if n is None else n)

    def int32s(self, values: list[int]) -> "Writer":
        """An array of int32: its length, then the values (one pack for them all)."""
        if self.flexible:
            self._compact(len(values)).out += struct.pack(f">{len(values)}i", *values)
            return self
        self.out += encoded_int32s(values)
        return self

    def tagged(self, fields: dict[int, bytes]) -> "Writer":
        """A flexible struct's tagged fields: their count, then each tag, size and bytes in ascending tag order."""
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag])).out += fields[tag]
        return self

    def raw(self, data: bytes) -> "Writer":
        """Bytes already encoded (a structure another module lays out)."""
        self.out += data
        return self

    def done(self) -> bytes:
        return bytes(self.out)


class Reader:
    def __init__(self, data, what: str = "record") -> None:
        self.data, self.pos, self.what = memoryview(data), 0, what

    def _take(self, n: int, field: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: {field} runs past the end ({len(self.data)} bytes)",
                                     position=self.pos)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self, bits: int, field: str = "int") -> int:
        pos, n = self.pos, bits >> 3
        if pos + n > len(self.data):
            self._take(n, field)  # raises, naming the field
        self.pos = pos + n
        return _INTS[bits].unpack_from(self.data, pos)[0]

    def version(self, highest: int | None, field: str = "version", lowest: int = 0) -> int:
        """An int16 schema version in [lowest, highest] (no upper limit when `highest` is None), else
        CorruptRecordError."""
        version = self.int(16, field)
        if version < lowest or (highest is not None and version > highest):
            raise CorruptRecordError(f"{self.what}: {field} {version} is not in [{lowest}, {highest}]",
                                     position=self.pos - 2)
        return version

    def uvarint(self, field: str = "varint") -> int:
        try:
            value, self.pos = _read_uvarint(self.data, self.pos, len(self.data), 5)
        except InvalidRecordError as exc:
            raise CorruptRecordError(f"{self.what}: {field}: {exc.message}", position=self.pos) from None
        return value

    def _length(self, compact: bool, bits: int, field: str) -> int | None:
        n = self.uvarint(field) - 1 if compact else self.int(bits, field)
        if n < -1:
            raise CorruptRecordError(f"{self.what}: {field} has length {n}", position=self.pos)
        return None if n == -1 else n

    def string(self, field: str = "string", compact: bool = False, nullable: bool = False) -> str | None:
        n = self._length(compact, 16, field)
        if n is None:
            if not nullable:
                raise CorruptRecordError(f"{self.what}: {field} is null", position=self.pos)
            return None
        try:
            return bytes(self._take(n, field)).decode()
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{self.what}: {field} is not UTF-8", position=self.pos) from None

    def bytes(self, field: str = "bytes", compact: bool = False, nullable: bool = False) -> bytes | None:
        n = self._length(compact, 32, field)
        if n is None:
            if not nullable:
                raise CorruptRecordError(f"{self.what}: {field} is null", position=self.pos)
            return None
        return bytes(self._take(n, field))

    def at_end(self) -> bool:
        return self.pos == len(self.data)

    def count(self, field: str = "array", compact: bool = False) -> int | None:
        return self._length(compact, 32, field)

    def int32s(self, field: str = "array") -> tuple[int, ...] | None:
        """A non-flexible array of int32 (None: a null array), read with one unpack."""
        n = self.count(field)
        return None if n is None else struct.unpack(f">{n}i", self._take(4 * n, field))

    def tagged(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint("tagged field count")):
            tag = self.uvarint("tag")
            out[tag] = bytes(self._take(self.uvarint("tagged field size"), f"tagged field {tag}"))
        return out

    def end(self) -> None:
        """The value must have been read whole (trailing bytes are a newer version's, or corruption)."""
        if self.pos != len(self.data):
            raise CorruptRecordError(f"{self.what}: {len(self.data) - self.pos} bytes after the last field",
                                     position=self.pos)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's internal-topic partition of a group or transactional id: Utils.abs(hashCode) % partitions
    (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
