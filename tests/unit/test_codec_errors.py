"""Bad input gets a typed error that names where, identically from both implementations."""
from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest

import engine.common.errors as E
from engine.record import twins
from engine.record import compression as comp
from tests.conftest import IMPLEMENTATIONS

IMPLS = [twins.load("codec", name) for name in IMPLEMENTATIONS]
GOOD = [(b"k", b"v", None, 1_700_000_000_000)]


def _same_error(call, cls):
    """Run call(impl) on every implementation; all must raise `cls` with the same message."""
    messages = set()
    for impl in IMPLS:
        with pytest.raises(cls) as info:
            call(impl)
        messages.add(info.value.message)
    assert len(messages) == 1, messages
    return info.value


@pytest.mark.parametrize("records,cls", [
    ([], E.InvalidRecordError),
    ([("not bytes", b"v", None, 0)], E.InvalidRecordError),
    ([(b"k", 42, None, 0)], E.InvalidRecordError),
    ([(b"k", b"v", [(b"bytes-key", b"x")], 0)], E.InvalidRecordError),
    ([(b"k", b"v", [("k",)], 0)], E.InvalidRecordError),
    ([(b"k", b"v", "not a list", 0)], E.InvalidRecordError),
    ([(b"k", b"v", None, "yesterday")], E.InvalidTimestampError),
    ([(b"k", b"v", None, True)], E.InvalidTimestampError),
    ([(b"k", b"v", None, -2)], E.InvalidTimestampError),
    ([(b"k", b"v", None, 2**64)], E.InvalidTimestampError),
    ([(b"k", b"v", None)], E.InvalidRecordError),
    ([object()], E.InvalidRecordError),
])
def test_bad_records(records, cls):
    _same_error(lambda impl: impl.encode_batch(records), cls)


@pytest.mark.parametrize("kwargs,cls", [
    ({"compression": "brotli"}, E.UnsupportedCompressionTypeError),
    ({"compression": 7}, E.UnsupportedCompressionTypeError),
    ({"timestamp_type": "now"}, E.InvalidRecordError),
    ({"timestamp_type": "log_append"}, E.InvalidRecordError),
    ({"log_append_time_ms": 5}, E.InvalidRecordError),
    ({"transactional": True}, E.InvalidRecordError),
    ({"producer_id": 7}, E.InvalidRecordError),
    ({"producer_id": 7, "producer_epoch": 0}, E.InvalidRecordError),
    ({"base_offset": -1}, E.InvalidRecordError),
    ({"base_offset": "0"}, E.InvalidRecordError),
    ({"partition_leader_epoch": -2}, E.InvalidRecordError),
    ({"last_offset_delta": -1}, E.InvalidRecordError),
])
def test_bad_batch_parameters(kwargs, cls):
    _same_error(lambda impl: impl.encode_batch(GOOD, **kwargs), cls)


def test_records_keep_their_offsets_and_must_increase():
    for impl in IMPLS:
        recs = [impl.Record(10, 1, b"a", b"1"), impl.Record(13, 2, b"b", b"2")]
        (batch,) = impl.iter_batches(impl.encode_batch(recs, base_offset=10, last_offset_delta=5))
        assert [r.offset for r in batch.records()] == [10, 13] and batch.last_offset == 15
    _same_error(lambda impl: impl.encode_batch([impl.Record(5, 1, None, b""), impl.Record(5, 1, None, b"")],
                                               base_offset=5), E.InvalidRecordError)
    _same_error(lambda impl: impl.encode_batch([impl.Record(3, 1, None, b"")], base_offset=5), E.InvalidRecordError)


@pytest.mark.parametrize("kind", ["prepare", None, 1])
def test_bad_control_kind(kind):
    _same_error(lambda impl: impl.encode_control_batch(kind, base_offset=0, producer_id=1, producer_epoch=0,
                                                       timestamp_ms=0), E.InvalidRecordError)


