"""Mutation fuzzing of the decoders: truncated, bit-flipped, spliced and random buffers.

The interpreter must never crash and every rejection must be a typed KafkaError. Half the
mutants get their CRC recomputed so record framing, varints and codecs are exercised, not
just the checksum. KAFKALOG_FUZZ_CASES sets the count (CI: 800,000; `make fuzz`: 8,000,000).
A subset runs through both implementations, which must agree: same records or same error class.
"""
from __future__ import annotations

import os
import random
import struct

from engine.common.errors import KafkaError
from engine.record import twins
from tests import vectors
from tests.conftest import IMPLEMENTATIONS

CASES = int(os.environ.get("KAFKALOG_FUZZ_CASES", "800000"))
CROSS_CHECK_EVERY = 20


def _corpus(impl) -> list[bytes]:
    rng = random.Random(7)
    out = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        recs = [(rng.randbytes(rng.randint(0, 20)) if rng.random() < 0.8 else None,
                 rng.randbytes(rng.randint(0, 200)) if rng.random() < 0.9 else None,
                 [("h%d" % j, rng.randbytes(3) if j % 2 else None) for j in range(rng.randint(0, 3))],
                 1_700_000_000_000 + rng.randint(-500, 500)) for _ in range(rng.randint(1, 12))]
        out.append(impl.encode_batch(recs, compression=codec, base_offset=rng.randint(0, 10**9),
                                     producer_id=5, producer_epoch=1, base_sequence=3))
    out.append(impl.encode_control_batch("abort", base_offset=9, producer_id=5, producer_epoch=1,
                                         coordinator_epoch=3, timestamp_ms=1_700_000_000_000))
    for path in sorted(vectors.case_dir("codecs-0").glob("*.log")) + sorted(vectors.case_dir("compacted-0").glob("*.log")):
        data = path.read_bytes()
        out.extend(bytes(b.buffer) for b in impl.iter_batches(data))
    return out


def _mutate(rng: random.Random, corpus: list[bytes], crc32c) -> bytes:
    buf = bytearray(rng.choice(corpus))
    if rng.random() < 0.3:
        buf += rng.choice(corpus)
    op = rng.randrange(7)
    if op == 0:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == 1:
        buf = buf[:rng.randrange(len(buf) + 1)]
    elif op == 2:
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif op == 3:
        at = rng.randrange(len(buf) + 1)
        buf[at:at] = rng.randbytes(rng.randint(1, 8))
    elif op == 4:
        at = rng.randrange(len(buf))
        del buf[at:at + rng.randint(1, 8)]
    elif op == 5:  # a header field (count, length, deltas, timestamps) set to an extreme
        field, fmt = rng.choice([(57, ">i"), (8, ">i"), (23, ">i"), (27, ">q"), (35, ">q"), (0, ">q"), (21, ">h")])
        if len(buf) >= field + struct.calcsize(fmt):
            extremes = {">h": [0, -1, 5, 2**15 - 1], ">i": [0, -1, 1, 7, 61, 2**31 - 1, -2**31],
                        ">q": [0, -1, 2**40, 2**63 - 1, -2**63]}[fmt]
            struct.pack_into(fmt, buf, field, rng.choice(extremes))
    else:
        buf = bytearray(rng.randbytes(rng.randint(0, 200)))
    if rng.random() < 0.5 and len(buf) >= 61:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:61 + max(0, struct.unpack_from(">i", buf, 8)[0] - 49)])))
    return bytes(buf)


def _verdict(impl, data: bytes):
    """('ok', records, columnar rows) or ('error', error class name); anything else propagates."""
    try:
        recs = [(r.offset, r.timestamp, r.key, r.value, r.headers, r.control_type)
                for b in impl.iter_batches(data) for r in b.records(max_decompressed_bytes=1 << 20)]
        cols = impl.decode_columnar(data, include_headers=True, max_decompressed_bytes=1 << 20).to_pylist()
        return ("ok", recs, cols)
    except KafkaError as exc:
        return ("error", type(exc).__name__)


def test_mutants_never_crash_and_twins_agree():
    impls = [twins.load("codec", name) for name in IMPLEMENTATIONS]
    primary = impls[0]
    corpus = _corpus(primary)
    rng = random.Random(int(os.environ.get("KAFKALOG_FUZZ_SEED", "20261122")))
    outcomes = {"ok": 0, "error": 0}
    for i in range(CASES):
        data = _mutate(rng, corpus, primary.crc32c)
        verdict = _verdict(primary, data)
        outcomes[verdict[0]] += 1
        if len(impls) > 1 and i % CROSS_CHECK_EVERY == 0:
            assert _verdict(impls[1], data) == verdict, data.hex()
    # the fuzzer must reach both outcomes, or it is not testing anything
    assert outcomes["ok"] > CASES // 50 and outcomes["error"] > CASES // 4, outcomes
