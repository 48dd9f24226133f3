"""Coverage-guided fuzzing (atheris, libFuzzer) of the decoders and the parsers of every file beside the
segments. The pure-Python twin and the parsers are instrumented, so the fuzzer steers by their branches;
the native core runs the same input and must agree with the twin (same records, or the same error class).

    python -m tests.fuzz.coverage <target> [libFuzzer flags]     # targets: decoder, and PARSERS' names

A target returns or raises a typed KafkaError; anything else is a crash, which libFuzzer saves as
`crash-<sha1>` under tests/data/fuzz-crashers/<target>/ (kept as a vector: tests/fuzz/test_coverage.py
replays them all). The seed corpus is what the mutation fuzzers start from. The offset checkpoint reader has a native
twin too, which must agree with the instrumented Python one (same entries, or the same refusal and message).
Where atheris has no build for the interpreter (Python 3.10), the same targets run under seeded mutation fuzzing
instead (`mutation_fuzz`: -runs and -seed as libFuzzer's; the kept crashers first, then mutants of the seeds), and
the run says so.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import random
import struct
import sys
from pathlib import Path

try:
    import atheris
except ImportError:  # no atheris for this Python: mutation_fuzz stands in
    atheris = None

INSTRUMENTED = ["engine.record", "engine.segments", "engine.log.producer_snapshot", "engine.metadata"]
with atheris.instrument_imports(include=INSTRUMENTED) if atheris else contextlib.nullcontext():
    from engine.record import twins
    from tests.unit.test_codec_fuzz import _corpus, _verdict
    from tests.unit.test_parser_fuzz import PARSERS, _seeds

from engine.common.errors import KafkaError
from engine.record.codec import crc32c
from tests.conftest import IMPLEMENTATIONS

CRASHERS = Path(__file__).resolve().parents[1] / "data" / "fuzz-crashers"
TARGETS = ["decoder", *sorted(PARSERS)]


def _with_valid_checksums(name: str, data: bytes) -> bytes:
    """The input's first byte chooses whether its checksums are made right (odd) or left as they are, so the
    fuzzer reaches what lies behind a CRC as well as the CRC check itself."""
    if not data or not data[0] & 1:
        return data[1:]
    buf = bytearray(data[1:])
    if name == "snapshot" and len(buf) >= 10:
        struct.pack_into(">I", buf, 2, crc32c(bytes(buf[6:])))
    elif name == "decoder":
        position = 0
        while position + 61 <= len(buf):
            end = position + 12 + struct.unpack_from(">i", buf, position + 8)[0]
            if end <= position + 21 or end > len(buf):
                break
            struct.pack_into(">I", buf, position + 17, crc32c(bytes(buf[position + 21:end])))
            position = end
    return bytes(buf)


def _checkpoint_verdict(parse, data: bytes):
    try:
        return list(parse(data).items())
    except KafkaError as exc:
        return type(exc).__name__, str(exc)


def run_target(name: str, data: bytes) -> None:
    """One input through a target: returns, or raises a typed error; twins must agree on the decoder and on the
    offset checkpoint reader."""
    data = _with_valid_checksums(name, data)
    if name in ("decoder", "offset-checkpoint"):
        if name == "decoder":
            verdicts = [_verdict(twins.load("codec", i), data) for i in IMPLEMENTATIONS]
        else:
            verdicts = [_checkpoint_verdict(twins.load("offset_checkpoint", i), data) for i in IMPLEMENTATIONS]
        if any(v != verdicts[0] for v in verdicts[1:]):
            raise AssertionError(f"the twins disagree on {data.hex()}: {verdicts}")
        return
    with contextlib.suppress(KafkaError):  # a typed refusal is a parser's right answer to garbage
        PARSERS[name](data)


def seeds(name: str) -> list[bytes]:
    """The mutation fuzzers' valid inputs, each prefixed with the byte that keeps its checksums right."""
    found = _corpus(twins.load("codec", IMPLEMENTATIONS[0])) if name == "decoder" else _seeds()[name]
    return [b"\x01" + s for s in found]


def main(argv: list[str]) -> None:
    name, flags = argv[1], argv[2:]
    if name not in TARGETS:
        raise SystemExit(f"unknown target {name!r}; one of {TARGETS}")
    corpus = Path(os.environ.get("KAFKALOG_FUZZ_CORPUS", "build/fuzz-corpus")) / name
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds(name)):
        (corpus / f"seed-{i}").write_bytes(seed)
    artifacts = CRASHERS / name
    kept = [str(artifacts)] if artifacts.is_dir() else []  # earlier crashers run first, as regression inputs
    artifacts.mkdir(parents=True, exist_ok=True)
    if atheris is None:
        options = dict(flag.lstrip("-").split("=", 1) for flag in flags if "=" in flag)
        mutation_fuzz(name, int(options.get("runs", 100_000)), int(options.get("seed", 0)), artifacts)
        return
    atheris.Setup([argv[0], f"-artifact_prefix={artifacts}/", "-max_len=65536", *flags, str(corpus), *kept],
                  lambda data: run_target(name, data))
    atheris.Fuzz()


def _mutant(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits of `data`: a bit flipped, a byte set, bytes inserted, a range cut or repeated."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(buf) + 1)
        edit = rng.randrange(5)
        if edit == 0 and buf:
            buf[at % len(buf)] ^= 1 << rng.randrange(8)
        elif edit == 1 and buf:
            buf[at % len(buf)] = rng.randrange(256)
        elif edit == 2:
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif edit == 3:
            del buf[at:at + rng.randint(1, 16)]
        else:
            buf[at:at] = buf[at:at + rng.randint(1, 32)]
    return bytes(buf[:65536])


def mutation_fuzz(name: str, runs: int, seed: int, artifacts: Path) -> None:
    """The stand-in for atheris: the kept crashers, then `runs` seeded mutants of the seed corpus, through the target;
    a crash is saved as `crash-<sha1>` in `artifacts` and fails the run, as libFuzzer's would."""
    print(f"atheris is not installed for Python {sys.version_info[0]}.{sys.version_info[1]}: {name} runs under "
          f"seeded mutation fuzzing (no coverage guidance)", file=sys.stderr)
    rng = random.Random(seed)
    pool = seeds(name)
    kept = [p.read_bytes() for p in sorted(artifacts.glob("crash-*"))]
    for i in range(len(kept) + runs):
        data = kept[i] if i < len(kept) else _mutant(rng, rng.choice(pool))
        try:
            run_target(name, data)  # a typed refusal is its right answer, handled inside, as under atheris
        except BaseException:
            path = artifacts / f"crash-{hashlib.sha1(data).hexdigest()}"
            path.write_bytes(data)
            print(f"crash on input {path}", file=sys.stderr)
            raise
    print(f"Done {runs} runs (seeded mutation fuzzing)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
