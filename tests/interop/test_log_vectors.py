"""Kafka-written partition folders open as kafkalog logs: reads by offset and timestamp, index lookups,
dump-log --json and index rebuilding all agree with what Kafka wrote (expected.jsonl, the index files)."""
from __future__ import annotations

import io
import json
import shutil

import pytest

import engine
from engine.common.clock import ManualClock
from engine.record import compression as comp
from engine.tools import dump_log
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from tests import vectors
from engine.log.unified_log import UnifiedLog as Log

CASES = vectors.CASES


def _interval(case: str) -> int:
    spec = json.loads((vectors.case_dir(case) / "spec.json").read_text())
    return (spec.get("segments") or [spec])[0]["indexIntervalBytes"]


def _open(case: str, tmp_path, clean: bool = True) -> Log:
    target = tmp_path / case
    shutil.copytree(vectors.case_dir(case), target)
    return Log(FileSystem(), str(target), LogConfig.from_dict({"index.interval.bytes": _interval(case)}),
               ManualClock(1_800_000_000_000), clean_shutdown=clean, recovery_point=0)


def _model(case: str):
    """(batches, records, index entries per segment) from expected.jsonl alone."""
    segs = vectors.segments(vectors.expected(case))
    batches = [b for s in segs.values() for b, _ in s["batches"]]
    records = [r for s in segs.values() for _, rs in s["batches"] for r in rs]
    lines = vectors.expected(case)
    offset_entries, time_entries, current = {}, {}, None
    for line in lines:
        if line["type"] in ("offsetIndex", "timeIndex"):
            current = (line["type"], line["baseOffset"])
            (offset_entries if line["type"] == "offsetIndex" else time_entries)[line["baseOffset"]] = []
        elif line["type"] == "offsetIndexEntry":
            offset_entries[current[1]].append((line["offset"], line["position"]))
        elif line["type"] == "timeIndexEntry":
            time_entries[current[1]].append((line["timestamp"], line["offset"]))
    return batches, records, offset_entries, time_entries


