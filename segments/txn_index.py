"""`.txnindex`: the aborted transactions whose ABORT marker lies in one segment (Kafka's TransactionIndex).

Byte layout: 34-byte big-endian entries `version int16 (0) | producerId int64 | firstOffset int64 |
lastOffset int64 (the ABORT marker) | lastStableOffset int64`, append-only, no header, not
preallocated; the file exists only once an entry was written. Readers take the version from the
high byte (Kafka's quirk) and reject versions > 0; a trailing partial entry is ignored.
Crash policy: appended with write(); fsynced by `flush()`; a recovered segment rebuilds it.
The entries are read from the file once and then kept in memory, in step with every append and truncation
(a read_committed fetch consults the index of every segment it may overlap).
Thread-safety: one writer; readers take the lock.
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

from engine.common.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from engine.segments.fs import FileSystem

ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.fs, self.path, self.base_offset = fs, path, base_offset
        self._lock = threading.Lock()
        self._cached: list[AbortedTxn] | None = None  # the file's entries, once read

    def append(self, txn: AbortedTxn) -> None:
        with self._lock:
            entries = self._entries()
            if entries and txn.last_offset <= entries[-1].last_offset:
                raise InvalidOffsetError(
                    f"aborted transaction ending at {txn.last_offset} does not follow {entries[-1].last_offset}",
                    file=self.path, offset=txn.last_offset)
            try:
                with self.fs.handle(self.path, "ab+") as f:
                    self.fs.write(f, ENTRY.pack(0, txn.producer_id, txn.first_offset, txn.last_offset,
                                              txn.last_stable_offset))
            except OSError as exc:
                self._cached = None  # what reached the file is read back next time
                raise KafkaStorageError(f"cannot append to the transaction index: {exc}", file=self.path) from exc
            entries.append(txn)

    def _entries(self) -> list[AbortedTxn]:
        if self._cached is None:
            self._cached = self._read()
        return self._cached

    def _read(self) -> list[AbortedTxn]:
        if not self.fs.exists(self.path):
            return []
        try:
            data = self.fs.read_bytes(self.path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot read the transaction index: {exc}", file=self.path) from exc
        out = []
        for pos in range(0, len(data) - ENTRY.size + 1, ENTRY.size):
            if data[pos] > 0:
                raise CorruptIndexError(f"transaction index entry version {data[pos]} is not supported",
                                        file=self.path, position=pos)
            _, pid, first, last, lso = ENTRY.unpack_from(data, pos)
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def all(self) -> list[AbortedTxn]:
        with self._lock:
            return list(self._entries())

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound); True if the search may stop here: an
        entry's LSO reached the bound, so no later entry (here or in a later segment) can overlap it."""
        found = []
        for txn in self.all():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose ABORT marker is at or past `offset`."""
        with self._lock:
            keep = [t for t in self._entries() if t.last_offset < offset]
            self._cached = None
            if self.fs.exists(self.path):
                with self.fs.handle(self.path, "r+b") as f:
                    self.fs.truncate(f, len(keep) * ENTRY.size)
            self._cached = keep

    def reset(self) -> None:
        self.truncate_to(-1)

    def sanity_check(self) -> None:
        for txn in self.all():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"aborted transaction at {txn.last_offset} is below the segment base",
                                        file=self.path, offset=txn.last_offset)

    def flush(self) -> None:
        with self._lock:
            if self.fs.exists(self.path):
                self.fs.fsync_path(self.path)

    def release_handle(self) -> None:
        self.fs.release(self.path)

    close = release_handle

    def rename_to(self, path: str) -> None:
        with self._lock:
            if self.fs.exists(self.path):
                self.fs.rename(self.path, path)
            self.path = path

    def size_in_bytes(self) -> int:
        return self.fs.size(self.path) if self.fs.exists(self.path) else 0
