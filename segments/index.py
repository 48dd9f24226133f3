"""The mmap-backed sparse index shared by `.index` and `.timeindex` (Kafka's AbstractIndex).

Byte layout: fixed-size big-endian entries, no header, no checksum. While a segment is active
its index file is preallocated to `segment.index.bytes` (rounded down to whole entries) and
filled from the start; it is trimmed to `entries * entry_size` on roll and close. Like Kafka,
opening an existing file trusts its whole length as valid entries, which is why trimming matters.
A new index's file is not made until something must be in it: its first written entries or lookup create it at its
preallocated length (mapped by the first lookup, not before), and one that is closed before that is written once, at
its exact length (a directory of many new partitions creates and maps nothing while they take a few records). Lookups binary-search a read mapping; new entries are buffered
and written with one pwrite() per 64 (or before any read of the index) into the same page cache (a store into a
shared mapping takes a write-protect fault whenever writeback has cleaned the page, ~10x the cost of the system call
under a steady append load).
Crash policy: `flush()` writes buffered entries and fsyncs; `close()` fsyncs a file it trimmed. A crash can lose
buffered entries, which only makes the sparse index sparser; after an unclean shutdown the segment is recovered (its
index rebuilt) unless it lies below the recovery point, and every flushed segment has its entries.
Thread-safety: one writer; lookups may run concurrently with appends (a lookup sees a prefix). The mapping is
searched, resized, remapped and closed only under the index's lock. A read-only index (a reader beside a writer it
does not control, which trims a preallocated index on roll) holds a copy read with pread, never a mapping: a
mapped page past a file's new end is SIGBUS.
"""
from __future__ import annotations

import struct
from abc import ABC, abstractmethod

from engine.common.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from engine.record import codec
from engine.segments.fs import FileSystem, new_lock

INT32_MAX = 2**31 - 1


