"""OffsetCheckpointFile: `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `cleaner-offset-checkpoint`.

Byte layout: segments.checkpoint_file's, version 0, one `<topic> <partition> <offset>` line per entry (partition an
int32, offset an int64). An empty file reads as no entries; a partition listed twice has its last line's offset.
Crash policy: written whole to `<file>.tmp`, fsynced, renamed over the file, directory fsynced;
a reader that finds it unreadable treats it as absent (Kafka then recovers everything).
Reading a checkpoint of many partitions is per-entry work: `parse` is the native core's (engine._native.
_offset_checkpoint) where it loaded, the Python one below (its twin, "offset_checkpoint") otherwise; both give the same
entries or the same refusal.
Thread-safety: writers are serialised by the caller (the log manager).
"""
from __future__ import annotations

from engine.record import twins
from engine.segments import checkpoint_file
from engine.segments.fs import FileSystem

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
CLEANER = "cleaner-offset-checkpoint"
VERSION = 0


def render(entries: dict[tuple[str, int], int]) -> bytes:
    return checkpoint_file.render(VERSION, [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())])


def _entry(line: str) -> tuple[str, int, int]:
    topic, partition, offset = checkpoint_file.fields(line, 3)
    return topic, checkpoint_file.number(partition), checkpoint_file.number(offset, checkpoint_file.INT64)


def _parse(data: bytes, path: str = "") -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file's bytes, as Kafka's OffsetCheckpointFile reads them (a partition listed twice:
    its last line); KafkaStorageError when Kafka refuses the file."""
    return {(topic, partition): offset
            for topic, partition, offset in checkpoint_file.parse(data, VERSION, _entry, path)}


def _native():
    from engine._native import _offset_checkpoint
    return _offset_checkpoint.parse_offsets


twins.register("offset_checkpoint", python=lambda: _parse, native=_native)
parse = twins.selected("offset_checkpoint")  # parse(data, path="") -> {(topic, partition): offset}


def read(fs: FileSystem, path: str) -> dict[tuple[str, int], int]:
    if not fs.exists(path):
        return {}
    return parse(fs.read_bytes(path), path)


def write(fs: FileSystem, path: str, entries: dict[tuple[str, int], int]) -> None:
    fs.atomic_write(path, render(entries))
