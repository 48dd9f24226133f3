"""Fixed vectors through both codec implementations in one process.

Expected values come from outside kafkalog: kafka-format.md §0 and §16 (bytes accepted by
kafka-python), the CRC-32C check value, and the Kafka-written vectors' expected.jsonl.
"""
from __future__ import annotations

import os
import random

import pytest

from engine.record.batch_format import increment_sequence
from tests import vectors

COMMIT_MARKER = bytes.fromhex(
    "000000000000002a 00000042 00000007 02 8a773c25 0030 00000000"
    "0000018bcfe56800 0000018bcfe56800 00000000000003e8 0003 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000005 00".replace(" ", "")
)
TWO_RECORDS = bytes.fromhex(
    "0000000000000000 00000047 ffffffff 02 97cfdb6d 0000 00000001"
    "0000018bcfe56800 0000018bcfe56805 ffffffffffffffff ffff ffffffff 00000002"
    "10 00 00 00 02 6b 02 76 00"
    "18 00 0a 02 01 04 7676 02 02 68 02 78".replace(" ", "")
)


def test_crc32c_check_value(codec):
    assert codec.crc32c(b"123456789") == 0xE3069283
    assert codec.crc32c(b"") == 0


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 255, 511, 512, 513, 767, 768, 769, 1023, 24575, 24576, 24577,
                                  3 * 8192 * 2 + 13, 1 << 20])
def test_crc32c_matches_crcmod_at_every_length(codec, size):
    import crcmod.predefined

    data = os.urandom(size)
    oracle = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    assert codec.crc32c(data) == oracle(data)
    half = size // 2
    assert codec.crc32c(memoryview(data)[half:], codec.crc32c(data[:half])) == oracle(data)
    assert codec.crc32c(bytearray(data)) == oracle(data)


def test_native_hardware_and_software_crc_agree():
    try:
        from engine._native import _records as native
    except ImportError:
        pytest.fail("the native core must be built for this test (make test builds it)")
    for size in (0, 3, 8, 100, 8192 * 3, 8192 * 3 + 5, 300_001):
        data = os.urandom(size)
        assert native.crc32c(data) == native.crc32c_software(data)
    # the folding path (buffers of 512 bytes or more, with AVX-512): every length around its 256-byte stride and its
    # 16-byte tail, from every alignment, continuing from a random CRC
    rng = random.Random(7)
    data = os.urandom(4096)
    for size in list(range(500, 800)) + [rng.randrange(512, 4000) for _ in range(200)]:
        start, seed = rng.randrange(64), rng.getrandbits(32)
        piece = memoryview(data)[start:start + size]
        assert native.crc32c(piece, seed) == native.crc32c_software(piece, seed), (size, start)


def test_worked_example_commit_marker(codec):
    got = codec.encode_control_batch("commit", base_offset=42, partition_leader_epoch=7, producer_id=1000,
                                     producer_epoch=3, coordinator_epoch=5, timestamp_ms=1700000000000)
    assert got == COMMIT_MARKER
    (batch,) = codec.iter_batches(COMMIT_MARKER)
    assert batch.is_valid() and batch.is_control and batch.is_transactional
    (rec,) = batch.records()
    assert (rec.offset, rec.control_type, rec.coordinator_epoch) == (42, 1, 5)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 3, -1)


def test_worked_example_two_records(codec):
    got = codec.encode_batch([(b"k", b"v", None, 1700000000000), (None, b"vv", [("h", b"x")], 1700000000005)])
    assert got == TWO_RECORDS
    (batch,) = codec.iter_batches(TWO_RECORDS)
    recs = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (0, 1700000000000, b"k", b"v", []),
        (1, 1700000000005, None, b"vv", [("h", b"x")]),
    ]


# kafka-format.md §0: zigzag varint examples. A record with tsDelta = d lays out as
# [len][attr 00][varlong d][offDelta 02][keyLen -1 = 01][valLen 0 = 00][headers 0 = 00].
@pytest.mark.parametrize("delta,hexbytes", [(-1, "01"), (0, "00"), (1, "02"), (63, "7e"), (64, "8001"),
                                            (-64, "7f"), (300, "d804")])
def test_varint_examples_from_the_spec(codec, delta, hexbytes):
    base = 1_000_000
    batch = codec.encode_batch([(None, b"", None, base), (None, b"", None, base + delta)])
    first = bytes.fromhex("0c" "00" "00" "00" "01" "00" "00")
    body = bytes.fromhex("00" + hexbytes + "02" "01" "00" "00")
    assert batch[61:] == first + bytes([2 * len(body)]) + body