class MmapIndex(ABC):
    """A sparse index of fixed-size entries over an mmap (subclasses define the entries).
    The native appender and reader (engine._native._segment_appender, _log_read) work on it through public members,
    its seam: under `lock`, `entries`, the buffered entries `pending`, the `last` entry's fields, `write_pending()`,
    `readable()` (the entries the file holds) and `mapped()` (the mapping, made on demand; `mapping` once made)."""

    ENTRY = struct.Struct(">ii")
    PENDING_ENTRIES = 64  # buffered entries written with one pwrite (the native appender reads it too)

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_index_size: int,
                 writable: bool = True, log_size: int | None = None, new: bool | None = None) -> None:
        """Open (or create) the index; with `log_size`, an existing file's entries are validated
        against a `.log` of that size (CorruptIndexError, file closed, when they are wrong); `new`: whether the file
        is known not to exist (None: look)."""
        self.fs, self.path, self.base_offset, self.writable = fs, path, base_offset, writable
        self.entry_size = self.ENTRY.size
        self.lock = new_lock()
        self.pending = bytearray()  # entries counted in `entries` but not yet written
        self.last = None  # the last entry's raw fields, cached
        self.mapping = None
        self._unmade = False  # a new index whose file is not made yet (`_make`)
        try:
            if new is None:
                new = not fs.exists(path)
            if new and writable:  # made preallocated by its first write or lookup, mapped by its first lookup
                self.max_entries = self._round(max_index_size) // self.entry_size
                self._unmade = True
            else:
                self._map_file(0 if new else fs.size(path))  # read-only, a missing index reads as empty
        except OSError as exc:
            raise KafkaStorageError(f"cannot open index: {exc}", file=path) from exc
        self.entries = 0 if new else self.max_entries
        if log_size is not None and not new:
            try:
                self.validate(log_size)
            except CorruptIndexError:
                self.close_unchanged()
                raise

    def _round(self, size: int) -> int:
        return size - size % self.entry_size

    def _make(self) -> None:
        """Create a new index's file at its preallocated length (lock held), once."""
        if self._unmade:
            try:
                with self.fs.open(self.path, "wb+") as f:
                    self.fs.truncate(f, self.max_entries * self.entry_size)
            except OSError as exc:
                raise KafkaStorageError(f"cannot create index: {exc}", file=self.path) from exc
            self._unmade = False

    def _map_file(self, length: int) -> None:
        """Map the first `length` bytes; the descriptor is closed at once (the mapping outlives it). Until a
        failed mapping is retried (`mapped`), the index has that many slots and no mapping."""
        self.mapping = None
        self.fs.untrack_map(self)
        self.max_entries = length // self.entry_size
        if length and not self.writable:
            with self.fs.open(self.path, "rb") as f:
                self.mapping = self.fs.pread(f, length, 0)
            self.max_entries = len(self.mapping) // self.entry_size  # the file may have been trimmed meanwhile
        elif length:
            with self.fs.open(self.path, "r+b") as f:
                self.mapping = self.fs.mmap(f, length, True)
            self.fs.track_map(self)

    def _drop_map(self) -> None:
        """Close the mapping (lock held); a read-only index's copy is just let go."""
        if self.mapping is not None and self.writable:
            self.mapping.close()
        self.mapping = None

    def mapped(self):
        """The mapping (lock held), made again if the descriptor pool dropped it or a failed resize left none."""
        if self.mapping is None:
            if self.max_entries:
                self._make()
                self._map_file(self.max_entries * self.entry_size)
        elif self.writable:  # a read-only index's copy holds no descriptor: the pool does not count it
            self.fs.track_map(self)
        return self.mapping

    def unmap(self) -> bool:
        """Drop the mapping for the descriptor pool (False, kept, while the index is in use)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._drop_map()
            return True
        finally:
            self.lock.release()

    # --- entries --------------------------------------------------------------------------------
    def _raw(self, slot: int) -> tuple:
        with self.lock:
            written = self.readable() if self.pending else self.entries
            if slot >= written:  # still buffered (a full disk): read from the buffer
                return self.ENTRY.unpack_from(self.pending, (slot - written) * self.entry_size)
            return self.ENTRY.unpack_from(self.mapped(), slot * self.entry_size)

    def _last_raw(self) -> tuple | None:
        if self.last is None and self.entries:
            self.last = self._raw(self.entries - 1)
        return self.last

    def _put(self, *fields) -> None:
        with self.lock:
            if self.is_full():
                raise KafkaStorageError(f"attempt to append to a full index ({self.entries} entries)",
                                        file=self.path)
            self._write_entry(*fields)

    def _write_entry(self, *fields) -> None:
        """Add the next entry (room already checked); written with the next batch of entries."""
        self.pending += self.ENTRY.pack(*fields)
        self.last = fields
        self.entries += 1
        if len(self.pending) >= self.PENDING_ENTRIES * self.entry_size:
            self.write_pending()

    def write_pending(self) -> None:
        with self.lock:
            if not self.pending:
                return
            self._make()
            start = (self.entries - len(self.pending) // self.entry_size) * self.entry_size
            try:
                with self.fs.handle(self.path, "r+b") as f:
                    self.fs.pwrite(f, bytes(self.pending), start)
            except OSError as exc:
                raise KafkaStorageError(f"cannot write index entries: {exc}", file=self.path,
                                        position=start) from exc
            self.pending.clear()

    def readable(self) -> int:
        """The entries a lookup searches in the mapping (lock held): buffered ones are written first; when that fails
        (a full disk) only those already written, a sparser index, never a wrong answer: reading needs no space."""
        try:
            self.write_pending()
        except KafkaStorageError:
            return self.entries - len(self.pending) // self.entry_size
        return self.entries

    def load_entries(self, data: bytes) -> None:
        """Append many already-ordered packed entries with one write (index rebuilding)."""
        with self.lock:
            self.write_pending()
            count = len(data) // self.entry_size
            self.last = None
            if self.entries + count > self.max_entries:
                raise KafkaStorageError(f"{count} entries do not fit the index ({self.max_entries} slots)",
                                        file=self.path)
            if count:
                self._make()
                with self.fs.handle(self.path, "r+b") as f:
                    self.fs.pwrite(f, data, self.entries * self.entry_size)
                self.entries += count

    def release_handle(self) -> None:
        """Write buffered entries and close the write handle (reopened by the next append)."""
        with self.lock:
            self.write_pending()
            self.fs.release(self.path)

    def _search(self, key: int) -> int:
        with self.lock:
            entries = self.readable() if self.pending else self.entries
            return codec.index_search(self.mapped(), entries, self.entry_size, key) if entries else -1

    def _floor(self, key: int) -> tuple | None:
        """The raw fields of the largest entry whose key <= `key` (None if none), found and read under one lock."""
        return self._floor_slot(key)[1]

    def _floor_slot(self, key: int) -> tuple[int, tuple | None]:
        """The slot of the largest entry whose key <= `key` (-1 if none) and its raw fields, under one lock."""
        with self.lock:
            entries = self.readable() if self.pending else self.entries
            if not entries:
                return -1, None
            mapping = self.mapped()
            slot = codec.index_search(mapping, entries, self.entry_size, key)
            return slot, (self.ENTRY.unpack_from(mapping, slot * self.entry_size) if slot >= 0 else None)

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
    def resize(self, new_size: int) -> bool:
        """Set the file to `new_size` bytes (whole entries), keeping the entries; False when it had that size."""
        with self.lock:
            self.write_pending()
            length = max(self._round(new_size), self.size_in_bytes())
            if self.max_entries * self.entry_size == length:  # (the file's length, mapped or not)
                return False
            if self._unmade:  # (no file, no mapping yet: it is made at its new length)
                self.max_entries = length // self.entry_size
                self._make()
                return True
            old = self.max_entries * self.entry_size
            self._drop_map()
            self.fs.untrack_map(self)
            try:
                with self.fs.handle(self.path, "r+b") as f:
                    self.fs.truncate(f, length)
            except OSError:
                self._map_file(old)  # the file kept its old length: so does the mapping
                raise
            self.max_entries = length // self.entry_size  # mapped again by the next lookup that needs it (`mapped`)
            return True

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.size_in_bytes())

    def truncate_to_entries(self, n: int) -> None:
        with self.lock:
            self.write_pending()
            self.entries = min(self.entries, n)
            self.last = None

    def reset(self, max_index_size: int) -> None:
        """Drop every entry and preallocate again (before a segment is recovered)."""
        with self.lock:
            self.pending.clear()
            self.entries = 0
            self.last = None
            self.resize(max_index_size)

    def flush(self) -> None:
        with self.lock:
            if self.writable:
                self.write_pending()
                if not self._unmade:  # (an index never written holds nothing to make durable)
                    self.fs.fsync_path(self.path)

    def close(self, durable: bool = True) -> None:
        """Release the mapping and the handle, and trim the file to its entries; `durable`: fsync a file it trimmed
        (a clean shutdown's: the trimmed length survives a power loss)."""
        with self.lock:
            if self._unmade:
                self._make_exact(durable)
                return
            self.write_pending()
            self._drop_map()
            self.fs.untrack_map(self)
            self.fs.release(self.path)
            length = self.size_in_bytes()
            if self.writable and self.max_entries * self.entry_size != length:
                try:
                    with self.fs.open(self.path, "r+b") as f:  # (no pooled handle, no mapping: it is closing)
                        self.fs.truncate(f, length)
                        if durable:
                            self.fs.fsync(f)
                except OSError as exc:
                    raise KafkaStorageError(f"cannot trim the index: {exc}", file=self.path) from exc
                self.max_entries = length // self.entry_size

    def _make_exact(self, durable: bool) -> None:
        """Close an index whose file was never made: write the file once, holding just its buffered entries (all the
        entries it has)."""
        self.write_whole(self.fs, self.path, bytes(self.pending), durable)
        self.pending.clear()
        self._unmade = False
        self.max_entries = self.entries

    @staticmethod
    def write_whole(fs: FileSystem, path: str, entries: bytes, durable: bool) -> None:
        """Write an index file holding exactly `entries` (packed), made at once, as a new index is left by its close
        (`durable`: fsynced)."""
        try:
            with fs.open(path, "wb+") as f:
                if entries:
                    fs.write(f, entries)
                if durable:
                    fs.fsync(f)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write the index: {exc}", file=path) from exc

    def rename_to(self, path: str) -> None:
        with self.lock:
            self.write_pending()
            if not self._unmade:
                self.fs.rename(self.path, path)
            self.path = path

    def close_unchanged(self) -> None:
        """Release the mapping without trimming the file (an index about to be rebuilt)."""
        with self.lock:
            self.pending.clear()
            self._drop_map()
            self.fs.untrack_map(self)
            self.fs.release(self.path)

    def validate(self, log_size: int) -> None:
        """Kafka's sanity check, then every entry: keys and values ordered and in range. Kafka trusts
        the entries; here garbage in an index never steers a read."""
        self.sanity_check()
        if self.entries:
            self.write_pending()
            problem = self.check_entries(self.ENTRY.iter_unpack(self.mapped()[:self.entries * self.entry_size]),
                                          log_size)
            if problem:
                raise CorruptIndexError(problem, file=self.path)

    @staticmethod
    @abstractmethod
    def check_entries(entries, log_size: int) -> str | None:
        """What is wrong with the unpacked entries of an index over a `.log` of `log_size` bytes, or None."""

    def sanity_check(self) -> None:
        """Kafka's checks: whole entries, and (per index type) ordered keys past the base offset."""
        length = self.fs.size(self.path)
        if length % self.entry_size:
            raise CorruptIndexError(f"index file size {length} is not a multiple of {self.entry_size}",
                                    file=self.path)
