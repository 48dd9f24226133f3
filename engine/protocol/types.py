"""The Kafka protocol's primitive types, read from and written to bytes.

Byte layout (all integers big-endian, as every Kafka request and response):
- int8/int16/int32/int64, uint16: fixed width; float64: IEEE 754; bool: one byte, 0 or 1 (any non-zero reads true);
- unsigned varint: plain base-128 (compact lengths and counts, tags, tagged fields' sizes);
- string: int16 length then UTF-8 (-1: null); compact string: unsigned varint length+1 (0: null);
- bytes / records: int32 length (-1: null); compact: unsigned varint length+1;
- array: int32 count (-1: null); compact array: unsigned varint count+1;
- uuid: 16 bytes;
- tagged fields (flexible versions): unsigned varint count, then per field an unsigned varint tag, an unsigned varint
  size and that many bytes, tags strictly increasing.

Crash policy: none (no state, no files). Thread-safety: a Reader belongs to one caller; the functions hold no state.
A read past the end, a negative length other than -1, or a string that is not UTF-8 raises MalformedRequestError.
"""
from __future__ import annotations

import struct
import uuid as _uuid

from engine.common.errors import InvalidRequestError

_I8, _I16, _I32, _I64, _U16, _F64 = (struct.Struct(f) for f in (">b", ">h", ">i", ">q", ">H", ">d"))
ZERO_UUID = _uuid.UUID(int=0)


class MalformedRequestError(InvalidRequestError):
    """A request whose bytes do not follow its schema (Kafka closes such a connection)."""


class Reader:
    """Reads primitives from a bytes-like object, front to back."""
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise MalformedRequestError(f"field of {n} bytes at byte {p} runs past the end ({self.end})")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._take(8))[0]

    def bool(self) -> bool:
        return self.buf[self._take(1)] != 0

    def uuid(self) -> _uuid.UUID:
        p = self._take(16)
        return _uuid.UUID(bytes=bytes(self.buf[p:p + 16]))

    def uvarint(self, max_bytes: int = 5) -> int:
        value = shift = 0
        for _ in range(max_bytes):
            b = self.buf[self._take(1)]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise MalformedRequestError(f"varint longer than {max_bytes} bytes at byte {self.pos}")

    def length(self, compact: bool, wide: bool = False) -> int:
        """A length or count prefix: -1 for null."""
        if compact:
            return self.uvarint() - 1
        n = self.int32() if wide else self.int16()
        if n < -1:
            raise MalformedRequestError(f"negative length {n} at byte {self.pos}")
        return n

    def raw(self, n: int) -> memoryview:
        p = self._take(n)
        return memoryview(self.buf)[p:p + n]

    def string(self, compact: bool) -> str | None:
        n = self.length(compact)
        if n < 0:
            return None
        p = self._take(n)
        try:
            return bytes(self.buf[p:p + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequestError(f"string at byte {p} is not UTF-8") from exc

    def bytes(self, compact: bool) -> bytes | None:
        n = self.length(compact, wide=True)
        return None if n < 0 else bytes(self.raw(n))

    def records(self, compact: bool) -> memoryview | None:
        """A records field: a view of the caller's buffer, not a copy."""
        n = self.length(compact, wide=True)
        return None if n < 0 else self.raw(n)

    def remaining(self) -> int:
        return self.end - self.pos


class Writer:
    """Appends primitives to a bytearray; large byte fields may be kept by reference (see `parts`)."""
    __slots__ = ("out", "parts")

    def __init__(self) -> None:
        self.out = bytearray()
        self.parts: list = []   # earlier chunks and zero-copy views, in order, when a large field was added

    def int8(self, v: int) -> None:
        self.out += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.out += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.out += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.out += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.out += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.out += _F64.pack(v)

    def bool(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def uuid(self, v: _uuid.UUID | None) -> None:
        self.out += (v or ZERO_UUID).bytes

    def uvarint(self, v: int) -> None:
        out = self.out
        while v > 0x7F:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)

    def length(self, n: int, compact: bool, wide: bool = False) -> None:
        if compact:
            self.uvarint(n + 1)
        elif wide:
            self.int32(n)
        else:
            self.int16(n)

    def string(self, v: str | None, compact: bool) -> None:
        if v is None:
            self.length(-1, compact)
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF and not compact:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.length(len(data), compact)
        self.out += data

    def bytes(self, v, compact: bool) -> None:
        if v is None:
            self.length(-1, compact, wide=True)
            return
        self.length(len(v), compact, wide=True)
        if len(v) >= 4096:  # kept by reference: a fetch's records are written from where they lie
            self.parts += (bytes(self.out), v)
            self.out = bytearray()
        else:
            self.out += v

    def size(self) -> int:
        return sum(len(p) for p in self.parts) + len(self.out)

    def chunks(self) -> list:
        """What was written, in order: bytes and the views kept by reference."""
        return [p for p in (*self.parts, self.out) if len(p)]

    def getvalue(self) -> bytes:
        return b"".join(self.chunks())