@pytest.mark.parametrize("case", CASES)
def test_read_every_offset(case, tmp_path):
    lg = _open(case, tmp_path)
    batches, records, _, _ = _model(case)
    assert lg.log_start_offset == lg.segments[0].base_offset == 0  # every case's first segment is named 0
    assert lg.log_end_offset == batches[-1]["lastOffset"] + 1
    offsets = sorted({r["offset"] for r in records} | {b["baseOffset"] for b in batches} | {batches[-1]["lastOffset"]})
    for target in offsets[:: max(1, len(offsets) // 150)]:
        got = lg.read(target, max_bytes=1)
        want = next(b for b in batches if b["lastOffset"] >= target)
        (first, *_) = list(engine.iter_batches(got.records))
        assert (first.base_offset, first.last_offset, got.position) == (want["baseOffset"], want["lastOffset"], want["position"])
    # walking the whole log batch by batch returns every record exactly
    seen, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        fetch = lg.read(offset, max_bytes=4096)
        batch_list = list(engine.iter_batches(fetch.records))
        assert batch_list, f"no progress at {offset}"
        for b in batch_list:
            seen += [(r.offset, r.timestamp, r.key, r.value) for r in b.records()]
        offset = batch_list[-1].next_offset
    assert seen == [(r["offset"], r["timestamp"], vectors.b64(r["keyB64"]), vectors.b64(r["valueB64"])) for r in records]
    lg.close()


@pytest.mark.parametrize("case", CASES)
def test_offset_for_timestamp(case, tmp_path):
    """ListOffsets semantics: the smallest offset whose record timestamp >= target (markers included)."""
    lg = _open(case, tmp_path)
    _, records, _, _ = _model(case)
    stamps = sorted({r["timestamp"] for r in records})
    targets = stamps[:: max(1, len(stamps) // 60)] + [stamps[0] - 1, stamps[-1], stamps[-1] + 1]
    for t in targets:
        matches = [r for r in records if r["timestamp"] >= t]
        want = min(matches, key=lambda r: r["offset"]) if matches else None
        got = lg.offset_for_timestamp(t)
        assert got == ((want["timestamp"], want["offset"]) if want else None), t
    assert lg.offset_for_timestamp(-2) == (-1, lg.log_start_offset)
    assert lg.offset_for_timestamp(-1) == (-1, lg.log_end_offset)
    lg.close()


@pytest.mark.parametrize("case", CASES)
def test_index_lookups_agree_with_kafkas_index_files(case, tmp_path):
    lg = _open(case, tmp_path)
    _, records, offset_entries, time_entries = _model(case)
    for seg in lg.segments:
        entries = offset_entries[seg.base_offset]
        assert seg.offset_index.entries == len(entries)
        for target in range(seg.base_offset - 1, seg.read_next_offset() + 2):
            le = [e for e in entries if e[0] <= target]
            assert seg.offset_index.lookup(target) == (le[-1] if le else (seg.base_offset, 0)), target
        tentries = time_entries[seg.base_offset]
        for t in sorted({ts for ts, _ in tentries} | {ts - 1 for ts, _ in tentries} | {ts + 1 for ts, _ in tentries}):
            le = [e for e in tentries if e[0] <= t]
            assert seg.time_index.lookup(t) == (le[-1] if le else (-1, seg.base_offset)), t
    lg.close()


@pytest.mark.parametrize("case", CASES)
def test_dump_log_json_reproduces_expected(case):
    folder = vectors.case_dir(case)
    files = sorted(str(p) for p in folder.iterdir() if p.suffix not in (".json", ".jsonl", ".txt"))
    out = io.StringIO()
    assert dump_log.dump(files, as_json=True, out=out) == 0
    assert [json.loads(line) for line in out.getvalue().split("\n") if line] == vectors.expected(case)


def test_dump_log_text_matches_kafka_dump_log_segments():
    folder = vectors.case_dir("txn-0")
    out = io.StringIO()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
        assert dump_log.dump([str(folder / name)], deep=True, print_data=True, out=out) == 0
    ours = [line for line in out.getvalue().splitlines() if not line.startswith("Dumping")]
    kafka = [line for line in (folder / "dumplog.txt").read_text().splitlines() if not line.startswith("Dumping")]
    assert ours == kafka


def test_kraft_metadata_segment_dumps_with_its_base_offset():
    out = io.StringIO()
    assert dump_log.dump([str(vectors.METADATA_LOG)], as_json=True, base_offset=0, out=out) == 0
    want = [{k: v for k, v in line.items() if k != "metadata"}
            for line in vectors.expected_lines(vectors.KAFKA_WRITTEN / "__cluster_metadata-0.expected.jsonl")]
    assert [json.loads(line) for line in out.getvalue().split("\n") if line] == want


@pytest.mark.parametrize("case", CASES)
def test_recovery_rebuilds_deleted_indexes_byte_identical(case, tmp_path):
    original = vectors.case_dir(case)
    target = tmp_path / case
    shutil.copytree(original, target)
    for p in list(target.glob("*.index")) + list(target.glob("*.timeindex")):
        p.unlink()
    lg = Log(FileSystem(), str(target), LogConfig.from_dict({"index.interval.bytes": _interval(case)}),
             ManualClock(1_800_000_000_000), clean_shutdown=False)
    assert sorted(lg.recovery.segments_recovered) == sorted(s.base_offset for s in lg.segments)
    assert lg.recovery.bytes_truncated == 0
    lg.close()
    for p in sorted(original.glob("*index")):
        if p.suffix in (".index", ".timeindex"):
            assert (target / p.name).read_bytes() == p.read_bytes(), p.name


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("case", ["basic-0", "codecs-0", "txn-0"])
def test_kafka_batches_reencoded_by_a_leader_keep_kafkas_records(codec, case):
    """Every data batch Kafka wrote, re-encoded as a leader does for a topic whose compression.type differs (Kafka's
    LogValidator rebuilds with the same MemoryRecordsBuilder that wrote these): each codec gives back the records of
    expected.jsonl, and the uncompressed rebuild's records section is byte for byte the one Kafka wrote."""
    lines = vectors.expected(case)
    for name, seg in vectors.segments(lines).items():
        data = (vectors.case_dir(case) / name).read_bytes()
        for line, records in seg["batches"]:
            if line["isControl"]:
                continue
            one = data[line["position"]:line["position"] + line["sizeInBytes"]]
            source = CODEC_IDS[line["compression"]]
            kafka_section = comp.decompress(source, one[61:]) if source else one[61:]
            for target, target_id in CODEC_IDS.items():
                pieces, *_ = codec.prepare_leader_append(one, line["baseOffset"], line["partitionLeaderEpoch"], -1,
                                                         1 << 24, False, None, (target_id, None, None))
                (rebuilt,) = codec.iter_batches(b"".join(bytes(p) for p in pieces))
                assert rebuilt.is_valid() and rebuilt.compression == (target if target_id != CODEC_IDS[
                    line["compression"]] else line["compression"])
                assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence,
                        rebuilt.is_transactional, rebuilt.max_timestamp) == (
                    line["producerId"], line["producerEpoch"], line["baseSequence"], line["isTransactional"],
                    line["maxTimestamp"])
                got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
                       for r in rebuilt.records()]
                assert got == [(r["offset"], r["timestamp"], vectors.b64(r.get("keyB64")),
                                vectors.b64(r.get("valueB64")),
                                [(h["key"], vectors.b64(h.get("valueB64"))) for h in r.get("headers") or []])
                               for r in records]
                if target == "none":
                    assert bytes(pieces[1]) == kafka_section


def test_gzip_and_lz4_compress_kafkas_records_to_kafkas_bytes():
    """The codecs whose algorithm Kafka's libraries share with ours (zlib for gzip, LZ4 and LZ4-HC for lz4) give the
    compressed bytes Kafka wrote, at the level each batch was written with (spec.json; Kafka's default otherwise)."""
    checked = 0
    for case in CASES:
        spec = json.loads((vectors.case_dir(case) / "spec.json").read_text())
        levels = [b.get("compressionLevel") for b in spec["batches"]] if case == "codecs-0" else None
        for name, seg in vectors.segments(vectors.expected(case)).items():
            data = (vectors.case_dir(case) / name).read_bytes()
            for i, (line, _) in enumerate(seg["batches"]):
                if line["compression"] not in ("gzip", "lz4"):
                    continue
                kafka = data[line["position"] + 61:line["position"] + line["sizeInBytes"]]
                codec_id = CODEC_IDS[line["compression"]]
                level = levels[i] if levels else None
                assert comp.compress(codec_id, comp.decompress(codec_id, kafka), level) == kafka, (case, i)
                checked += 1
    assert checked >= 15