def test_control_batch_needs_a_producer():
    _same_error(lambda impl: impl.encode_control_batch("abort", base_offset=0, producer_id=-1, producer_epoch=0,
                                                       timestamp_ms=0), E.InvalidRecordError)


def _batch(**kwargs) -> bytearray:
    return bytearray(IMPLS[0].encode_batch([(b"key", b"value", [("h", b"x")], 1_700_000_000_000)] * 3, **kwargs))


def _fix_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, IMPLS[0].crc32c(bytes(buf[21:])))
    return bytes(buf)


def _decode_all(impl, data, **kw):
    for b in impl.iter_batches(data, **kw):
        b.records()


def test_partial_tail_is_invisible_like_kafka():
    whole = bytes(_batch()) * 2
    for impl in IMPLS:
        for cut in (len(whole) // 2 + 1, len(whole) - 1, len(whole) // 2 + 16):
            assert len(list(impl.iter_batches(whole[:cut]))) == 1
        assert len(list(impl.iter_batches(whole[:16]))) == 0


def test_size_below_14_is_corrupt_and_names_file_and_position():
    buf = bytes(_batch()) + struct.pack(">qi", 99, 13) + b"\x02" * 8
    err = _same_error(lambda impl: list(impl.iter_batches(buf, position=4096, source="x.log")), E.CorruptRecordError)
    assert (err.file, err.position, err.offset) == ("x.log", 4096 + len(_batch()), 99)
    assert "x.log" in str(err) and "4096" not in err.message


@pytest.mark.parametrize("magic,cls", [(0, E.UnsupportedMessageFormatError), (1, E.UnsupportedMessageFormatError),
                                       (3, E.CorruptRecordError)])
def test_magic(magic, cls):
    buf = _batch()
    buf[16] = magic
    err = _same_error(lambda impl: list(impl.iter_batches(bytes(buf), source="s.log")), cls)
    assert err.position == 0 and err.file == "s.log"


def test_crc_mismatch_is_corrupt_with_offset():
    buf = _batch(base_offset=77)
    buf[-1] ^= 0x01
    err = _same_error(lambda impl: _decode_all(impl, bytes(buf), source="f.log"), E.CorruptRecordError)
    assert (err.offset, err.position, err.file) == (77, 0, "f.log")
    for impl in IMPLS:  # iterating checks the CRC before the first record
        (batch,) = impl.iter_batches(bytes(buf))
        with pytest.raises(E.CorruptRecordError):
            iter(batch)
    for impl in IMPLS:
        (batch,) = impl.iter_batches(bytes(buf))
        assert not batch.is_valid()
        with pytest.raises(E.CorruptRecordError):
            impl.decode_columnar(bytes(buf))
        # verify_crc=False still never crashes on a flipped value byte
        assert len(batch.records(verify_crc=False)) == 3


@pytest.mark.parametrize("mutate,cls", [
    (lambda b: struct.pack_into(">i", b, 57, -1), E.InvalidRecordError),           # negative count
    (lambda b: struct.pack_into(">i", b, 57, 10**6), E.InvalidRecordError),        # count cannot fit
    (lambda b: struct.pack_into(">i", b, 57, 2), E.InvalidRecordError),            # bytes remain after count
    (lambda b: struct.pack_into(">h", b, 21, 5), E.UnsupportedCompressionTypeError),  # codec id 5
    (lambda b: struct.pack_into(">i", b, 23, 1), E.InvalidRecordError),            # record past lastOffsetDelta
])
def test_crc_valid_but_broken_batches(mutate, cls):
    buf = _batch()
    mutate(buf)
    data = _fix_crc(buf)
    _same_error(lambda impl: _decode_all(impl, data), cls)
    _same_error(lambda impl: [list(b) for b in impl.iter_batches(data)], cls)
    _same_error(lambda impl: impl.decode_columnar(data), cls)


def test_base_offset_outside_the_crc_is_still_checked():
    buf = _batch()
    struct.pack_into(">q", buf, 0, -5)
    _same_error(lambda impl: list(impl.iter_batches(bytes(buf))), E.CorruptRecordError)
    struct.pack_into(">q", buf, 0, 2**63 - 1)
    _same_error(lambda impl: list(impl.iter_batches(bytes(buf))), E.CorruptRecordError)


def _compressed_batch(codec_id: int, payload: bytes, count: int) -> bytes:
    buf = bytearray(_batch())
    del buf[61:]
    buf += payload
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, codec_id)
    struct.pack_into(">i", buf, 57, count)
    return _fix_crc(buf)


