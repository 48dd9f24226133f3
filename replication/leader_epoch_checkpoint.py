"""`leader-epoch-checkpoint`: the partition's leader epochs and the offsets they start at
(Kafka's LeaderEpochCheckpointFile).

Byte layout (UTF-8 text, '\\n' line ends): version `0`, the entry count, then ascending
`<epoch> <startOffset>` lines. Crash policy: written tmp + fsync + rename + dir fsync.
Pure functions over text; thread-safe.
"""
from __future__ import annotations

from engine.errors import KafkaStorageError

FILE = "leader-epoch-checkpoint"


def render(entries: list[tuple[int, int]]) -> bytes:
    return ("\n".join(["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]) + "\n").encode()


def parse(text: str, path: str | None = None) -> list[tuple[int, int]]:
    lines = [line for line in text.split("\n") if line]
    if not lines:
        return []
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unsupported version {lines[0]}")
        entries = [(int(e), int(o)) for e, o in (line.split() for line in lines[2:])]
        if len(entries) != int(lines[1]):
            raise ValueError(f"expected {lines[1]} entries, found {len(entries)}")
    except ValueError as exc:
        raise KafkaStorageError(f"malformed leader-epoch-checkpoint: {exc}", file=path) from exc
    return entries
