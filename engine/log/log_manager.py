"""A log directory: its partitions' logs and the files at its root (Kafka's LogManager).

Lazy partitions: opening reads the root files and the partition directories' names, and loads no log: each is a
LogSlot (engine.log.log_slot) holding its checkpointed offsets until its first `load()` (checking its topic id
against `topic_ids` when it was found on open). Housekeeping (flush, retention, the cleaner, checkpoints) follows the loaded
logs; a checkpoint keeps the unloaded ones' entries as read and is rewritten only when it would change.

Root files: `.lock` (held with a POSIX record lock while open), `meta.properties` (Java
Properties text), `.kafka_cleanshutdown` (its presence means the last close was clean; deleted as
soon as it is seen), and the offset checkpoints `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint` (only starts above the first segment base) and
`replication-offset-checkpoint` (high watermarks), and the cleaner's `cleaner-offset-checkpoint`
(engine.log.log_cleaner).
Crash policy: checkpoints are atomic (tmp + fsync + rename + dir fsync); an unreadable one is
treated as absent (full recovery). New partition directories are made durable by one sync of the file system
(`sync_created`, at the end of the request that created them). The clean-shutdown marker is written last on close,
after every loaded log is closed (their fsyncs made one sync of the file system) and every checkpoint written, and
only when no log is left that an unclean shutdown left unloaded (unrecovered) or that failed to load.
Deleted logs (Kafka's asyncDelete): a deleted log is closed and its directory renamed `<dir>.<id>-delete` at once;
the background thread removes it once the log's `file.delete.delay.ms` has passed (Kafka's kafka-delete-logs task), so
deleting a topic does not wait for the kernel to drop its pages. `close()` removes the ones still waiting; a crash
leaves them, and the next open removes every `-delete` directory it finds. Without the background thread a deleted
log's directory is removed at once.
Threads: one background thread runs the flush (`flush.ms`), retention, checkpoint and delete tasks on the
injected clock, and the log cleaner has its own; after an unclean shutdown RECOVERY_THREADS load the logs no one used
yet; all stop on `close()`. Public methods are thread-safe; a log loads under its own lock, then joins the loaded ones
under the manager's.
"""
from __future__ import annotations

import json
import logging
import operator
import os
import threading
import time
import uuid
from typing import Callable, NamedTuple

from engine.common.clock import Clock, SystemClock
from engine.common.closing import Steps
from engine.common.health import Health, TaskFailure
from engine.common.errors import (
    InvalidLogDirectoryError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    LogDirectoryLockedError,
    UnknownTopicOrPartitionError,
)
from engine.log.log_cleaner import CleanerConfig, LogCleaner
from engine.segments import names, offset_checkpoint, partition_metadata
from engine.segments.cleaner import CleanerStats
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.log.log_slot import Loading, LogSlot
from engine.log.unified_log import UnifiedLog

log = logging.getLogger("kafkalog.log_manager")



class StrayPartition(NamedTuple):
    """A partition directory set aside as `-stray` (its records kept, never served), why, and since when (the
    manager's clock, ms: when it set it aside or found it on open)."""

    path: str
    topic: str
    partition: int
    why: str
    since_ms: int


_RECOVERY_POINT = operator.attrgetter("recovery_point")
_HIGH_WATERMARK = operator.attrgetter("high_watermark")


def _LOG_START(lg: UnifiedLog) -> int | None:
    """A loaded log's entry in `log-start-offset-checkpoint`: only a start above its first segment's base."""
    return lg.log_start_offset if lg.log_start_offset > lg.local.segments.first.base_offset else None


LOCK_FILE = ".lock"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
PROBE_FILE = ".kafkalog-write-probe"  # `run_storage_tasks` writes it and removes it at once
PROBE_BYTES = 1 << 20  # room for one default-sized produce request (max.request.size)
RECOVERY_THREADS = 2  # the pool that loads, and so recovers, an unclean shutdown's logs in the background
_JUST_MADE = (partition_metadata.FILE,)  # what a partition directory create_slot made holds until its log loads

_held: set[str] = set()             # directories this process has open (POSIX locks are per process)
_held_lock = threading.Lock()


