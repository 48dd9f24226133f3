"""Kafka's five record-batch codecs, framed as Kafka frames them, with bounded decompression.

Codec ids are attribute bits 0-2: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
- gzip: one standard gzip member (zlib), its header as Java's GZIPOutputStream writes it (XFL 0, OS 255), so a
  batch compresses to Kafka's bytes; on read, as Kafka's reader: concatenated members, header flag bits it does
  not know ignored, bytes after the last member ignored.
- snappy: xerial framing on write (16-byte header `82 'SNAPPY' 00`, int32 BE
  version 1, int32 BE compat 1, then `[int32 BE length][raw snappy block]` per
  32 KiB of input); on read xerial or a bare raw snappy block (also a stream shorter than the xerial header).
- lz4: one LZ4 frame, FLG 0x60 (version 01, independent blocks), BD 0x40
  (64 KiB blocks), HC = second byte of xxh32(FLG, BD); `[int32 LE size][block]`
  per block (bit 31 = stored), end mark 0. Dependent-block frames are rejected
  as Kafka rejects them. Level 9 (Kafka's default) is LZ4's fast compressor, any other LZ4-HC at that level, as
  Kafka's lz4-java does.
- zstd: standard zstd frame(s).
Decompression never produces more than `limit` bytes: a larger stream raises
RecordTooLargeError; an undecodable one raises CorruptRecordError.
Per-batch work (called once per batch by both codec twins). Stateless, thread-safe. Leaf module.
"""
from __future__ import annotations

import functools
import struct
import zlib

import cramjam

