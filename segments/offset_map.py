"""The log cleaner's key -> last offset map (Kafka's SkimpyOffsetMap), with the per-record loops of a clean.

Byte layout (memory only): `memory // 24` slots of 24 bytes, each an MD5 digest of a key (16 bytes) and
a big-endian int64 offset; an all-zero slot is empty. A key's n-th probe reads the big-endian int32 at byte
min(n, 12) of its digest, adds max(0, n - 12), and takes |that| (Kafka's abs: MIN_VALUE -> 0) modulo the
slot count: open addressing in a fixed budget (`log.cleaner.dedupe.buffer.size`). A clean fills it to
`slots x load factor` entries at most; keys past that wait for the next pass.
This module is the pure-Python twin; the native one is engine._native._offset_map, same API (the twin "offset_map" of
engine.record.twins).
Crash policy: none (memory only). Not thread-safe: one clean owns a map at a time.
"""
from __future__ import annotations

import hashlib
import struct

from engine.common.errors import InvalidConfigurationError
from engine.record import twins

HASH, ENTRY = 16, 24
_INT, _LONG = struct.Struct(">i"), struct.Struct(">q")
_EMPTY = bytes(ENTRY)


def check_budget(memory, load_factor) -> None:
    """InvalidConfigurationError unless `memory` (bytes) and `load_factor` make a usable map."""
    if type(memory) is not int or not ENTRY <= memory <= 2**31 - 1:
        raise InvalidConfigurationError(f"log.cleaner.dedupe.buffer.size={memory!r} must be an int in "
                                        f"[{ENTRY}, 2**31-1]")
    if type(load_factor) not in (int, float) or not 0 < load_factor <= 1:
        raise InvalidConfigurationError(f"log.cleaner.io.buffer.load.factor={load_factor!r} must be in (0, 1]")


class SkimpyOffsetMap:
    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        check_budget(memory, load_factor)
        self.memory = memory
        self.slots = memory // ENTRY
        self.load_factor = load_factor
        self._buf = bytearray(self.slots * ENTRY)
        self.size = 0
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def max_entries(self) -> int:
        """How many keys one clean puts in before the map counts as full (slots x load factor)."""
        return int(self.slots * self.load_factor)

    def _position(self, digest: bytes, attempt: int) -> int:
        probe = _INT.unpack_from(digest, min(attempt, HASH - 4))[0] + max(0, attempt - HASH + 4)
        probe = (probe + 2**31) % 2**32 - 2**31  # Java int overflow
        return (0 if probe == -2**31 else abs(probe)) % self.slots * ENTRY

    def put(self, key, offset: int) -> None:
        """Map `key` (by its MD5) to `offset`; it becomes the latest offset."""
        if self.size >= self.slots:
            raise ValueError(f"the offset map is full ({self.size} entries in {self.slots} slots)")
        digest = hashlib.md5(key).digest()
        buf, attempt = self._buf, 0
        pos = self._position(digest, 0)
        while buf[pos:pos + ENTRY] != _EMPTY:
            if buf[pos:pos + HASH] == digest:
                _LONG.pack_into(buf, pos + HASH, offset)
                self.latest_offset = offset
                return
            attempt += 1
            pos = self._position(digest, attempt)
        buf[pos:pos + HASH] = digest
        _LONG.pack_into(buf, pos + HASH, offset)
        self.latest_offset = offset
        self.size += 1

    def get(self, key) -> int:
        """The offset mapped to `key`, or -1."""
        digest = hashlib.md5(key).digest()
        buf = self._buf
        for attempt in range(self.slots + HASH - 4):
            pos = self._position(digest, attempt)
            if buf[pos:pos + ENTRY] == _EMPTY:
                return -1
            if buf[pos:pos + HASH] == digest:
                return _LONG.unpack_from(buf, pos + HASH)[0]
        return -1

    def table(self) -> bytes:
        """The slots as bytes (the layout in the module docstring)."""
        return bytes(self._buf)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        if self.size:
            self._buf[:] = bytes(len(self._buf))
        self.size = 0
        self.latest_offset = -1

    def add_batch(self, batch, start_offset: int) -> bool:
        """Map the keyed records of `batch` at or after `start_offset`; True when the map filled up first (the
        records from there on stay unmapped). The latest offset is the caller's to move (by batch)."""
        limit = self.max_entries
        for rec in batch.records():
            if rec.key is not None and rec.offset >= start_offset:
                if self.size >= limit:
                    return True
                self.put(rec.key, rec.offset)
        return False

    def filter_batch(self, batch, discard: bool, now_ms: int) -> tuple[list, bool, bool]:
        """The records of `batch` a clean keeps (Kafka's filterBatch with the cleaner's shouldRetainRecord):
        (kept records, whether all were kept, whether a kept one is a tombstone)."""
        records = batch.records()
        horizon = batch.delete_horizon_ms
        kept = []
        for rec in records:
            if discard:
                continue
            if not (batch.is_control or rec.offset > self.latest_offset):
                if rec.key is None or rec.offset < self.get(rec.key):
                    continue
                if rec.value is None and horizon is not None and now_ms >= horizon:
                    continue
            kept.append(rec)
        return kept, len(kept) == len(records), any(rec.value is None for rec in kept)


def _native() -> type:
    from engine._native import _offset_map
    return _offset_map.SkimpyOffsetMap


twins.register("offset_map", python=lambda: SkimpyOffsetMap, native=_native)
selected = twins.selected("offset_map")  # the offset map class
