"""CheckpointFile: the text format Kafka's checkpoint files share, read as Kafka reads it (the offset checkpoints in
segments.offset_checkpoint, the leader epochs in segments.leader_epoch_checkpoint, the JVM source's twin in
engine/spark/jvm's CheckpointFile.java; tests/data/kafka-checkpoints holds them all to what Kafka's own readers make
of one corpus of files).

Byte layout (UTF-8; lines end in '\\n', '\\r\\n' or '\\r'; the last line's end may be missing): a version line, a
count line, then one line per entry whose fields are separated by runs of whitespace (' ', '\\t', '\\v', '\\f').
An empty file, or one with only its version line, has no entries (a Kafka broker creates its checkpoint files empty
at start-up). Refused, as Kafka refuses them: bytes that are not UTF-8; a version other than the one expected; a
number that is not a decimal integer (an optional sign, digits, nothing else, within its Java type's range); an
entry line that does not split into its fields (a blank line, a field too many or too few; leading whitespace makes
an empty first field); an entry count other than the count line's. Whitespace after the last field is allowed, and
entries are otherwise not checked here (negative values, repeats, order): what they mean is their reader's business.
Crash policy: none of its own (pure parsing; the writers replace a file whole through tmp + rename).
Thread-safety: pure functions.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from engine.common.errors import KafkaStorageError

T = TypeVar("T")
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
_LINE_END = re.compile(r"\r\n|\r|\n")
_SPACES = re.compile(r"[ \t\n\x0b\f\r]+")
_INTEGER = re.compile(r"[+-]?\d+")


def number(text: str, bounds: tuple[int, int] = INT32) -> int:
    """`text` as Java's Integer.parseInt (or Long.parseLong, with INT64) reads it; ValueError when it does not."""
    if _INTEGER.fullmatch(text) is None:
        raise ValueError(f"not a number: {text!r:.40}")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"out of range: {text!r:.40}")
    return value


def fields(line: str, count: int) -> list[str]:
    """The `count` fields of an entry line; ValueError when it does not split into exactly that many."""
    parts = _SPACES.split(line)
    while len(parts) > 1 and parts[-1] == "":  # whitespace after the last field is not a field
        parts.pop()
    if len(parts) != count:
        raise ValueError(f"malformed line {line!r:.200}")
    return parts


def parse(data: bytes, version: int, entry: Callable[[str], T], path: str | None = None) -> list[T]:
    """The entries of a checkpoint file's bytes, each line made an entry by `entry` (which raises ValueError when the
    line is not one); KafkaStorageError naming `path` when the file is refused."""
    try:
        lines = _LINE_END.split(data.decode("utf-8"))
        if lines[-1] == "":
            lines.pop()  # the last line's end
        if not lines:
            return []
        if number(lines[0]) != version:
            raise ValueError(f"unsupported version {lines[0]!r:.40} (expected {version})")
        if len(lines) == 1:
            return []
        count = number(lines[1])
        if count < 0:
            raise ValueError(f"a negative entry count {count}")
        entries = [entry(line) for line in lines[2:]]
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
    except (UnicodeDecodeError, ValueError) as exc:
        raise KafkaStorageError(f"malformed checkpoint file: {exc}", file=path) from exc
    return entries


def render(version: int, lines: list[str]) -> bytes:
    """A checkpoint file's bytes: the version, the count, then `lines`, each ended by '\\n'."""
    return "".join(f"{line}\n" for line in [str(version), str(len(lines)), *lines]).encode("utf-8")
