"""The file-system seam: every open, read, write, fsync (and writeback hint, and sync of the whole file system),
rename, truncate, remove and mmap of the storage layers.

`FileSystem` does the real thing with unbuffered files (a returned write() is in the page cache, so it
survives a process crash; only fsync makes it survive a power loss). Long-lived handles (a segment's
append handle, an index's writer) are taken with `handle(path, mode)` from an LRU pool of at most
`fd_budget` descriptors: a handle not in use is closed when the pool needs room and reopened on its
next use, so a directory of any number of partitions holds a bounded number of descriptors. A handle
is pinned while in use (never closed under a writer). Linux fsyncs the file, not the descriptor, so
data written through a handle that was closed since is still made durable by `fsync_path`.
`FaultyFileSystem` is the same with seeded faults: an armed operation fails with EIO or ENOSPC (once,
or until cleared: a full disk), a write can be torn (a prefix lands, then the error), and `power_cut()`
turns the directory tree into what a power loss could leave: each file keeps what was fsynced plus a
random prefix of the rest, and each directory entry created, renamed or removed since its directory
was last fsynced may or may not have happened.
Thread-safety: every method may be called from many threads.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import mmap
import os
import random
import resource
import shutil
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import BinaryIO

from engine.common.errors import KafkaStorageError
from engine.record import codec


HANDLE_MODES = ("ab+", "r+b")  # the modes of pooled handles (`release` looks each up by path)


def _load_libc():
    """The C library, for syncfs and statfs (None where it has no syncfs)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc if hasattr(libc, "syncfs") and hasattr(libc, "statfs") else None
    except OSError:
        return None


_libc = _load_libc()
# The Linux file systems whose syncfs() writes back every dirty page and the journal of that file system (statfs's
# f_type magic numbers). Any other, FUSE above all (sshfs, s3fs, gcsfuse, JuiceFS, rclone, LazyFS: its syncfs
# returns 0 and persists nothing), or one statfs cannot name, gets an fsync of every file and directory instead.
SYNCFS_HONOURED = {0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
                   0xF2F52010: "f2fs"}
SYNC_THREADS = 8  # fsyncs of many files at once, where syncfs cannot be trusted


def file_system_type(path: str) -> int | None:
    """statfs's f_type of the file system holding `path` (None where it cannot be asked)."""
    if _libc is None:
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first word
    if _libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def default_fd_budget() -> int:
    """A quarter of the process's soft descriptor limit, between 16 and 1024."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1024 if soft == resource.RLIM_INFINITY else max(16, min(1024, soft // 4))


def new_lock(reentrant: bool = True):
    """A lock for the segment layer's state: the native one when the Cython core is loaded (engine._native._lock:
    its appender takes it without a Python call), else threading's (RLock, or Lock when not `reentrant`)."""
    if codec.IMPL == "cython":
        return _native_lock()(reentrant)
    return threading.RLock() if reentrant else threading.Lock()


@functools.cache
def _native_lock():
    """engine._native._lock.Lock, imported on first use (the segment layer loads before the Cython core is chosen)."""
    from engine._native._lock import Lock
    return Lock


class _Handle:
    """A pooled file and its pin count; as a context manager (from `FileSystem.handle`) it gives the file and
    unpins it on exit. `evicted` is set (under the pool's lock) once the pool has let it go: it is closed or
    about to be, and `repin` refuses it."""

    __slots__ = ("file", "pins", "lock", "evicted")

    def __init__(self, file: BinaryIO, lock: threading.Lock) -> None:
        self.file, self.pins, self.lock, self.evicted = file, 1, lock, False

    def __enter__(self) -> BinaryIO:
        return self.file

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.pins -= 1

    def repin(self) -> bool:
        """Pin a handle taken before (a writer keeps its last one) without the pool's LRU bookkeeping; False when
        the pool has let it go since (take a new one with `FileSystem.handle`)."""
        with self.lock:
            if self.evicted:
                return False
            self.pins += 1
            return True