@pytest.mark.parametrize("codec_name", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_bomb_is_bounded(codec_name):
    cid = comp.codec_id(codec_name)
    bomb = comp.compress(cid, b"\x00" * (16 << 20))
    data = _compressed_batch(cid, bomb, 1)
    err = _same_error(lambda impl: next(iter(impl.iter_batches(data))).records(max_decompressed_bytes=1 << 20),
                      E.RecordTooLargeError)
    assert err.position == 0
    _same_error(lambda impl: impl.decode_columnar(data, max_decompressed_bytes=1 << 20), E.RecordTooLargeError)


@pytest.mark.parametrize("codec_name,payload", [
    ("gzip", b"\x1f\x8b\x08\x00garbage"),
    ("gzip", gzip.compress(b"x" * 100, mtime=0)[:-9]),
    ("snappy", b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x10\x00abc"),
    ("snappy", b"\x0a\xfe\xff garbage"),
    ("lz4", b"\x04\x22\x4d\x18\x60\x40\x00"),
    ("lz4", b"\x04\x22\x4d\x18\x40\x40\x00\x00\x00\x00\x00"),  # dependent blocks
    ("lz4", b"not a frame"),
    ("zstd", b"\x28\xb5\x2f\xfd garbage"),
    ("zstd", bytes(cramjam.zstd.compress(b"y" * 1000))[:-3]),
])
def test_undecodable_compressed_streams_are_corrupt(codec_name, payload):
    data = _compressed_batch(comp.codec_id(codec_name), payload, 1)
    _same_error(lambda impl: _decode_all(impl, data), E.CorruptRecordError)


def _gzip_member(data: bytes, flags: int = 0, fields: bytes = b"") -> bytes:
    """One gzip member built by hand (RFC 1952): header with `flags` and the optional `fields` they name, raw
    deflate, CRC-32 and size."""
    raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = raw.compress(data) + raw.flush()
    return (b"\x1f\x8b\x08" + bytes([flags]) + b"\x00" * 4 + b"\x00\xff" + fields + body
            + struct.pack("<II", zlib.crc32(data), len(data)))


def test_gzip_streams_decode_as_kafkas_reader_decodes_them():
    """java.util.zip.GZIPInputStream, Kafka's gzip reader, ignores header flag bits it does not know and bytes after
    the last member that do not start another; it reads optional header fields and concatenated members, and refuses
    a trailer that does not match."""
    section = bytes(_batch())[61:]
    named = b"name\x00"
    accepted = [
        _gzip_member(section, flags=0xE0),  # reserved bits
        _gzip_member(section) + b"\x00\x01garbage",  # trailing bytes that are no member
        _gzip_member(section, flags=0x08, fields=named),  # FNAME
        _gzip_member(section, flags=0x02, fields=(zlib.crc32(b"\x1f\x8b\x08\x02" + b"\x00" * 4 + b"\x00\xff")
                                                   & 0xFFFF).to_bytes(2, "little")),  # FHCRC
        _gzip_member(section[:10]) + _gzip_member(section[10:]),  # two members
    ]
    for payload in accepted:
        data = _compressed_batch(comp.codec_id("gzip"), payload, 3)
        for impl in IMPLS:
            (batch,) = impl.iter_batches(data)
            assert [(r.key, r.value) for r in batch.records()] == [(b"key", b"value")] * 3
    bad_trailer = bytearray(_gzip_member(section))
    bad_trailer[-5] ^= 1  # the size
    _same_error(lambda impl: _decode_all(impl, _compressed_batch(comp.codec_id("gzip"), bytes(bad_trailer), 3)),
                E.CorruptRecordError)


def test_read_only_and_mmap_buffers(tmp_path):
    import mmap

    path = tmp_path / "x.log"
    path.write_bytes(bytes(_batch()) * 3)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for impl in IMPLS:
            batches = list(impl.iter_batches(mm))
            assert [len(b.records()) for b in batches] == [3, 3, 3]
            assert len(impl.decode_columnar(mm)) == 9
            del batches


def test_columnar_offsets_out_of_bounds_are_refused_and_nulls_are_not_checked():
    from array import array

    data = b"abcdef"
    bad = array("i", [0, 3, 9])  # the second value ends past the data
    _same_error(lambda impl: impl.encode_columnar(values=(data, bad), timestamps=1), E.InvalidRecordError)
    err = _same_error(lambda impl: impl.encode_columnar(values=(data, array("i", [0, 2, 4])), keys=(data, bad),
                                                        timestamps=1), E.InvalidRecordError)
    assert "out of bounds at row 1" in err.message  # the key column's check, not a length mismatch
    only_first_valid = bytes([0b01])  # row 1 is null: its (bogus) offsets are never looked at
    for impl in IMPLS:
        (batch,) = impl.iter_batches(impl.encode_columnar(values=(data, bad, only_first_valid), timestamps=1))
        assert [r.value for r in batch.records()] == [b"abc", None]


def _large_batch(n: int = 400) -> bytearray:
    """One uncompressed batch of about 60 KiB: past the stretch a columnar decode checks its CRC ahead of."""
    return bytearray(IMPLS[0].encode_batch([(b"k%d" % i, b"v" * 150, None, i) for i in range(n)]))


@pytest.mark.parametrize("where", ["late value", "early framing", "count"])
def test_a_large_batch_with_a_bad_crc_is_refused_for_its_crc_whatever_it_holds(where):
    """decode_columnar checks a large batch's CRC as it decodes it: whether the damage lies past where decoding
    has reached, or breaks a record's framing first, or makes the record count impossible, the error is the CRC
    mismatch that checking the CRC first gives, and no column comes back."""
    buf = _large_batch()
    if where == "late value":
        buf[-20] ^= 0xFF
    elif where == "early framing":
        buf[61] = 0x7F  # the first record's length varint: far past the batch's end
    else:
        buf[57:61] = struct.pack(">i", 1 << 20)
    err = _same_error(lambda impl: impl.decode_columnar(bytes(buf)), E.CorruptRecordError)
    assert "CRC mismatch" in err.message
    for impl in IMPLS:  # the same bytes with the CRC check off decode, or fail for what they hold
        if where == "late value":
            assert len(impl.decode_columnar(bytes(buf), verify_crc=False)) == 400


def test_a_large_batch_whose_framing_breaks_under_a_good_crc_gets_the_framing_error():
    buf = _large_batch()
    buf[61] = 0x7F
    buf[17:21] = struct.pack(">I", IMPLS[0].crc32c(bytes(buf[21:])))
    err = _same_error(lambda impl: impl.decode_columnar(bytes(buf)), E.InvalidRecordError)
    assert err.offset == 0


def test_columns_kept_alive_are_never_reused_by_later_decodes():
    """A decode's column buffers are reused by later decodes only once nothing holds them."""
    for impl in IMPLS:
        logs = [b"".join(impl.encode_batch([(b"%d" % j, bytes([j % 256]) * 2000, None, j) for j in range(i, i + 300)])
                         for _ in range(3)) for i in range(0, 60, 20)]
        kept = [impl.decode_columnar(log) for log in logs]
        for _ in range(3):  # decodes of other spans, while the first ones are alive
            for log in reversed(logs):
                impl.decode_columnar(log)
        for i, cols in enumerate(kept):
            assert cols.to_pylist() == impl.decode_columnar(logs[i]).to_pylist()