def _check_batch(batch, line):
    assert batch.position == line["position"]
    assert batch.base_offset == line["baseOffset"]
    assert batch.last_offset == line["lastOffset"]
    assert batch.records_count == line["count"]
    assert batch.size_in_bytes == line["sizeInBytes"]
    assert batch.batch_length == line["batchLength"]
    assert batch.magic == line["magic"]
    assert batch.crc == line["crc"] and batch.compute_crc() == line["crcComputed"]
    assert batch.is_valid() == line["crcValid"]
    assert batch.attributes == line["attributes"]
    assert batch.last_offset_delta == line["lastOffsetDelta"]
    assert batch.base_timestamp == line["baseTimestamp"]
    assert batch.max_timestamp == line["maxTimestamp"]
    assert batch.compression == line["compression"]
    assert batch.timestamp_type == {"CreateTime": "create", "LogAppendTime": "log_append"}[line["timestampType"]]
    assert (batch.producer_id, batch.producer_epoch) == (line["producerId"], line["producerEpoch"])
    assert (batch.base_sequence, batch.last_sequence) == (line["baseSequence"], line["lastSequence"])
    assert batch.partition_leader_epoch == line["partitionLeaderEpoch"]
    assert batch.is_transactional == line["isTransactional"]
    assert batch.is_control == line["isControl"]
    decoded = line["attributesDecoded"]
    assert batch.has_delete_horizon == decoded["hasDeleteHorizonMs"]
    assert batch.delete_horizon_ms == line.get("deleteHorizonMs")


def _check_record(rec, line, batch):
    assert rec.offset == line["offset"]
    assert rec.timestamp == line["timestamp"]
    assert increment_sequence(batch.base_sequence, rec.offset - batch.base_offset) == line["sequence"]
    assert rec.key == vectors.b64(line["keyB64"])
    assert (len(rec.key) if rec.key is not None else -1) == line["keySize"]
    assert rec.value == vectors.b64(line["valueB64"])
    assert (len(rec.value) if rec.value is not None else -1) == line["valueSize"]
    assert rec.headers == [(h["key"], vectors.b64(h["valueB64"])) for h in line["headers"]]
    control = line.get("control")
    if control is None:
        assert rec.control_type is None and rec.coordinator_epoch is None
    else:
        assert rec.control_type == control["controlTypeId"]
        if control["controlTypeId"] in (0, 1):
            assert rec.coordinator_epoch == control["coordinatorEpoch"]


LOGS = vectors.all_logs()


@pytest.mark.parametrize("label,path,lines", LOGS, ids=[label for label, _, _ in LOGS])
def test_kafka_written_segments_decode_exactly(codec, label, path, lines):
    data = path.read_bytes()
    expected = vectors.segments(lines)[path.name]
    batches = list(codec.iter_batches(data, source=str(path)))
    assert len(batches) == len(expected["batches"])
    assert sum(b.size_in_bytes for b in batches) == expected["segment"]["sizeInBytes"]
    for batch, (bline, rlines) in zip(batches, expected["batches"]):
        _check_batch(batch, bline)
        for records in (batch.records(), list(batch)):  # the list, and one record per step
            assert len(records) == len(rlines) == batch.records_count
            for rec, rline in zip(records, rlines):
                _check_record(rec, rline, batch)


