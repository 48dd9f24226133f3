"""The offset checkpoint reader's twins (engine.segments.offset_checkpoint's Python parser and the native core's
engine._native._offset_checkpoint): each reads every offset file of tests/data/kafka-checkpoints as Kafka's own reader
did (expected.jsonl), and the two give the same entries, or the same refusal with the same message, on inputs made
of the format's pieces and its edges (signs, Java's range limits, leading zeros, Unicode digits, every line end and
whitespace, fields too many and too few, counts that do not match)."""
from __future__ import annotations

import os
import random

import pytest

from engine.common.errors import KafkaStorageError
from engine.record import twins
from engine.segments import offset_checkpoint
from tests import vectors
from tests.conftest import IMPLEMENTATIONS

OFFSET_FILES = [line for line in vectors.expected_lines(vectors.KAFKA_CHECKPOINTS / "expected.jsonl")
                if vectors.checkpoint_kind(line["file"]) == "offsets"]
CASES = int(os.environ.get("KAFKALOG_CHECKPOINT_TWIN_CASES", "30000"))
NUMBERS = [b"0", b"7", b"-1", b"+3", b"-0", b"2147483647", b"2147483648", b"-2147483648", b"-2147483649",
           b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
           b"0000000000000000000000000000042", b"184467440737095516160", b"\xd9\xa3", b"-\xd9\xa3\xd9\xa4", b"1_0",
           b"+", b"-", b"", b"1e3", b"0x10", b"\xef\xbb\xbf1"]
PIECES = [b" ", b"\t", b"\x0b", b"\x0c", b"\n", b"\r", b"\r\n", b"\x1c", b"\xc2\x85", b"\xff", b"\x00", b"t",
          b"t\xc3\xa9", *NUMBERS]


def _verdict(parse, data: bytes):
    try:
        return "entries", list(parse(data, "f").items())
    except KafkaStorageError as exc:
        return "refused", str(exc), exc.file


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("line", OFFSET_FILES, ids=[line["file"] for line in OFFSET_FILES])
def test_each_implementation_reads_each_offset_file_as_kafka(impl, line):
    parse = twins.load("offset_checkpoint", impl)
    path = str(vectors.KAFKA_CHECKPOINTS / line["file"])
    data = open(path, "rb").read()
    if "error" in line:
        with pytest.raises(KafkaStorageError, match="malformed checkpoint file") as err:
            parse(data, path)
        assert err.value.file == path
    else:
        assert parse(data, path) == {(t, p): o for t, p, o in line["offsets"]}


def _made(rng: random.Random) -> bytes:
    """A file from the format's pieces: mostly well-formed, with a piece out of place here and there."""
    lines = []
    for _ in range(rng.randrange(0, 6)):
        if rng.random() < 0.9:
            offset = rng.choice(NUMBERS[:4]) if rng.random() < 0.8 else rng.choice(NUMBERS)
            lines.append(rng.choice([b"t", b"a.b", b"t\xc3\xa9"]) + rng.choice([b" ", b"\t", b"  ", b" \x0c"])
                         + rng.choice(NUMBERS[:4]) + b" " + offset + rng.choice([b"", b"", b" ", b"\t", b" x"]))
        else:
            lines.append(b"".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6))))
    count = b"%d" % len(lines) if rng.random() < 0.9 else rng.choice(NUMBERS)
    head = [rng.choice([b"0", b"0", b"0", b"1", b"", b"+0"]), count][:rng.choice([0, 1, 2, 2, 2, 2, 2])]
    ends = [rng.choice([b"\n", b"\n", b"\r\n", b"\r"]) for _ in range(len(head) + len(lines))]
    if ends and rng.random() < 0.3:
        ends[-1] = b""
    return b"".join(line + end for line, end in zip(head + lines, ends))


def test_the_twins_agree_on_every_input():
    """(With the native core not built, the Python side alone: it must still return or refuse, typed.)"""
    first, *others = (twins.load("offset_checkpoint", impl) for impl in IMPLEMENTATIONS)
    rng = random.Random(20261207)
    outcomes = {"entries": 0, "refused": 0}
    for _ in range(CASES):
        data = _made(rng)
        verdict = _verdict(first, data)
        assert all(_verdict(other, data) == verdict for other in others), data
        outcomes[verdict[0]] += 1
    assert min(outcomes.values()) > CASES // 10, outcomes


def test_the_process_reads_with_the_codecs_choice():
    assert twins.impl_of("offset_checkpoint", offset_checkpoint.parse) == twins.impl_of("codec", twins.selected("codec"))
