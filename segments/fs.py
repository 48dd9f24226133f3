"""The file-system seam: every open, write, pwrite, fsync, rename, truncate and mmap of the log layer.

`FileSystem` does the real thing with unbuffered files (a returned write() is in the page
cache, so it survives a process crash; only fsync makes it survive a power loss).
`FaultyFileSystem` is the same with seeded faults: an armed operation fails with EIO, a write
can be torn (a prefix lands, then the error), and `lose_unsynced()` truncates every file the
seam wrote back to its last fsync, as a power cut would. Thread-safe where the OS is.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import random
import threading
from typing import BinaryIO


class FileSystem:
    """Real file operations."""

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        """Open unbuffered ("rb", "r+b", "ab+", "wb+")."""
        return open(path, mode, buffering=0)

    def write(self, f: BinaryIO, data) -> int:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += f.write(view[done:])
        return done

    def writev(self, f: BinaryIO, buffers: list, total: int) -> None:
        """Write `total` bytes from the buffers, in order, without joining them."""
        n = os.writev(f.fileno(), buffers)
        if n == total:
            return
        views = [memoryview(b).cast("B") for b in buffers]  # a short write: resume where it stopped
        while views:
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views:
                views[0] = views[0][n:]
                n = os.writev(f.fileno(), views)

    def fsync(self, f: BinaryIO) -> None:
        os.fsync(f.fileno())

    def truncate(self, f: BinaryIO, size: int) -> None:
        f.truncate(size)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mmap(self, f: BinaryIO, length: int, writable: bool, offset: int = 0) -> mmap.mmap:
        return mmap.mmap(f.fileno(), length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ,
                         offset=offset)

    def pwrite(self, f: BinaryIO, data: bytes, offset: int) -> None:
        """Write `data` at `offset` (index entries)."""
        if os.pwrite(f.fileno(), data, offset) != len(data):
            raise OSError(errno.EIO, f"short pwrite to {f.name}")

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def atomic_write(self, path: str, data: bytes) -> None:
        """Write `path` as Kafka writes checkpoints: tmp file, fsync, rename, fsync the directory."""
        tmp = path + ".tmp"
        with self.open(tmp, "wb+") as f:
            self.write(f, data)
            self.fsync(f)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(os.path.abspath(path)))

    def lock(self, path: str) -> BinaryIO:
        """Hold an exclusive POSIX record lock on `path` (as Java's FileChannel.lock); BlockingIOError if taken."""
        f = open(path, "a+b")
        try:
            fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise
        return f


class FaultyFileSystem(FileSystem):
    """FileSystem with seeded, armable faults for crash tests."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self._armed: dict[str, list] = {}
        self._synced: dict[str, int] = {}
        self._lock = threading.Lock()

    def arm(self, op: str, after: int = 0, tear: bool = False) -> None:
        """Make the (after+1)-th next call of `op` ("write", "fsync", "rename", "truncate", "open") fail."""
        self._armed[op] = [after, tear]

    def _trip(self, op: str) -> tuple[bool, bool]:
        with self._lock:
            armed = self._armed.get(op)
            if armed is None:
                return False, False
            if armed[0] > 0:
                armed[0] -= 1
                return False, False
            del self._armed[op]
            return True, armed[1]

    @staticmethod
    def _eio(what: str) -> OSError:
        return OSError(errno.EIO, f"injected I/O error in {what}")

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        if self._trip("open")[0]:
            raise self._eio("open")
        f = super().open(path, mode)
        if mode != "rb":
            with self._lock:
                self._synced.setdefault(os.path.abspath(path), os.path.getsize(path) if "w" not in mode else 0)
        return f

    def write(self, f: BinaryIO, data) -> int:
        fail, tear = self._trip("write")
        if fail:
            if tear and len(data):
                super().write(f, memoryview(data)[:self.rng.randrange(len(data))])
            raise self._eio("write")
        return super().write(f, data)

    def writev(self, f: BinaryIO, buffers: list, total: int) -> None:
        self.write(f, b"".join(bytes(memoryview(b)) for b in buffers))

    def fsync(self, f: BinaryIO) -> None:
        if self._trip("fsync")[0]:
            raise self._eio("fsync")
        super().fsync(f)
        with self._lock:
            self._synced[os.path.abspath(f.name)] = os.fstat(f.fileno()).st_size

    def pwrite(self, f: BinaryIO, data: bytes, offset: int) -> None:
        if self._trip("write")[0]:
            raise self._eio("pwrite")
        super().pwrite(f, data, offset)

    def truncate(self, f: BinaryIO, size: int) -> None:
        if self._trip("truncate")[0]:
            raise self._eio("truncate")
        super().truncate(f, size)
        with self._lock:
            key = os.path.abspath(f.name)
            self._synced[key] = min(self._synced.get(key, size), size)

    def rename(self, src: str, dst: str) -> None:
        if self._trip("rename")[0]:
            raise self._eio("rename")
        super().rename(src, dst)
        with self._lock:
            if os.path.abspath(src) in self._synced:
                self._synced[os.path.abspath(dst)] = self._synced.pop(os.path.abspath(src))

    def lose_unsynced(self) -> dict[str, int]:
        """Truncate every file written through the seam to its last fsynced size; return what was cut."""
        cut = {}
        with self._lock:
            for path, synced in self._synced.items():
                if os.path.exists(path) and os.path.getsize(path) > synced:
                    cut[path] = os.path.getsize(path) - synced
                    os.truncate(path, synced)
        return cut
