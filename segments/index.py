"""The mmap-backed sparse index shared by `.index` and `.timeindex` (Kafka's AbstractIndex).

Byte layout: fixed-size big-endian entries, no header, no checksum. While a segment is active
its index file is preallocated to `segment.index.bytes` (rounded down to whole entries) and
filled from the start; it is trimmed to `entries * entry_size` on roll and close. Like Kafka,
opening an existing file trusts its whole length as valid entries, which is why trimming matters.
Crash policy: entries are written through the mmap; `flush()` msyncs; after a crash the owning
segment is recovered (its index rebuilt) unless it lies below the recovery point.
Thread-safety: one writer; lookups may run concurrently with appends (a lookup sees a prefix).
"""
from __future__ import annotations

import os
import struct
import threading

from engine import codec
from engine.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from segments.fs import FileSystem

INT32_MAX = 2**31 - 1


class MmapIndex:
    """A sparse index of fixed-size entries over an mmap (subclasses define the entries)."""

    ENTRY = struct.Struct(">ii")

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_index_size: int,
                 writable: bool = True) -> None:
        self.fs, self.path, self.base_offset, self.writable = fs, path, base_offset, writable
        self.entry_size = self.ENTRY.size
        self._lock = threading.RLock()
        try:
            new = not fs.exists(path)
            if new and not writable:
                raise KafkaStorageError(f"index file {path} does not exist", file=path)
            self._f = fs.open(path, "wb+" if new else ("r+b" if writable else "rb"))
            if new:
                fs.truncate(self._f, self._round(max_index_size))
            length = os.fstat(self._f.fileno()).st_size
        except OSError as exc:
            raise KafkaStorageError(f"cannot open index: {exc}", file=path) from exc
        self._map = None
        self._map_file(length)
        self.entries = 0 if new else length // self.entry_size

    def _round(self, size: int) -> int:
        return size - size % self.entry_size

    def _map_file(self, length: int) -> None:
        self._map = self.fs.mmap(self._f, length, self.writable) if length else None
        self.max_entries = length // self.entry_size

    # --- entries --------------------------------------------------------------------------------
    def _raw(self, slot: int) -> tuple:
        return self.ENTRY.unpack_from(self._map, slot * self.entry_size)

    def _put(self, *fields) -> None:
        with self._lock:
            if self.is_full():
                raise KafkaStorageError(f"attempt to append to a full index ({self.entries} entries)",
                                        file=self.path)
            self.ENTRY.pack_into(self._map, self.entries * self.entry_size, *fields)
            self.entries += 1

    def _search(self, key: int) -> int:
        return codec.index_search(self._map, self.entries, self.entry_size, key) if self.entries else -1

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise InvalidOffsetError(f"offset {offset} is not within an int32 of the base {self.base_offset}",
                                     file=self.path, offset=offset)
        return rel

    # --- file management ------------------------------------------------------------------------
    def resize(self, new_size: int) -> None:
        """Set the file to `new_size` bytes (whole entries), keeping the entries."""
        with self._lock:
            length = max(self._round(new_size), self.size_in_bytes())
            if self._map is not None and len(self._map) == length:
                return
            if self._map is not None:
                self._map.close()
            self.fs.truncate(self._f, length)
            self._map_file(length)

    def trim_to_valid_size(self) -> None:
        self.resize(self.size_in_bytes())

    def truncate_to_entries(self, n: int) -> None:
        with self._lock:
            self.entries = min(self.entries, n)

    def reset(self, max_index_size: int) -> None:
        """Drop every entry and preallocate again (before a segment is recovered)."""
        with self._lock:
            self.entries = 0
            self.resize(max_index_size)

    def flush(self) -> None:
        with self._lock:
            if self._map is not None and self.writable:
                self.fs.msync(self._f, self._map)

    def close(self) -> None:
        with self._lock:
            if self.writable:
                self.trim_to_valid_size()
            if self._map is not None:
                self._map.close()
                self._map = None
            self._f.close()

    def rename_to(self, path: str) -> None:
        self.fs.rename(self.path, path)
        self.path = path

    def sanity_check(self) -> None:
        """Kafka's checks: whole entries, and (per index type) ordered keys past the base offset."""
        length = os.fstat(self._f.fileno()).st_size
        if length % self.entry_size:
            raise CorruptIndexError(f"index file size {length} is not a multiple of {self.entry_size}",
                                    file=self.path)