class FileSystem:
    """Real file operations."""

    def __init__(self, fd_budget: int | None = None) -> None:
        self.fd_budget = fd_budget or default_fd_budget()
        # (path, mode) -> _Handle; ("map", id) -> owner; public for the native reader, which tests it as track_map does
        self.handles: OrderedDict[tuple, object] = OrderedDict()
        self._pool_lock = new_lock(reentrant=False)
        self._local = threading.local()  # `deferred_syncs` of this thread: None outside one, else the paths owed
        self._syncfs_by_device: dict[int, bool] = {}

    # --- the descriptor pool ------------------------------------------------------------------
    def handle(self, path: str, mode: str) -> _Handle:
        """A pooled handle on `path` ("ab+" appends, "r+b" positional writes), pinned until the end of the
        `with` block it must be used in."""
        if mode not in HANDLE_MODES:
            raise ValueError(f"a pooled handle's mode is one of {HANDLE_MODES}, not {mode!r}")
        key = (path, mode)
        with self._pool_lock:
            entry = self.handles.get(key)
            if entry is not None:
                self.handles.move_to_end(key)
                entry.pins += 1
                return entry
        return self._pool(key, self.open(path, mode))

    def adopt(self, path: str, mode: str, file: BinaryIO) -> _Handle:
        """Put `file`, just opened on `path` in `mode` (one of HANDLE_MODES) by its owner, into the pool, unpinned:
        the handle `handle()` gives next (a new segment's `.log` is created and appended to through one descriptor)."""
        entry = self._pool((path, mode), file)
        with self._pool_lock:
            entry.pins -= 1
        return entry

    def _pool(self, key: tuple[str, str], file: BinaryIO) -> _Handle:
        """`file`, opened on `key`, pooled and pinned (unless another thread pooled one meanwhile: theirs, and `file`
        closed); the pool trimmed to its budget."""
        entry = _Handle(file, self._pool_lock)
        with self._pool_lock:
            raced = self.handles.get(key)
            if raced is None:
                self.handles[key] = entry
            else:  # another thread opened it meanwhile: use theirs
                raced.pins += 1
                entry.file.close()
                entry = raced
            victims = self._victims()
        self._close_all(victims)
        return entry

    def _victims(self, keep: tuple | None = None) -> list:
        """Unpinned handles and mappings to close, oldest first, until the pool is within budget (lock held); never
        `keep`, the mapping being used right now."""
        chosen = []
        excess = len(self.handles) - self.fd_budget
        for key, entry in self.handles.items():  # oldest first, and only as far as needed
            if excess <= 0:
                break
            if key != keep and (not isinstance(entry, _Handle) or entry.pins == 0):
                chosen.append(key)
                excess -= 1
        return [self._evict(key) for key in chosen]

    def _evict(self, key: tuple):
        """Take an entry out of the pool (lock held); a handle is marked so that `repin` refuses it."""
        entry = self.handles.pop(key)
        if isinstance(entry, _Handle):
            entry.evicted = True
        return entry

    def _close_all(self, victims: list) -> None:
        for v in victims:
            if isinstance(v, _Handle):
                v.file.close()
            elif not v.unmap():  # busy right now: it stays, counted, and goes another time
                with self._pool_lock:
                    self.handles[("map", id(v))] = v

    def track_map(self, owner) -> None:
        """`owner` holds a mapping, which holds a descriptor (CPython keeps a duplicate); it counts against the
        budget, and `owner.unmap()` (False when busy) drops it when the pool needs room (the owner maps again on its
        next use). Each use moves it to the young end once the pool is half full; below that no room is needed
        soon, and a mapping already counted keeps its place (a read's mappings then cost no pool lock)."""
        key = ("map", id(owner))
        if 2 * len(self.handles) < self.fd_budget and key in self.handles:
            return
        with self._pool_lock:
            if key in self.handles:
                self.handles.move_to_end(key)
                return
            self.handles[key] = owner
            victims = self._victims(keep=key)
        self._close_all(victims)

    def untrack_map(self, owner) -> None:
        with self._pool_lock:
            self.handles.pop(("map", id(owner)), None)

    def release(self, path: str) -> None:
        """Close the pooled handles on `path` (before it is renamed, replaced or removed)."""
        handles, files = self.handles, []
        with self._pool_lock:
            for mode in HANDLE_MODES:
                entry = handles.get((path, mode))
                if entry is not None and entry.pins == 0:
                    files.append(self._evict((path, mode)))
        if files:
            self._close_all(files)

    def open_handles(self) -> int:
        """Descriptors the pool holds now (handles and mappings)."""
        with self._pool_lock:
            return len(self.handles)

    def close_pool(self) -> None:
        """Close every unpinned pooled handle (mappings stay with their owners)."""
        with self._pool_lock:
            files = [self._evict(k) for k in list(self.handles)
                     if isinstance(self.handles[k], _Handle) and self.handles[k].pins == 0]
        self._close_all(files)

    def direct_writes(self) -> bool:
        """Whether a native writer may write a pooled handle's descriptor itself, bypassing `write`/`writev`: yes
        unless a subclass (fault injection, tests) replaces them."""
        cls = type(self)
        return cls.write is FileSystem.write and cls.writev is FileSystem.writev

    def direct_reads(self) -> bool:
        """Whether a native reader may pread a pooled handle's descriptor itself, bypassing `pread_into`: yes unless a
        subclass (fault injection, tests) replaces it."""
        return type(self).pread_into is FileSystem.pread_into

    # --- single operations ----------------------------------------------------------------------
    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        """Open unbuffered ("rb", "r+b", "ab", "ab+", "wb+")."""
        return open(path, mode, buffering=0)

    def read_bytes(self, path: str) -> bytes:
        with self.open(path, "rb") as f:
            return f.read()

    def write(self, f: BinaryIO, data) -> int:
        done = f.write(data)
        if done == len(data):
            return done
        view = memoryview(data).cast("B")
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
        if not self.owes_sync(f.name):
            os.fsync(f.fileno())

    def owes_sync(self, path) -> bool:
        """Inside `deferred_syncs` on this thread: note that `path` owes a sync (True), instead of syncing now (the
        caller then need not even open it)."""
        owed = getattr(self._local, "owed", None)
        if owed is None or not isinstance(path, str):
            return False
        owed.add(path)
        return True

    @contextmanager
    def deferred_syncs(self, path: str):
        """Within the block, on this thread, an fsync of a file or a directory only notes that one is owed; leaving
        the block normally makes them all durable at once (`sync_paths`: closing many logs, every fsync of each in
        turn would cost more). A block inside another leaves the syncing to the outer one."""
        local = self._local
        if getattr(local, "owed", None) is not None:
            yield
            return
        local.owed = set()
        try:
            yield
        except BaseException:
            local.owed = None
            raise
        owed, local.owed = local.owed, None
        if owed:
            self.sync_paths(owed, path)

    def syncfs_honoured(self, path: str) -> bool:
        """Whether syncfs() of the file system holding `path` makes its files durable (SYNCFS_HONOURED), decided once
        per device."""
        device = os.stat(path).st_dev
        known = self._syncfs_by_device.get(device)
        if known is None:
            known = self._syncfs_by_device[device] = file_system_type(path) in SYNCFS_HONOURED
        return known

    def sync_paths(self, paths, root: str) -> None:
        """Make the files and directories `paths` durable: one syncfs of `root`'s file system where it is honoured,
        else an fsync of each, SYNC_THREADS at a time (files first, then the directories naming them). A path gone
        since (a log deleted meanwhile) is skipped."""
        if self.syncfs_honoured(root):
            self.sync_filesystem(root)
            return
        directories = {p for p in paths if os.path.isdir(p)}
        files = [p for p in paths if p not in directories]
        for group, sync in ((files, self.fsync_path), (list(directories), self.fsync_dir)):
            def one(p: str, sync=sync) -> None:
                with suppress(FileNotFoundError):
                    sync(p)
            if len(group) <= 1:
                for p in group:
                    one(p)
                continue
            with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(group)),
                                    thread_name_prefix="kafkalog-fsync") as pool:
                list(pool.map(one, group))

    def start_writeback(self, f: BinaryIO) -> None:
        """Begin writing `f`'s dirty pages to the device without waiting (with the native core, on Linux): the fsync
        that must still follow has less left to wait for. A hint only: without the native core it does nothing."""
        if codec.IMPL == "cython":
            from engine._native._segment_appender import start_writeback
            start_writeback(f.fileno())

    def fsync_path(self, path: str) -> None:
        """fsync the file at `path` through a pooled handle (none taken inside `deferred_syncs`)."""
        if self.owes_sync(path):
            return
        with self.handle(path, "r+b") as f:
            self.fsync(f)

    def truncate(self, f: BinaryIO, size: int) -> None:
        f.truncate(size)

    def rename(self, src: str, dst: str) -> None:
        self.release(src)
        self.release(dst)
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        self.release(path)
        os.remove(path)

    def rmtree(self, path: str) -> None:
        with self._pool_lock:
            inside = [k for k in self.handles if k[0] != "map" and k[0].startswith(path + os.sep)]
        for key in inside:
            self.release(key[0])
        shutil.rmtree(path)

    def fsync_dir(self, path: str) -> None:
        if self.owes_sync(path):
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mmap(self, f: BinaryIO, length: int, writable: bool, offset: int = 0) -> mmap.mmap:
        return mmap.mmap(f.fileno(), length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ,
                         offset=offset)

    def pread(self, f: BinaryIO, size: int, offset: int) -> bytes:
        """`size` bytes at `offset` (fewer only at the end of the file)."""
        return os.pread(f.fileno(), size, offset)

    def pread_into(self, f: BinaryIO, buffer, offset: int) -> int:
        """Fill the writable `buffer` from `offset`: the bytes read (fewer only at the end of the file)."""
        return os.preadv(f.fileno(), [buffer], offset)

    def pwrite(self, f: BinaryIO, data: bytes, offset: int) -> None:
        """Write `data` at `offset` (index entries)."""
        if os.pwrite(f.fileno(), data, offset) != len(data):
            raise OSError(errno.EIO, f"short pwrite to {f.name}")

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def subdirectories(self, path: str) -> list[str]:
        """The names of the directories in `path` (from the directory's own entries: no stat per entry)."""
        with os.scandir(path) as entries:
            return [e.name for e in entries if e.is_dir()]

    def sync_filesystem(self, path: str) -> None:
        """Make everything written to the file system holding `path` durable, in one call (Linux's syncfs; a
        sync of every file system elsewhere): for many new files at once, where an fsync of each costs more."""
        if _libc is None:
            os.sync()
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _libc.syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"syncfs: {os.strerror(code)}", path)
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def set_mtime_ms(self, path: str, mtime_ms: int) -> None:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))

    def atomic_write(self, path: str, data: bytes) -> None:
        """Write `path` as Kafka writes checkpoints: tmp file, fsync, rename, fsync the directory."""
        self._replace(path, data, True)

    def replace_unsynced(self, path: str, data: bytes) -> None:
        """`atomic_write` without its fsyncs: a reader sees the old file or the new one; a power loss may leave
        either, or an empty one."""
        self._replace(path, data, False)

    def write_checked(self, path: str, data: bytes) -> None:
        """Write `path` whole in place, fsync it and its directory: as Kafka writes a producer snapshot. No tmp file
        and rename (a rename fewer for the file system's journal): a crash can leave the file torn, so only for a file
        whose reader checks it (a CRC) and falls back to something else when it fails."""
        try:
            with self.open(path, "wb+") as f:
                self.write(f, data)
                self.fsync(f)
            self.fsync_dir(os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            raise KafkaStorageError(f"cannot write: {exc}", file=path) from exc

    def _replace(self, path: str, data: bytes, sync: bool) -> None:
        tmp = path + ".tmp"
        try:
            with self.open(tmp, "wb+") as f:
                self.write(f, data)
                if sync and not self.owes_sync(path):  # (deferred: owed under the name it will have)
                    self.fsync(f)
            self.rename(tmp, path)
            if sync:
                self.fsync_dir(os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise KafkaStorageError(f"cannot write: {exc}", file=path) from exc

    def lock(self, path: str) -> BinaryIO:
        """Hold an exclusive POSIX record lock on `path` (as Java's FileChannel.lock); BlockingIOError if another
        process holds it, any other OSError if the file cannot be opened or locked."""
        f = open(path, "a+b")
        try:
            fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            f.close()
            if exc.errno in (errno.EACCES, errno.EAGAIN):  # POSIX lets F_SETLK report a held lock either way
                raise BlockingIOError(exc.errno, "held by another process", path) from None
            raise
        return f


OPS = ("open", "write", "fsync", "rename", "truncate", "remove", "mmap", "makedirs")


class FaultyFileSystem(FileSystem):
    """FileSystem with seeded, armable faults and a power-cut model, for crash and fault tests."""

    def __init__(self, seed: int = 0, fd_budget: int | None = None) -> None:
        super().__init__(fd_budget)
        self.rng = random.Random(seed)
        self._armed: dict[str, list] = {}          # op -> [calls to let pass, tear, errno, persistent]
        self._lock = threading.RLock()
        self._durable: dict[int, bytearray] = {}   # inode -> its content as of its last fsync
        self._dirty: dict[int, list[tuple[int, int]]] = {}  # inode -> byte ranges written since
        self._entries: dict[str, dict[str, int]] = {}  # directory -> {name: inode} as of its last fsync

    # --- faults -----------------------------------------------------------------------------------
    def arm(self, op: str, after: int = 0, tear: bool = False, error: int = errno.EIO,
            persistent: bool = False) -> None:
        """Make the (after+1)-th next call of `op` fail with `error` (every later call too when `persistent`,
        until `clear()`); a failing write lands a random prefix first when `tear`."""
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}; one of {OPS}")
        self._armed[op] = [after, tear, error, persistent]

    def clear(self, op: str | None = None) -> None:
        """Disarm `op` (every operation when None): the disk has room again, the device is back."""
        if op is None:
            self._armed.clear()
        else:
            self._armed.pop(op, None)

    def _trip(self, op: str) -> tuple[int, bool]:
        """(errno, tear) when this call of `op` must fail, else (0, False)."""
        with self._lock:
            armed = self._armed.get(op)
            if armed is None:
                return 0, False
            if armed[0] > 0:
                armed[0] -= 1
                return 0, False
            if not armed[3]:
                del self._armed[op]
            return armed[2], armed[1]

    def _check(self, op: str, what: str) -> None:
        code = self._trip(op)[0]
        if code:
            raise OSError(code, f"injected {os.strerror(code)} in {what}")

    # --- durability bookkeeping -----------------------------------------------------------------
    def _track_dir(self, directory: str) -> None:
        """Remember a directory's entries (on its first touch, and at each of its fsyncs); a file the seam never
        wrote to is durable as it is, one it wrote to only as far as its own last fsync."""
        directory = os.path.abspath(directory)
        if directory in self._entries or not os.path.isdir(directory):
            return
        entries = {}
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                ino = os.stat(path).st_ino
                entries[name] = ino
                if ino not in self._durable and ino not in self._dirty:  # not written through the seam:
                    with open(path, "rb") as f:                          # what is there was there before
                        self._durable[ino] = bytearray(f.read())
            elif os.path.isdir(path):
                entries[name] = -1
        self._entries[directory] = entries

    def _touch(self, path: str) -> None:
        with self._lock:
            self._track_dir(os.path.dirname(os.path.abspath(path)))

    def _written(self, f: BinaryIO, start: int, end: int) -> None:
        ino = os.fstat(f.fileno()).st_ino
        with self._lock:
            self._dirty.setdefault(ino, []).append((start, end))

    # --- operations -------------------------------------------------------------------------------
    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        self._check("open", f"open {path}")
        if mode != "rb":
            self._touch(path)
        return super().open(path, mode)

    def write(self, f: BinaryIO, data) -> int:
        view = memoryview(data).cast("B")
        start = os.fstat(f.fileno()).st_size if f.mode.startswith("a") else f.tell()
        code, tear = self._trip("write")
        if code:
            if tear and len(view):
                cut = self.rng.randrange(len(view))
                super().write(f, view[:cut])
                self._written(f, start, start + cut)
            raise OSError(code, f"injected {os.strerror(code)} in a write to {f.name}")
        done = super().write(f, view)
        self._written(f, start, start + done)
        return done

    def writev(self, f: BinaryIO, buffers: list, total: int) -> None:
        self.write(f, b"".join(bytes(memoryview(b).cast("B")) for b in buffers))

    def pread(self, f: BinaryIO, size: int, offset: int) -> bytes:
        """`size` bytes at `offset` (fewer only at the end of the file)."""
        return os.pread(f.fileno(), size, offset)

    def pwrite(self, f: BinaryIO, data: bytes, offset: int) -> None:
        self._check("write", f"pwrite to {f.name}")
        super().pwrite(f, data, offset)
        self._written(f, offset, offset + len(data))

    def fsync(self, f: BinaryIO) -> None:
        self._check("fsync", f"fsync of {f.name}")
        if self.owes_sync(f.name):
            return  # (durable once the deferred syncs are made, not now)
        super().fsync(f)
        st = os.fstat(f.fileno())
        with self._lock:
            durable = self._durable.setdefault(st.st_ino, bytearray())
            ranges = self._dirty.pop(st.st_ino, [])
            del durable[st.st_size:]
            if len(durable) < st.st_size:
                ranges.append((len(durable), st.st_size))
                durable.extend(bytes(st.st_size - len(durable)))
            for start, end in ranges:
                end = min(end, st.st_size)
                if end > start:
                    durable[start:end] = os.pread(f.fileno(), end - start, start)

    def fsync_dir(self, path: str) -> None:
        self._check("fsync", f"fsync of {path}")
        if self.owes_sync(path):
            return  # (durable once the deferred syncs are made, not now)
        super().fsync_dir(path)
        directory = os.path.abspath(path)
        with self._lock:
            self._entries.pop(directory, None)
            self._track_dir(directory)

    def sync_filesystem(self, path: str) -> None:
        self._check("fsync", f"sync of the file system of {path}")
        super().sync_filesystem(path)
        with self._lock:  # every tracked directory's entries and every written file are durable as they are now
            for directory in list(self._entries):
                self._entries.pop(directory)
                self._track_dir(directory)
            for directory, entries in self._entries.items():
                for name, ino in entries.items():
                    if ino in self._dirty:
                        with open(os.path.join(directory, name), "rb") as f:
                            self._durable[ino] = bytearray(f.read())
                        del self._dirty[ino]

    def truncate(self, f: BinaryIO, size: int) -> None:
        self._check("truncate", f"truncate of {f.name}")
        super().truncate(f, size)
        self._written(f, size, size)

    def rename(self, src: str, dst: str) -> None:
        self._check("rename", f"rename of {src}")
        self._touch(src)
        self._touch(dst)
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self._check("remove", f"remove of {path}")
        self._touch(path)
        super().remove(path)

    def rmtree(self, path: str) -> None:
        self._check("remove", f"remove of {path}")
        self._touch(path)
        super().rmtree(path)

    def makedirs(self, path: str) -> None:
        self._check("makedirs", f"mkdir of {path}")
        self._touch(path)
        super().makedirs(path)

    def mmap(self, f: BinaryIO, length: int, writable: bool, offset: int = 0) -> mmap.mmap:
        self._check("mmap", f"mmap of {f.name}")
        return super().mmap(f, length, writable, offset)

    # --- power loss -------------------------------------------------------------------------------
    def power_cut(self) -> list[str]:
        """Leave the tracked tree as a power loss could: per directory entry, the state as of the directory's
        last fsync or the current one (a coin each); per file, its fsynced bytes plus a random prefix of
        the rest. Every pooled handle is closed first. Returns the paths changed, for the test's log."""
        self.close_pool()
        changed = []
        with self._lock:
            for directory, durable in sorted(self._entries.items()):
                if not os.path.isdir(directory):
                    continue
                current = {n: (os.stat(os.path.join(directory, n)).st_ino
                               if os.path.isfile(os.path.join(directory, n)) else -1)
                           for n in os.listdir(directory)}
                for name in sorted(set(durable) | set(current)):
                    path = os.path.join(directory, name)
                    old, new = durable.get(name), current.get(name)
                    if old == new or -1 in (old, new):
                        chosen = new
                    else:
                        chosen = old if self.rng.random() < 0.5 else new
                    if chosen is None:
                        if new is not None:  # created since the last fsync of its directory: it never was
                            os.remove(path)
                            changed.append(path)
                    elif chosen != new:
                        with open(path, "wb") as f:
                            f.write(self._durable.get(chosen, b""))
                        changed.append(path)
                    elif chosen != -1 and self._cut_file(path, chosen):
                        changed.append(path)
            self._durable.clear()
            self._dirty.clear()
            self._entries.clear()
        return changed

    def _cut_file(self, path: str, ino: int) -> bool:
        """Keep the fsynced bytes and a random prefix of what was written since; True if the file changed."""
        durable = self._durable.get(ino, b"")
        with open(path, "rb") as f:
            current = f.read()
        if not self._dirty.get(ino) and current == durable:
            return False
        keep = len(durable) + self.rng.randint(0, max(0, len(current) - len(durable)))
        survived = bytearray(current[:keep])
        survived[:len(durable)] = durable[:keep]  # in-place rewrites that were not fsynced are lost
        if bytes(survived) == current:
            return False
        with open(path, "wb") as f:
            f.write(survived)
        return True

    def lose_unsynced(self) -> dict[str, int]:
        """A power cut in which every file keeps exactly its fsynced bytes; returns the bytes cut per file."""
        before = {}
        with self._lock:
            for directory in self._entries:
                for name in os.listdir(directory) if os.path.isdir(directory) else ():
                    path = os.path.join(directory, name)
                    if os.path.isfile(path):
                        before[path] = os.path.getsize(path)
            rng, self.rng = self.rng, _Zero()
        try:
            self.power_cut()
        finally:
            self.rng = rng
        return {p: n - os.path.getsize(p) for p, n in before.items()
                if os.path.exists(p) and os.path.getsize(p) < n}


class _Zero(random.Random):
    """A generator whose every choice is the smallest: nothing unsynced survives, every entry reverts."""

    def randint(self, a: int, b: int) -> int:
        return a

    def random(self) -> float:
        return 0.0