from engine.common.errors import (
    CorruptRecordError,
    InvalidConfigurationError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
DEFAULT_MAX_DECOMPRESSED = 128 << 20
_GZIP_STEP = 1 << 20

_JAVA_GZIP_XFL_OS = b"\x00\xff"  # java.util.zip.GZIPOutputStream's header: no extra flags, OS unknown
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_LZ4_WRITE_BLOCK = 64 << 10
LZ4_DEFAULT_LEVEL = 9
# Kafka's compression levels per codec: (lowest, highest, default); gzip also takes -1, zlib's default
LEVELS = {GZIP: (1, 9, -1), LZ4: (1, 17, LZ4_DEFAULT_LEVEL), ZSTD: (-131072, 22, 3)}


def codec_id(compression: str | int) -> int:
    """Map a codec name ("none", "gzip", ...) or id (0-4) to its id."""
    if isinstance(compression, str):
        if compression.lower() in NAMES:
            return NAMES.index(compression.lower())
    elif isinstance(compression, int) and not isinstance(compression, bool) and 0 <= compression <= 4:
        return compression
    raise UnsupportedCompressionTypeError(
        f"unknown compression {compression!r}; expected one of {', '.join(NAMES)}"
    )


def check_level(codec: int, level, name: str) -> int:
    """`level` when Kafka takes it for `codec` (in LEVELS' range, or gzip's -1); else InvalidConfigurationError naming
    the config `name` (a topic's compression.<codec>.level, a producer's compression_<codec>_level)."""
    lo, hi, default = LEVELS[codec]
    if type(level) is int and (lo <= level <= hi or level == default):
        return level
    also = "" if lo <= default <= hi else f" or {default}"
    raise InvalidConfigurationError(f"{name}={level!r} must be an int in [{lo}, {hi}]{also}")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a batch's record bytes with `codec` (an id from `codec_id`) at `level` (None: the codec's default;
    as in Kafka, gzip -1 is zlib's default, and lz4 9, its default, is the fast compressor, any other level LZ4-HC)."""
    if codec == GZIP:
        c = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 31)
        out = bytearray(c.compress(data) + c.flush())
        out[8:10] = _JAVA_GZIP_XFL_OS
        return bytes(out)
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4_frame_compress(data, level)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def decompress(codec: int, data, limit: int = DEFAULT_MAX_DECOMPRESSED) -> bytes | bytearray:
    """Decompress one batch's records section; at most `limit` bytes come out."""
    name = NAMES[codec] if 0 <= codec < len(NAMES) else str(codec)
    try:
        if codec == GZIP:
            return _gzip_decompress(data, limit)
        if codec == SNAPPY:
            return _snappy_decompress(data, limit)
        if codec == LZ4:
            return _lz4_frame_decompress(data, limit)
        if codec == ZSTD:
            return _zstd_decompress(data, limit)
    except (RecordTooLargeError, CorruptRecordError):
        raise
    except (zlib.error, cramjam.DecompressionError, ValueError, struct.error, IndexError) as exc:
        raise CorruptRecordError(f"{name} stream cannot be decompressed: {exc}") from None
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def _too_large(name: str, limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{name} stream decompresses to more than {limit} bytes")


# --- gzip ------------------------------------------------------------------------------------
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 2, 4, 8, 16


def _gzip_header_end(data: bytes, pos: int) -> int:
    """End of the gzip member header at data[pos:], read as Kafka's reader (java.util.zip.GZIPInputStream) reads
    it: magic, method 8, the optional fields the flags name, their CRC-16 when FHCRC is set, other flag bits
    ignored. ValueError when there is no whole header there."""
    if data[pos:pos + 3] != b"\x1f\x8b\x08" or len(data) < pos + 10:
        raise ValueError("no gzip member header")
    flags, end = data[pos + 3], pos + 10
    if flags & _FEXTRA:
        end += 2 + int.from_bytes(data[end:end + 2], "little")
    for field in (_FNAME, _FCOMMENT):
        if flags & field:
            zero = data.find(b"\0", end)
            end = len(data) + 1 if zero < 0 else zero + 1
    if flags & _FHCRC:
        if data[end:end + 2] != (zlib.crc32(data[pos:end]) & 0xFFFF).to_bytes(2, "little"):
            raise ValueError("gzip header CRC mismatch")
        end += 2
    if end > len(data):
        raise ValueError("gzip header is truncated")
    return end


def _gzip_decompress(data, limit: int) -> bytearray:
    """Inflate gzip members as Kafka's reader does, 1 MiB at a time into one buffer, so a stream far past `limit`
    costs no more than `limit` bytes of memory before it is refused. Each member's trailer (CRC-32, size) must
    match; bytes after a member that do not start another are ignored, as Kafka ignores them."""
    out = bytearray()
    rest = bytes(data)
    pos = _gzip_header_end(rest, 0)
    while True:
        start = len(out)
        d = zlib.decompressobj(-15)
        pending = memoryview(rest)[pos:]
        while pending and not d.eof:
            out += d.decompress(pending, min(_GZIP_STEP, limit - len(out) + 1))
            if len(out) > limit:
                raise _too_large("gzip", limit)
            pending = d.unconsumed_tail
        if not d.eof:
            out += d.flush()
            if not d.eof:
                raise CorruptRecordError("gzip stream is truncated")
        rest = d.unused_data
        if len(rest) < 8 or struct.unpack_from("<II", rest) != (zlib.crc32(memoryview(out)[start:]),
                                                                 (len(out) - start) & 0xFFFFFFFF):
            raise CorruptRecordError("gzip member trailer is truncated or does not match its data")
        rest = rest[8:]
        try:
            pos = _gzip_header_end(rest, 0)
        except ValueError:
            return out


# --- snappy (xerial) -------------------------------------------------------------------------
def _xerial_compress(data) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[start:start + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data, limit: int) -> bytearray:
    mv = memoryview(data)
    if bytes(mv[:8]) != _XERIAL_HEADER[:8] or len(mv) < len(_XERIAL_HEADER):
        blocks = [mv]  # raw snappy, as Kafka's reader (snappy-java) takes a stream without a whole xerial header
    else:
        blocks = []
        pos = 16
        while pos < len(mv):
            if pos + 4 > len(mv):
                raise CorruptRecordError("xerial snappy block length is truncated")
            (n,) = struct.unpack_from(">i", mv, pos)
            if n < 0 or pos + 4 + n > len(mv):
                raise CorruptRecordError(f"xerial snappy block of {n} bytes overruns the stream")
            blocks.append(mv[pos + 4:pos + 4 + n])
            pos += 4 + n
    sizes = [cramjam.snappy.decompress_raw_len(b) for b in blocks]
    total = sum(sizes)
    if total > limit:
        raise _too_large("snappy", limit)
    out = bytearray(total)
    view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes):
        if cramjam.snappy.decompress_raw_into(block, view[pos:pos + size]) != size:
            raise CorruptRecordError("snappy block decompressed to the wrong length")
        pos += size
    return out