class LogManager:
    """One log directory (see the module docstring): its logs, loaded or not, the root files and checkpoints, the
    background thread's tasks, deletion, and the stray directories set aside. Every one of those reads or changes
    the same map of logs and the same checkpoints under one lock, and the close must see them all at once to decide
    the clean-shutdown marker, which is why it stays one class of about 630 lines, as Kafka's LogManager is one."""

    RETENTION_CHECK_MS = 300_000
    DELETE_RETRY_MS = 1_000  # how soon a deleted log's directory that could not be removed is tried again
    FLUSH_CHECK_MS = 1_000
    CHECKPOINT_MS = 60_000
    HW_CHECKPOINT_MS = 5_000  # replica.high.watermark.checkpoint.interval.ms: how soon other processes see a new HW

    def __init__(self, directory: str, *, fs: FileSystem | None = None, clock: Clock | None = None,
                 configs=None, background: bool = True, log_options: dict | None = None,
                 tasks: dict | None = None, node_id: int = 0, cleaner_config: CleanerConfig | None = None,
                 hw_checkpoint_interval_ms: int | None = None,
                 topic_ids: Callable[[str], str | None] | None = None, start_recovery: bool = True) -> None:
        """Open (creating if needed) `directory`. `configs(topic) -> LogConfig` gives each topic's config and
        `topic_ids(topic)` its id, which a log found on open must have in its partition.metadata when it loads;
        without `start_recovery` the owner calls `start_recovery()` itself;
        logs are `UnifiedLog(..., **log_options)`; `tasks` adds {name: (interval_ms, callable)} to the
        background thread's schedule; `cleaner_config` is the log cleaner's."""
        self.dir = os.path.abspath(directory)
        self.fs = fs or FileSystem()
        self.clock = clock or SystemClock()
        self._configs = configs or (lambda topic: LogConfig())
        self._topic_ids = topic_ids or (lambda topic: None)
        self._start_recovery = start_recovery
        # `on_loaded(tp, log)` runs as each log loads, before anyone else sees it (the broker hosting the logs sets it)
        self.on_loaded: Callable[[tuple[str, int], UnifiedLog], None] | None = None
        self._log_options = dict(log_options or {})
        self._tasks = {"flush": (self.FLUSH_CHECK_MS, self.flush_due_logs),
                       "retention": (self.RETENTION_CHECK_MS, self.cleanup_logs),
                       "checkpoint": (self.CHECKPOINT_MS, self.checkpoint_recovery_points),
                       "hw": (hw_checkpoint_interval_ms or self.HW_CHECKPOINT_MS, self.checkpoint_high_watermarks),
                       "delete-logs": (self.DELETE_RETRY_MS, self.delete_due_logs),
                       **(tasks or {})}
        self._pending_deletes: list[tuple[int, str]] = []  # (due ms, directory) of deleted logs not yet removed
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], LogSlot] = {}
        self._failures: dict[str, KafkaStorageError] = {}  # background tasks failing now, by name
        self.health = Health(self.dir, log)  # and what the log and `Engine.health()` say of them
        self.repairs: list[str] = []  # what opening the directory found wrong at its root, in words
        self._strays: dict[str, StrayPartition] = {}  # the `-stray` directories in it, by path
        self._closed = False
        self._unsynced: set[str] = set()  # what the logs created since the last sync_created() wrote
        self._written: dict[str, dict] = {}  # each checkpoint's entries as this manager last wrote them
        self.node_id = node_id
        self._background = background
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.cleaner: LogCleaner | None = None
        self.fs.makedirs(self.dir)
        self._lock_file = self._acquire_lock()
        try:
            self._ensure_meta_properties()
            marker = os.path.join(self.dir, CLEAN_SHUTDOWN)
            self.clean_shutdown = self.fs.exists(marker)
            if self.clean_shutdown:
                self.fs.remove(marker)
                self.fs.fsync_dir(self.dir)
            self._load_logs()
        except BaseException:
            for slot in self._logs.values():
                slot.close()
            self._release_lock()
            raise
        self._start_background()

    def _start_background(self) -> None:
        self.cleaner = LogCleaner(self.dir, self.fs, self.clock, self.slots, self.cleaner_config, self._background,
                                  self._loaded_map)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set to make the thread look at its schedule again (a deletion, close)
        self._thread = None
        self._recovering: list[threading.Thread] = []
        if self._background:
            self._thread = threading.Thread(target=self._run, name=f"kafkalog-log-manager:{self.dir}", daemon=True)
            self._thread.start()
        if self._start_recovery:
            self.start_recovery()

    def start_recovery(self) -> None:
        """After an unclean shutdown, with background threads: start the recovery threads (once per open or
        restart). An owner that gives its logs roles first (the engine) starts them after that, so that no log loads
        before its partition knows it is loading."""
        if self._background and not self.clean_shutdown and self._logs and not self._recovering:
            waiting = iter(self.slots().values())
            self._recovering = [threading.Thread(target=self._recover, args=(waiting,), daemon=True,
                                                 name=f"kafkalog-log-recovery-{i}:{self.dir}")
                                for i in range(RECOVERY_THREADS)]
            for thread in self._recovering:
                thread.start()

    def _recover(self, waiting) -> None:
        """A recovery thread after an unclean shutdown: load (and so recover) the logs not loaded yet, one at a time,
        until none is left or the manager stops. A log that fails to load is left to its first use, which raises."""
        for slot in waiting:  # (the threads share one iterator: each log is taken once)
            if self._stop.is_set():
                return
            try:
                slot.load_if_open()
            except Exception as exc:  # noqa: BLE001 - its first user gets the error; this thread goes on
                log.warning("could not recover %s in the background (its first use will try again): %s", slot.dir,
                            exc)

    def recover_all(self) -> None:
        """Load every log an unclean shutdown left and no one loaded yet, in this thread (what the recovery threads
        would do): after it, every log's recovery is done and reported."""
        for slot in self.slots().values():
            slot.load_if_open()

    def _stop_background(self) -> None:
        if self.cleaner is not None:
            self.cleaner.close()
        self._stop.set()
        self._wake.set()
        if hasattr(self.clock, "wake"):
            self.clock.wake()
        if self._thread is not None:
            self._thread.join()
        for thread in self._recovering:
            thread.join()

    # --- directory ownership ------------------------------------------------------------------
    def _acquire_lock(self):
        with _held_lock:
            if self.dir in _held:
                raise LogDirectoryLockedError("the log directory is already open in this process", file=self.dir)
            try:
                handle = self.fs.lock(os.path.join(self.dir, LOCK_FILE))
            except BlockingIOError:
                raise LogDirectoryLockedError("the log directory is locked by another process",
                                              file=self.dir) from None
            except OSError as exc:
                raise InvalidLogDirectoryError(f"cannot lock the log directory: {exc.strerror}",
                                               file=self.dir) from None
            _held.add(self.dir)
            return handle

    def _release_lock(self) -> None:
        with _held_lock:
            _held.discard(self.dir)
        self._lock_file.close()

    def _ensure_meta_properties(self) -> None:
        path = os.path.join(self.dir, META_PROPERTIES)
        if self.fs.exists(path):
            return
        text = (f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
                f"version=1\ncluster.id={partition_metadata.new_topic_id()}\nnode.id={self.node_id}\n"
                f"directory.id={partition_metadata.new_topic_id()}\n")
        self.fs.atomic_write(path, text.encode())

    # --- loading ------------------------------------------------------------------------------
    def _checkpoint(self, name: str) -> dict:
        path = os.path.join(self.dir, name)
        try:
            entries = offset_checkpoint.read(self.fs, path)
        except KafkaError as exc:
            self.repairs.append(f"ignored an unreadable checkpoint (its logs are recovered in full): {exc}")
            log.warning("%s", self.repairs[-1])
            return {}
        self._written[name] = entries  # what the file says: written again only once that differs
        # a negative offset is read as Kafka's loader uses it: as 0 (recovered from the start, clamped to the log)
        return {tp: max(offset, 0) for tp, offset in entries.items()} if entries else entries

    def _load_logs(self) -> None:
        self._written = {}
        recovery = self._checkpoint(offset_checkpoint.RECOVERY_POINT)
        starts = self._checkpoint(offset_checkpoint.LOG_START)
        hws = self._checkpoint(offset_checkpoint.HIGH_WATERMARK)
        cleaned = self._checkpoint(offset_checkpoint.CLEANER)
        self._loading = Loading(self._configs, self._log_options, self._on_load)
        self._loaded, self._created = {}, set()
        self._unloaded = ({}, {}, {})  # the unloaded logs' recovery points, log starts (the nonzero ones) and HWs
        fs, clock, loading, clean, parse = self.fs, self.clock, self._loading, self.clean_shutdown, \
            names.parse_partition_dir
        root = os.path.join(self.dir, "")
        recovery_of, start_of, hw_of, cleaned_of = recovery.get, starts.get, hws.get, cleaned.get
        for entry in sorted(self.fs.subdirectories(self.dir)):
            path = root + entry
            tp = parse(entry)
            if tp is not None and tp[0] == names.METADATA_TOPIC:
                continue  # a KRaft broker's metadata log: not a topic partition, and never touched (Kafka's too)
            if tp is None:
                if entry.endswith("-delete"):
                    self.fs.rmtree(path)  # a deletion that did not finish
                elif entry.endswith("-stray"):
                    self._note_stray(path, "set aside before this directory was opened")
                continue
            point, start, hw = recovery_of(tp, 0), start_of(tp, 0), hw_of(tp, 0)
            self._logs[tp] = LogSlot(fs, path, tp[0], clock, loading, recovery_point=point, log_start_offset=start,
                                     high_watermark=hw, clean_shutdown=clean, cleaner_checkpoint=cleaned_of(tp))
            self._unloaded[0][tp], self._unloaded[2][tp] = point, hw
            if start:
                self._unloaded[1][tp] = start

    def _on_load(self, slot: LogSlot, loaded: UnifiedLog) -> UnifiedLog:
        """As a slot's log loads (`loaded`, not yet visible): a log found on open has its topic id checked (a
        directory of another topic id is set aside and the partition starts empty in a new one, which is returned in
        its place), and the log joins the loaded ones, which housekeeping and the checkpoints follow."""
        tp = names.parse_partition_dir(os.path.basename(slot.dir))
        if tp not in self._created and not self._topic_id_matches(tp[0], loaded):
            loaded = self._replace_stray(tp, loaded)
        if self.on_loaded is not None:
            self.on_loaded(tp, loaded)
        with self._lock:
            if self._loading.closed:  # (the manager closed meanwhile: this log would be left open)
                raise KafkaStorageError("the log directory was closed", file=slot.dir)
            if self._logs.get(tp) is slot:
                self._loaded[tp] = loaded
        return loaded

    def _replace_stray(self, tp: tuple[str, int], stray: UnifiedLog) -> UnifiedLog:
        """Set the directory of `stray` (another topic's, of the same name: one deleted while a crash kept its
        directory) aside as `-stray`, as KRaft brokers do, and load an empty log in a new directory of the topic."""
        stray.close(flush=False)
        moved = f"{stray.dir}.{uuid.uuid4().hex}-stray"
        self.fs.rename(stray.dir, moved)
        self.fs.makedirs(stray.dir)
        partition_metadata.write(self.fs, stray.dir, self._topic_ids(tp[0]))
        self.fs.fsync_dir(self.dir)
        self.repairs.append(f"set {stray.dir} aside as {moved}: the catalogue has topic id {self._topic_ids(tp[0])}")
        log.warning("%s", self.repairs[-1])
        self._note_stray(moved, f"its partition.metadata names another topic id than the catalogue's "
                                f"{self._topic_ids(tp[0])}")
        return UnifiedLog(self.fs, stray.dir, self._configs(tp[0]), self.clock, clean_shutdown=True,
                          **self._log_options)

    def _topic_id_matches(self, topic: str, lg: UnifiedLog) -> bool:
        """A log found on open, as it loads: whether its partition.metadata has the topic id `topic_ids` gives (none:
        the topic is not in a catalogue, and any id matches). A missing or unreadable file is written again with that
        id, and said."""
        expected = self._topic_ids(topic)
        if expected is None:
            return True
        try:
            found = partition_metadata.read(self.fs, lg.dir)
        except KafkaStorageError as exc:
            found, why = None, f"rewrote {exc.file}: {exc.message}"
        else:
            why = (f"wrote the missing partition.metadata of {lg.dir} with topic {topic!r}'s id {expected}, keeping "
                   f"its {lg.log_end_offset - lg.log_start_offset} records")
        if found is None:
            partition_metadata.write(self.fs, lg.dir, expected)
            lg.recovery.note(why)
        return found is None or found == expected

    # --- logs ---------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog:
        """The log of `topic`-`partition`, loaded now if it was not."""
        try:
            slot = self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.dir) from None
        return slot.load()

    def slot(self, tp: tuple[str, int]) -> LogSlot | None:
        """The slot of `tp`'s log (loaded or not: nothing is loaded here), None when the directory has none."""
        return self._logs.get(tp)

    def slots(self) -> dict[tuple[str, int], LogSlot]:
        """Every log's slot, loaded or not."""
        with self._lock:
            return dict(self._logs)

    def loaded_logs(self) -> list[UnifiedLog]:
        """The logs loaded so far: the only ones housekeeping has anything to do for."""
        with self._lock:
            return list(self._loaded.values())

    def _loaded_map(self) -> dict[tuple[str, int], UnifiedLog]:
        with self._lock:
            return dict(self._loaded)

    def loaded_items(self) -> list[tuple[tuple[str, int], UnifiedLog]]:
        """(topic-partition, log) of each log loaded so far."""
        with self._lock:
            return list(self._loaded.items())

    def _forget(self, tp: tuple[str, int]) -> LogSlot | None:
        """Drop `tp`'s log from every map (the lock held); its slot, if there was one."""
        self._loaded.pop(tp, None)
        self._created.discard(tp)
        for values in self._unloaded:
            values.pop(tp, None)
        return self._logs.pop(tp, None)

    def create_log(self, topic: str, partition: int, topic_id: str | None = None) -> UnifiedLog:
        """`create_slot()`, then the log, loaded (its first segment made)."""
        return self.create_slot(topic, partition, topic_id).load()

    def create_slot(self, topic: str, partition: int, topic_id: str | None = None) -> LogSlot:
        """Create `<topic>-<partition>/` with its partition.metadata (or return the existing log's slot), unloaded: its
        first segment is made when it is first used. Neither is synced here: `sync_created()` makes every creation
        since the last one durable at once. A failure is a KafkaStorageError and leaves no directory behind that
        it made."""
        with self._lock:
            key = (topic, partition)
            if key in self._logs:
                return self._logs[key]
            path = os.path.join(self.dir, names.partition_dir_name(topic, partition))
            made = not self.fs.exists(path)
            try:
                self.fs.makedirs(path)
                partition_metadata.write(self.fs, path, topic_id or partition_metadata.new_topic_id(), sync=False)
                self._unsynced.update((os.path.join(path, partition_metadata.FILE), path, self.dir))
                self._logs[key] = LogSlot(self.fs, path, topic, self.clock, self._loading, clean_shutdown=True,
                                          listing=_JUST_MADE if made else None)
                self._created.add(key)
                self._unloaded[0][key] = self._unloaded[2][key] = 0
            except (OSError, KafkaError) as exc:
                if made and self.fs.exists(path):
                    try:
                        self.fs.rmtree(path)
                    except OSError as cleanup:  # the directory is a stray then: the next open sets it aside
                        log.warning("could not remove %s after a failed creation: %s", path, cleanup)
                if isinstance(exc, KafkaError):
                    raise
                raise KafkaStorageError(f"cannot create the log of {topic}-{partition}: {exc}", file=path) from exc
            return self._logs[key]

    def sync_created(self) -> None:
        """Make the logs created since the last call durable, at once (the end of a request that created partitions:
        a crash before it leaves them to the catalogue's repair on open): one sync of the file system where it is
        honoured, else an fsync of each file and directory made (FileSystem.sync_paths)."""
        with self._lock:
            if self._unsynced:
                try:
                    self.fs.sync_paths(self._unsynced, self.dir)
                except OSError as exc:
                    raise KafkaStorageError(f"cannot sync the new partitions: {exc}", file=self.dir) from exc
                self._unsynced = set()

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the log and move its directory aside (`...-delete`), to be removed by the background thread once the
        log's `file.delete.delay.ms` has passed (at once without the thread)."""
        with self._lock:
            slot = self._logs.get((topic, partition))
            delay = slot.config.file_delete_delay_ms if slot is not None else 0
        moved = self.set_aside(topic, partition, "delete")
        if self._thread is None:
            self.fs.rmtree(moved)
            return
        with self._lock:
            self._pending_deletes.append((self.clock.time_ms() + delay, moved))
        self._wake.set()
        if hasattr(self.clock, "wake"):
            self.clock.wake()

    def delete_due_logs(self) -> None:
        """Remove the directories of deleted logs whose delay has passed; one that cannot be removed is tried again
        DELETE_RETRY_MS later (a KafkaStorageError meanwhile)."""
        now = self.clock.time_ms()
        with self._lock:
            due = [path for at, path in self._pending_deletes if at <= now]
            self._pending_deletes = [(at, path) for at, path in self._pending_deletes if at > now]
        for i, path in enumerate(due):
            try:
                self.fs.rmtree(path)
            except OSError as exc:
                with self._lock:
                    self._pending_deletes += [(now + self.DELETE_RETRY_MS, rest) for rest in due[i:]]
                raise KafkaStorageError(f"cannot remove a deleted log: {exc}", file=path) from exc

    def _next_delete(self) -> float:
        """When the first deleted log waiting is due (infinity with none)."""
        with self._lock:
            return min((at for at, _ in self._pending_deletes), default=float("inf"))

    def set_aside(self, topic: str, partition: int, kind: str, why: str = "") -> str:
        """Close the log and rename its directory `<dir>.<id>-<kind>` (Kafka's `-delete` / `-stray`; `why` a stray
        is, for `strays()`). A log set aside to be deleted is closed without a flush, as Kafka's asyncDelete leaves
        it: its bytes are going."""
        with self.cleaner.paused((topic, partition)), self._lock:
            slot = self._forget((topic, partition))
            if slot is None:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.dir)
            slot.close(flush=kind != "delete")
            moved = f"{slot.dir}.{uuid.uuid4().hex}-{kind}"
            self.fs.rename(slot.dir, moved)
            self.fs.fsync_dir(self.dir)
            if kind == "stray":
                self._note_stray(moved, why or "its replica is no longer assigned here")
            return moved

    # --- partitions set aside -------------------------------------------------------------------
    def _note_stray(self, path: str, why: str) -> None:
        topic, partition, _ = names.parse_set_aside(os.path.basename(path))
        with self._lock:
            self._strays[path] = StrayPartition(path, topic, partition, why, self.clock.time_ms())

    def strays(self) -> list[StrayPartition]:
        """The partition directories set aside as `-stray` here (by this manager or before it opened), by path."""
        with self._lock:
            return [self._strays[p] for p in sorted(self._strays)]

    def restore_stray(self, path: str, topic_id: str | None) -> tuple[str, int]:
        """Put the `-stray` directory `path` back as its partition's directory, with `topic_id` in its
        partition.metadata; the partition's log must exist, be unloaded and hold no record (its directory is removed).
        The restored log is re-validated in full when it first loads. Returns its (topic, partition)."""
        path = os.path.abspath(path)
        with self._lock:
            stray = self._strays.get(path)
            if stray is None:
                raise InvalidRequestError(f"not a partition set aside as -stray in {self.dir}", file=path)
            tp = (stray.topic, stray.partition)
            slot = self._logs.get(tp)
            if slot is None:
                raise UnknownTopicOrPartitionError(
                    f"{stray.topic} has no partition {stray.partition}: create it (or the topic) first", file=path)
            records = [f for f in self.fs.listdir(slot.dir) if f.endswith(names.LOG)
                       and self.fs.size(os.path.join(slot.dir, f))]
            if records:
                raise InvalidRequestError(f"{stray.topic}-{stray.partition} holds records ({records[0]}): a stray "
                                          f"goes back only in place of an empty partition", file=slot.dir)

            def swap() -> None:
                doomed = f"{slot.dir}.{uuid.uuid4().hex}-delete"  # (removed by the next open if a crash comes first)
                self.fs.rename(slot.dir, doomed)
                self.fs.rename(path, slot.dir)
                partition_metadata.write(self.fs, slot.dir, topic_id)
                self.fs.fsync_dir(self.dir)
                self.fs.rmtree(doomed)

            if not slot.replace_unloaded(swap):
                raise InvalidRequestError(f"{stray.topic}-{stray.partition} is in use: restore it right after the "
                                          f"directory is opened (kafkalog recover --restore-stray)", file=slot.dir)
            del self._strays[path]
            for values in self._unloaded:  # (its checkpointed offsets were the empty log's)
                values.pop(tp, None)
            self.repairs.append(f"restored {path} as {slot.dir}")
            log.warning("%s", self.repairs[-1])
            return tp

    # --- background work ------------------------------------------------------------------------
    def _run(self) -> None:
        start = self.clock.time_ms()
        due = {k: start + every for k, (every, _) in self._tasks.items()}
        while not self._stop.is_set():
            self._wake.clear()
            due["delete-logs"] = min(due["delete-logs"], self._next_delete())
            now = self.clock.time_ms()
            for task in [t for t, at in due.items() if at <= now]:
                every, run = self._tasks[task]
                due[task] = now + self._run_task(task, run, every)
            due["delete-logs"] = min(due["delete-logs"], self._next_delete())
            self.clock.wait(self._wake, max(1, min(due.values()) - self.clock.time_ms()))

    def _run_task(self, task: str, run, every: int) -> int:
        """Run one background task; the delay before its next run. A failure is kept (see `check_health`,
        `health`) and logged once per kind (engine.common.health), never the thread's end; a task that stopped
        mattering because the engine is closing is not a failure."""
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - whatever it is, the thread must survive and say so
            if self._stop.is_set():
                return every
            error = exc if isinstance(exc, KafkaStorageError) else KafkaStorageError(
                f"background {task} task failed: {exc}", file=self.dir)
            with self._lock:
                self._failures[task] = error
            return self.health.failed(task, exc, self.clock.time_ms(), every)
        if task in self._failures:
            with self._lock:
                self._failures.pop(task, None)
        self.health.succeeded(task, self.clock.time_ms())
        return every

    def run_storage_tasks(self) -> list[TaskFailure]:
        """Run the flush and checkpoint tasks once now (recorded in `health` as the background thread records
        them), then write and remove a probe file of PROBE_BYTES: a checkpoint whose content did not change writes
        nothing, the probe finds a full disk all the same. The probe's failure is returned, not kept: nothing runs
        it again to clear it, and appends must not wait for it."""
        for task in ("flush", "checkpoint", "hw"):
            every, run = self._tasks[task]
            self._run_task(task, run, every)
        try:
            self._write_probe()
        except KafkaStorageError as exc:
            return [TaskFailure(self.dir, "write-probe", self.clock.time_ms(), 1, str(exc))]
        return []

    def _write_probe(self) -> None:
        path = os.path.join(self.dir, PROBE_FILE)
        try:
            with self.fs.open(path, "wb+") as f:
                self.fs.write(f, bytes(PROBE_BYTES))
                self.fs.fsync(f)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write: {exc}", file=path) from exc
        finally:
            if self.fs.exists(path):
                self.fs.remove(path)

    def compact(self, topic: str, partition: int, progress=None) -> CleanerStats | None:
        """Compact one log now (every pass its offset map needs); None when nothing was cleanable."""
        return self.cleaner.clean((topic, partition), self.get_log(topic, partition), until_done=True,
                                  progress=progress)

    def check_health(self) -> None:
        """KafkaStorageError while a background task (flush, checkpoint, retention) keeps failing."""
        if self._failures:
            with self._lock:
                failures = list(self._failures.items())
            if failures:
                task, error = failures[0]
                raise KafkaStorageError(f"the log directory's background {task} is failing: {error.message}",
                                        file=error.file or self.dir) from error

    def expire_producers(self) -> int:
        """Forget producers idle past producer.id.expiration.ms in every loaded log (an unloaded one has had no
        append since the open); how many were forgotten."""
        return sum(lg.remove_expired_producers() for lg in self.loaded_logs())

    def flush_due_logs(self) -> int:
        return sum(lg.maybe_flush_on_time() for lg in self.loaded_logs())

    def cleanup_logs(self) -> int:
        """Retention for every loaded log, then removal of `.deleted` files past their delay (an unloaded log has
        had nothing appended since the open: its retention is applied once it is used)."""
        removed = 0
        for lg in self.loaded_logs():
            removed += lg.delete_old_segments()
            lg.delete_pending_files()
        return removed

    def _checkpoint_entries(self, which: int, live) -> dict[tuple[str, int], int]:
        """A checkpoint's entries: the unloaded logs' as read on open (`which` of `_unloaded`), the loaded ones'
        `live(log)` (None: no entry). Its work beyond a copy is proportional to the logs loaded."""
        with self._lock:
            entries, loaded = dict(self._unloaded[which]), list(self._loaded.items())
        for tp, lg in loaded:
            value = live(lg)
            if value is None:
                entries.pop(tp, None)
            else:
                entries[tp] = value
        return entries

    def _write_checkpoint(self, name: str, entries: dict[tuple[str, int], int]) -> None:
        """Write one offset checkpoint, unless it would say what it said when last written by this manager."""
        if self._written.get(name) != entries:
            offset_checkpoint.write(self.fs, os.path.join(self.dir, name), entries)
            self._written[name] = entries

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoint(offset_checkpoint.RECOVERY_POINT, self._checkpoint_entries(0, _RECOVERY_POINT))
        self._write_checkpoint(offset_checkpoint.LOG_START, self._checkpoint_entries(1, _LOG_START))

    def checkpoint_high_watermarks(self) -> None:
        self._write_checkpoint(offset_checkpoint.HIGH_WATERMARK, self._checkpoint_entries(2, _HIGH_WATERMARK))

    # --- shutdown -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the background thread, flush and close every log, write the checkpoints, then the
        clean-shutdown marker, and release the directory. Every step runs whatever the one before raised; the
        marker is written only when none raised, the directory released either way, the first error raised."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        steps = Steps()
        steps.run(self._stop_background)
        try:
            steps.run(self._delete_waiting)
            steps.run(self.sync_created)
            steps.run(self._close_logs)
            steps.run(self.checkpoint_recovery_points)
            steps.run(self.checkpoint_high_watermarks)
            steps.run(self.cleaner.write_checkpoint)
            # the marker says every log is clean: not while one that an unclean shutdown left was never loaded
            if not steps.errors and self._all_recovered():
                steps.run(self.fs.atomic_write, os.path.join(self.dir, CLEAN_SHUTDOWN),
                          json.dumps({"version": 0, "brokerEpoch": 0}, separators=(",", ":")).encode())
        finally:
            self._release_lock()
        steps.raise_first()

    def _all_recovered(self) -> bool:
        """Whether no log is left that an unclean shutdown left and no one loaded (recovered) since, and no log
        failed to load (the next open must recover it)."""
        if self._loading.failed:
            return False
        if self.clean_shutdown:
            return True
        with self._lock:  # (a log created since the open is new, so clean)
            return all(slot.loaded or tp in self._created for tp, slot in self._logs.items())

    def _close_logs(self) -> None:
        """No log loads any more; close every loaded one, each whatever the one before raised (an unloaded one
        holds nothing), their fsyncs made together at the end (FileSystem.deferred_syncs; KafkaStorageError if
        that fails); the first error raised."""
        with self._lock:
            self._loading.closed = True
            logs = list(self._loaded.values())
        steps = Steps()
        try:
            with self.fs.deferred_syncs(self.dir):
                for lg in logs:
                    steps.run(lg.close)
        except OSError as exc:
            steps.errors.append(KafkaStorageError(f"cannot sync the closed logs: {exc}", file=self.dir))
        steps.raise_first()

    def _delete_waiting(self) -> None:
        """Remove every deleted log's directory still waiting (close); one that cannot be removed is left to the next
        open, which removes every `-delete` directory, and said in the log."""
        with self._lock:
            waiting, self._pending_deletes = [path for _, path in self._pending_deletes], []
        for path in waiting:
            try:
                self.fs.rmtree(path)
            except OSError as exc:
                log.warning("cannot remove the deleted log %s now (the next open removes it): %s", path, exc)

    def crash(self) -> None:
        """Stop as a broker process that died would: background work stops and every log is closed, with no
        flush, checkpoint or clean-shutdown marker; the directory stays locked (this engine still owns it)."""
        self._stop_background()
        with self._lock:
            self._loading.closed = True  # (no log loads any more)
            slots, self._logs, self._loaded = list(self._logs.values()), {}, {}
            self._pending_deletes = []  # a dead process removes nothing more: the next open does
        for slot in slots:
            slot.close(flush=False)

    def release(self) -> None:
        """Give the directory up after `crash()`, leaving it as the crash left it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._release_lock()

    def restart(self) -> None:
        """Load the directory again after `crash()`: every log is recovered, as after an unclean shutdown."""
        with self._lock:
            self.clean_shutdown = False
            self._failures.clear()
            self.health.clear()
            self._load_logs()
        self._start_background()

    def __enter__(self) -> "LogManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