@pytest.mark.parametrize("label,path,lines", LOGS, ids=[label for label, _, _ in LOGS])
def test_kafka_written_segments_decode_columnar(codec, label, path, lines):
    expected = vectors.segments(lines)[path.name]
    rows = [
        (r["offset"], r["timestamp"], 1 if b["timestampType"] == "LogAppendTime" else 0,
         vectors.b64(r["keyB64"]), vectors.b64(r["valueB64"]),
         [(h["key"], vectors.b64(h["valueB64"])) for h in r["headers"]] or None)
        for b, recs in expected["batches"] if not b["isControl"] for r in recs
    ]
    cols = codec.decode_columnar(path.read_bytes(), include_headers=True)
    got = [tuple(d.values()) for d in cols.to_pylist()]
    assert got == rows
    assert cols.next_offset == expected["batches"][-1][0]["lastOffset"] + 1
    # an offset window, as Spark asks for it: both ends exclusive of what lies outside
    lo, hi = rows[len(rows) // 3][0], rows[2 * len(rows) // 3][0]
    window = codec.decode_columnar(path.read_bytes(), start_offset=lo, end_offset=hi)
    assert memoryview(window.offsets).tolist() == [r[0] for r in rows if lo <= r[0] < hi]
    assert window.headers is None


@pytest.mark.parametrize("label,path,lines", LOGS, ids=[label for label, _, _ in LOGS])
def test_reencoding_kafka_batches(codec, label, path, lines):
    """Uncompressed CreateTime batches re-encode to Kafka's exact bytes; every data batch round-trips."""
    data = path.read_bytes()
    for batch in codec.iter_batches(data):
        if batch.is_control or not batch.records_count:
            continue
        records = batch.records()
        kwargs = dict(base_offset=batch.base_offset, compression=batch.compression,
                      producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                      base_sequence=batch.base_sequence, transactional=batch.is_transactional,
                      partition_leader_epoch=batch.partition_leader_epoch,
                      last_offset_delta=batch.last_offset_delta)
        if batch.timestamp_type == "log_append":
            kwargs.update(timestamp_type="log_append", log_append_time_ms=batch.max_timestamp)
        again = codec.encode_batch(records, **kwargs)
        (copy,) = codec.iter_batches(again)
        assert copy.records() == records
        assert (copy.base_offset, copy.last_offset, copy.records_count) == (
            batch.base_offset, batch.last_offset, batch.records_count)
        if (batch.compression == "none" and batch.timestamp_type == "create" and not batch.has_delete_horizon):
            assert again == bytes(batch.buffer)


def test_kraft_control_types_are_reported_and_unknown_ignored(codec):
    """LEADER_CHANGE (2) is reported with its type; an unknown type maps to -1, as Kafka does."""
    import struct

    for ctype, expected_type in ((2, 2), (6, 6), (42, -1)):
        batch = bytearray(codec.encode_control_batch("commit", base_offset=0, producer_id=1, producer_epoch=0,
                                                     timestamp_ms=5))
        # key lives at a fixed place in a marker batch: header 61 + len 1 + attr 1 + ts 1 + off 1 + keylen 1
        struct.pack_into(">hh", batch, 66, 0, ctype)
        struct.pack_into(">I", batch, 17, codec.crc32c(bytes(batch[21:])))
        (rec,) = next(iter(codec.iter_batches(bytes(batch)))).records()
        assert rec.control_type == expected_type and rec.coordinator_epoch is None
        assert len(codec.decode_columnar(bytes(batch))) == 0  # control records are never data


def test_empty_batch_decodes_to_no_records(codec):
    path = vectors.case_dir("compacted-0") / "00000000000000000000.log"
    empties = [b for b in codec.iter_batches(path.read_bytes()) if b.records_count == 0]
    assert [(b.base_offset, b.last_offset, b.base_timestamp) for b in empties] == [(20, 29, -1), (70, 72, -1)]
    assert all(b.records() == [] for b in empties)


def test_engine_facade_exports_the_selected_codec():
    import engine

    assert engine.IMPL in ("cython", "python")
    assert engine.crc32c(b"123456789") == 0xE3069283
    assert engine.encode_batch([(b"k", b"v", None, 1700000000000), (None, b"vv", [("h", b"x")], 1700000000005)]) \
        == TWO_RECORDS


@pytest.mark.parametrize("label,path,lines", LOGS, ids=[label for label, _, _ in LOGS])
def test_first_record_at_or_after_a_time_matches_kafkas_dump(codec, label, path, lines):
    """RecordBatch.first_at_or_after (ListOffsets by timestamp inside a batch) against the records Kafka's dump
    lists, for probes at, between and beyond each record's timestamp and offset (control records count)."""
    expected = vectors.segments(lines)[path.name]
    for batch, (_, rlines) in zip(codec.iter_batches(path.read_bytes()), expected["batches"]):
        if not rlines:  # compaction emptied it
            assert batch.first_at_or_after(-1, 0) is None
            continue
        stamps = sorted({r["timestamp"] for r in rlines} | {-1, max(r["timestamp"] for r in rlines) + 1})
        offsets = [r["offset"] for r in rlines]
        for ts in stamps + [t + 1 for t in stamps]:
            for start in [offsets[0] - 1, offsets[len(offsets) // 2], offsets[-1], offsets[-1] + 1]:
                want = next(((r["timestamp"], r["offset"]) for r in rlines
                             if r["timestamp"] >= ts and r["offset"] >= start), None)
                assert batch.first_at_or_after(ts, start) == want, (ts, start)
    # the same over the whole file: the first batch that may hold one is searched, and the ones after it
    data = path.read_bytes()
    everything = [r for _, rlines in expected["batches"] for r in rlines]
    stamps = sorted({r["timestamp"] for r in everything} | {-1})
    offsets = sorted({r["offset"] for r in everything} | {-1})
    for ts in stamps[::max(1, len(stamps) // 12)] + [stamps[-1], stamps[-1] + 1]:
        for start in offsets[::max(1, len(offsets) // 6)] + [offsets[-1], offsets[-1] + 1]:
            want = next(((r["timestamp"], r["offset"]) for r in everything
                         if r["timestamp"] >= ts and r["offset"] >= start), None)
            assert codec.first_at_or_after(data, ts, start, source=str(path)) == want, (ts, start)


def unknown_control_batch_without_value(codec) -> bytes:
    """A control batch whose record's type is UNKNOWN (-1) and whose value is empty (no marker to read)."""
    import struct

    b = bytearray(codec.encode_control_batch("commit", base_offset=0, producer_id=1, producer_epoch=0, timestamp_ms=5))
    assert (b[65], b[70]) == (8, 12)  # the layout edited below: a 4-byte key, then a 6-byte value
    struct.pack_into(">hh", b, 66, 0, -1)
    del b[71:77]
    b[70] = 0  # value length 0
    b[61] -= 12  # the record's length, zig-zag encoded: 6 bytes fewer
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">I", b, 17, codec.crc32c(bytes(b[21:])))
    return bytes(b)


def test_an_unknown_control_type_has_no_marker_value_to_read(codec):
    """Kafka parses an end-transaction marker's value only for ABORT and COMMIT; UNKNOWN (-1) reads as -1."""
    (rec,) = next(iter(codec.iter_batches(unknown_control_batch_without_value(codec)))).records()
    assert (rec.control_type, rec.coordinator_epoch, rec.value) == (-1, None, b"")