# --- lz4 frame -------------------------------------------------------------------------------
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 (for the LZ4 frame header checksum; inputs are a few bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos + 4 * i)
                acc[i] = (_rotl((acc[i] + lane * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


_LZ4_DESCRIPTOR = bytes([0x60, 0x40])
_LZ4_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes([(xxh32(_LZ4_DESCRIPTOR) >> 8) & 0xFF])


def _lz4_frame_compress(data, level: int | None) -> bytes:
    mv = memoryview(data)
    parts = [_LZ4_HEADER]
    compress_block = functools.partial(cramjam.lz4.compress_block, store_size=False)
    if level not in (None, LZ4_DEFAULT_LEVEL):
        import lz4.block

        compress_block = functools.partial(lz4.block.compress, mode="high_compression", compression=level,
                                           store_size=False)
    for start in range(0, len(mv), _LZ4_WRITE_BLOCK):
        chunk = mv[start:start + _LZ4_WRITE_BLOCK]
        block = bytes(compress_block(chunk))
        if len(block) < len(chunk):
            parts.append(struct.pack("<I", len(block)))
            parts.append(block)
        else:
            parts.append(struct.pack("<I", len(chunk) | 0x80000000))
            parts.append(bytes(chunk))
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _lz4_frame_decompress(data, limit: int) -> bytearray:
    mv = memoryview(data)
    if len(mv) < 7 or bytes(mv[:4]) != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 stream does not start with an LZ4 frame magic")
    flg, bd = mv[4], mv[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4 frame version {flg >> 6} is not supported")
    if not flg & 0x20:
        raise CorruptRecordError("lz4 frame uses dependent blocks, which Kafka does not support")
    if flg & 0x03 or bd & 0x8F:
        raise CorruptRecordError("lz4 frame descriptor has reserved bits set")
    block_checksum, content_size, content_checksum = flg & 0x10, flg & 0x08, flg & 0x04
    block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 0x07)
    if block_max is None:
        raise CorruptRecordError(f"lz4 frame block size code {(bd >> 4) & 7} is invalid")
    desc_end = 6 + (8 if content_size else 0)
    if len(mv) < desc_end + 1:
        raise CorruptRecordError("lz4 frame descriptor is truncated")
    if mv[desc_end] != (xxh32(bytes(mv[4:desc_end])) >> 8) & 0xFF:
        raise CorruptRecordError("lz4 frame header checksum mismatch")
    pos = desc_end + 1
    out = bytearray()
    scratch = bytearray(block_max)
    while True:
        if pos + 4 > len(mv):
            raise CorruptRecordError("lz4 frame is truncated (no end mark)")
        (size,) = struct.unpack_from("<I", mv, pos)
        pos += 4
        if size == 0:
            break
        stored, size = size & 0x80000000, size & 0x7FFFFFFF
        if size > block_max or pos + size > len(mv):
            raise CorruptRecordError(f"lz4 block of {size} bytes is invalid or truncated")
        block = mv[pos:pos + size]
        pos += size + (4 if block_checksum else 0)
        if stored:
            n = size
            piece = block
        else:
            n = cramjam.lz4.decompress_block_into(block, memoryview(scratch))
            piece = memoryview(scratch)[:n]
        if len(out) + n > limit:
            raise _too_large("lz4", limit)
        out += piece
    if content_checksum and pos + 4 > len(mv):
        raise CorruptRecordError("lz4 frame content checksum is truncated")
    return out


# --- zstd ------------------------------------------------------------------------------------
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _zstd_content_size(src: bytes) -> int | None:
    """Frame_Content_Size from the first frame's header, when the writer recorded it."""
    if len(src) < 6 or src[:4] != _ZSTD_MAGIC:
        return None
    fhd = src[4]
    fcs_flag, single_segment, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(src) < pos + width:
        return None
    value = int.from_bytes(src[pos:pos + width], "little")
    return value + 256 if width == 2 else value


def _zstd_decompress(data, limit: int) -> bytearray:
    src = bytes(data)
    size = _zstd_content_size(src)
    if size is not None:
        if size > limit:
            raise _too_large("zstd", limit)
        exact = True
    else:  # zstd-jni's streaming writer records no size: guess, and grow on overflow
        size, exact = min(limit, max(64 << 10, 4 * len(src))), False
    while True:
        out = bytearray(size)
        try:
            n = cramjam.zstd.decompress_into(src, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size >= limit:
                raise _too_large("zstd", limit) from None
            size, exact = min(limit, max(size * 4, 64 << 10)), False  # several frames: sizes unknown
            continue
        if n != size:
            if exact:
                raise CorruptRecordError(f"zstd frame declares {size} bytes but holds {n}")
            del out[n:]
        return out
