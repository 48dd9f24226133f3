"""OffsetCheckpointFile: `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `cleaner-offset-checkpoint`.

Byte layout (UTF-8 text, '\\n' line ends): a version line `0`, a count line, then one
`<topic> <partition> <offset>` line per entry. An empty file reads as no entries.
Crash policy: written whole to `<file>.tmp`, fsynced, renamed over the file, directory fsynced;
a reader that finds it unreadable treats it as absent (Kafka then recovers everything).
Thread-safety: writers are serialised by the caller (the log manager).
"""
from __future__ import annotations

from engine.common.errors import KafkaStorageError
from engine.segments.fs import FileSystem

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
CLEANER = "cleaner-offset-checkpoint"


def render(entries: dict[tuple[str, int], int]) -> bytes:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse(text: str, path: str = "") -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; KafkaStorageError when malformed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return {}
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unsupported version {lines[0]}")
        count = int(lines[1])
        fields = [line.split(" ") for line in lines[2:]]
        if any(len(f) != 3 for f in fields):
            raise ValueError(f"a line that is not '<topic> <partition> <offset>' in {lines[2:]!r:.200}")
        entries = {(topic, int(partition)): int(offset) for topic, partition, offset in fields}
        if entries and (min(entries.values()) < 0 or min(p for _, p in entries) < 0):
            raise ValueError("a negative partition or offset")
        if len(entries) != count or len(lines) - 2 != count:
            raise ValueError(f"expected {count} entries, found {len(lines) - 2}")
    except (ValueError, IndexError) as exc:
        raise KafkaStorageError(f"malformed checkpoint file: {exc}", file=path) from exc
    return entries


def read(fs: FileSystem, path: str) -> dict[tuple[str, int], int]:
    if not fs.exists(path):
        return {}
    return parse_bytes(fs.read_bytes(path), path)


def parse_bytes(data: bytes, path: str = "") -> dict[tuple[str, int], int]:
    """`parse` of the file's bytes (KafkaStorageError when they are not UTF-8)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KafkaStorageError(f"malformed checkpoint file: {exc}", file=path) from exc
    return parse(text, path)


def write(fs: FileSystem, path: str, entries: dict[tuple[str, int], int]) -> None:
    fs.atomic_write(path, render(entries))
