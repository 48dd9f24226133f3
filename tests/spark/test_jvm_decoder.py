"""The JVM source's decoder (RecordBatch and RecordCursor in engine/spark/jvm) held to the same bytes as the Cython one.

Every Kafka-written segment decodes on the JVM to exactly what Kafka's own dump says, and a seeded slice of the
decoder fuzzer's mutants gets the same verdict from both decoders: the same records, or the same typed error. The
JVM never returns a record the Cython decoder refuses. The JVM's side runs as one `java` process over every case
(kafkalog.spark.DecoderCheck, tests/spark/jvm_checks.py); KAFKALOG_JVM_FUZZ_CASES sets the slice (CI: 100,000).
"""
from __future__ import annotations

import os
import random
import struct

import pytest

from engine.common.errors import KafkaError
from engine.record import twins
from tests import vectors
from tests.spark.jvm_checks import run_check
from tests.unit.test_codec_errors import _compressed_batch, _gzip_member
from tests.unit.test_codec_fuzz import _corpus, _mutate
from tests.unit.test_codec_vectors import unknown_control_batch_without_value

pytestmark = pytest.mark.spark

CASES = int(os.environ.get("KAFKALOG_JVM_FUZZ_CASES", "100000"))


def _jvm_verdicts(cases: list[bytes], tmp_path) -> list[str]:
    path = tmp_path / "cases"
    with open(path, "wb") as f:
        for data in cases:
            f.write(struct.pack(">i", len(data)) + data)
    lines = run_check("DecoderCheck", path)
    assert len(lines) == len(cases)
    return lines


def _outcome(verdict: str) -> str:
    """A verdict without an error's message: the records, or "error" and the error's kind."""
    return verdict.split(":", 1)[0] if verdict.startswith("error ") else verdict


def _hex(field: bytes | None) -> str:
    return "-" if field is None else (field.hex() or "''")


def _record_line(r) -> str:
    if r.control_type is not None:
        return f"C {r.offset} {r.control_type}"
    headers = ",".join(f"{_hex(k.encode('utf-8', 'surrogateescape'))}={_hex(v)}" for k, v in r.headers) or "-"
    return f"R {r.offset} {r.timestamp} {_hex(r.key)} {_hex(r.value)} {headers}"


def _cython_verdict(impl, data: bytes) -> str:
    """What DecoderCheck prints for `data`, computed by the Cython decoder."""
    try:
        lines = [_record_line(r) for b in impl.iter_batches(data) for r in b.records(max_decompressed_bytes=1 << 20)]
    except KafkaError as exc:
        return f"error {type(exc).__name__}"  # (its message, the JVM's are its own words)
    return " ".join(["ok", *lines])


def _kafka_verdict(lines: list[dict], name: str) -> str:
    """What DecoderCheck must print for a Kafka-written segment, from Kafka's own dump of it."""
    out = ["ok"]
    for batch, records in vectors.segments(lines)[name]["batches"]:
        for r in records:
            key, value = vectors.b64(r["keyB64"]), vectors.b64(r["valueB64"])
            if "control" in r:
                out.append(f"C {r['offset']} {r['control']['controlTypeId']}")
                continue
            headers = ",".join(f"{_hex(h['key'].encode())}={_hex(vectors.b64(h['valueB64']))}"
                               for h in r["headers"]) or "-"
            out.append(f"R {r['offset']} {r['timestamp']} {_hex(key)} {_hex(value)} {headers}")
    return " ".join(out)


def test_kafka_written_segments_decode_on_the_jvm_as_kafka_dumped_them(tmp_path):
    logs = vectors.all_logs()
    got = _jvm_verdicts([path.read_bytes() for _, path, _ in logs], tmp_path)
    cython = twins.load("codec", "cython")
    for (label, path, lines), verdict in zip(logs, got):
        expected = _kafka_verdict(lines, path.name)
        assert verdict.count(" R ") + verdict.count(" C ") > 0, label
        assert verdict == expected, label
        assert _cython_verdict(cython, path.read_bytes()) == expected, label


def test_decoder_mutants_get_the_same_verdict_on_the_jvm_as_from_cython(tmp_path):
    cython = twins.load("codec", "cython")
    corpus = _corpus(cython)
    rng = random.Random(int(os.environ.get("KAFKALOG_FUZZ_SEED", "20261205")))
    cases = [_mutate(rng, corpus, cython.crc32c) for _ in range(CASES)]
    got = _jvm_verdicts(cases, tmp_path)
    outcomes = {"ok": 0, "error": 0}
    for data, verdict in zip(cases, got):
        expected = _cython_verdict(cython, data)
        assert _outcome(verdict) == expected, f"{verdict[:300]} for {data.hex()}"
        outcomes[expected.split(" ", 1)[0]] += 1
    # the slice must reach both outcomes, or it is not testing anything
    assert outcomes["ok"] > CASES // 50 and outcomes["error"] > CASES // 4, outcomes


def test_hand_made_edge_cases_get_the_same_verdict_on_the_jvm(tmp_path):
    """Inputs the fuzzer rarely builds: gzip as Kafka's reader takes it, an UNKNOWN control record without a value."""
    cython = twins.load("codec", "cython")
    section = cython.encode_batch([(b"k", b"v", [("h", b"x")], 5)] * 3)[61:]
    cases = [
        _compressed_batch(1, _gzip_member(section, flags=0xE0), 3),
        _compressed_batch(1, _gzip_member(section) + b"\x00\x01trailing", 3),
        _compressed_batch(1, _gzip_member(section[:5]) + _gzip_member(section[5:]), 3),
        unknown_control_batch_without_value(cython),
    ]
    got = _jvm_verdicts(cases, tmp_path)
    for data, verdict in zip(cases, got):
        expected = _cython_verdict(cython, data)
        assert expected.startswith("ok ") and _outcome(verdict) == expected, (verdict, expected)
