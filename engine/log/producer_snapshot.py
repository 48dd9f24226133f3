"""`<offset>.snapshot`: a producer-state snapshot (Kafka's ProducerStateManager.writeSnapshot).

Byte layout (big-endian): `version int16 (1) | crc uint32 (CRC-32C of bytes [6, EOF)) |
count int32 | count x 46-byte entries`, each `producerId int64 | epoch int16 | lastSequence int32 |
lastOffset int64 | offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
currentTxnFirstOffset int64` describing only the producer's last data batch. The file name is the
exclusive end offset of the state it holds.
Crash policy: written tmp + fsync + rename (never torn in place); a bad version or CRC is
CorruptSnapshotError, after which the caller falls back to an older snapshot or the log.
Pure functions over bytes; thread-safe.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from engine.common.errors import KafkaStorageError
from engine.record import codec

HEADER = struct.Struct(">hIi")
ENTRY = struct.Struct(">qhiqiqiq")
VERSION = 1


class CorruptSnapshotError(KafkaStorageError):
    """A snapshot with a bad version, CRC or length (Kafka's CorruptSnapshotException)."""

    retriable = False


@dataclass(frozen=True)
class ProducerSnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def first_sequence(self) -> int:
        """The last batch's base sequence (sequences wrap at 2**31)."""
        return self.last_sequence - self.offset_delta if self.last_sequence >= self.offset_delta \
            else 2**31 + self.last_sequence - self.offset_delta


def encode(entries: list[ProducerSnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                   e.timestamp, e.coordinator_epoch, e.current_txn_first_offset) for e in entries)
    return struct.pack(">hI", VERSION, codec.crc32c(body)) + body


def decode(data: bytes, path: str | None = None) -> list[ProducerSnapshotEntry]:
    if len(data) < HEADER.size:
        raise CorruptSnapshotError("snapshot shorter than its header", file=path)
    version, crc, count = HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot version {version} is not supported", file=path)
    if codec.crc32c(memoryview(data)[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch", file=path)
    if count < 0 or len(data) != HEADER.size + count * ENTRY.size:
        raise CorruptSnapshotError(f"snapshot declares {count} entries in {len(data)} bytes", file=path)
    return [ProducerSnapshotEntry(*ENTRY.unpack_from(data, HEADER.size + i * ENTRY.size)) for i in range(count)]
