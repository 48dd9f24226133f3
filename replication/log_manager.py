"""A log directory: its partitions' logs and the files at its root (Kafka's LogManager).

Root files: `.lock` (held with a POSIX record lock while open), `meta.properties` (Java
Properties text), `.kafka_cleanshutdown` (its presence means the last close was clean; deleted as
soon as it is seen), and the offset checkpoints `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint` (only starts above the first segment base) and
`replication-offset-checkpoint` (high watermarks), and the cleaner's `cleaner-offset-checkpoint`
(replication.log_cleaner).
Crash policy: checkpoints are atomic (tmp + fsync + rename + dir fsync); an unreadable one is
treated as absent (full recovery). The clean-shutdown marker is written last on close, after
every log is flushed and every checkpoint written.
Deleted logs (Kafka's asyncDelete): a deleted log is closed and its directory renamed `<dir>.<id>-delete` at once;
the background thread removes it once the log's `file.delete.delay.ms` has passed (Kafka's kafka-delete-logs task), so
deleting a topic does not wait for the kernel to drop its pages. `close()` removes the ones still waiting; a crash
leaves them, and the next open removes every `-delete` directory it finds. Without the background thread a deleted
log's directory is removed at once.
Threads: one background thread runs the flush (`flush.ms`), retention, checkpoint and delete tasks on the
injected clock, and the log cleaner has its own; both stop on `close()`. Public methods are thread-safe.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid

from engine.common.clock import Clock, SystemClock
from engine.common.closing import Steps
from engine.common.health import Health, TaskFailure
from engine.common.errors import (
    InvalidLogDirectoryError,
    KafkaError,
    KafkaStorageError,
    LogDirectoryLockedError,
    UnknownTopicOrPartitionError,
)
from engine.replication.log_cleaner import CleanerConfig, LogCleaner
from engine.segments import names, offset_checkpoint, partition_metadata
from engine.segments.cleaner import CleanerStats
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.txn.unified_log import UnifiedLog

log = logging.getLogger("kafkalog.log_manager")

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
PROBE_FILE = ".kafkalog-write-probe"  # `run_storage_tasks` writes it and removes it at once
PROBE_BYTES = 1 << 20  # room for one default-sized produce request (max.request.size)

_held: set[str] = set()             # directories this process has open (POSIX locks are per process)
_held_lock = threading.Lock()


class LogManager:
    RETENTION_CHECK_MS = 300_000
    DELETE_RETRY_MS = 1_000  # how soon a deleted log's directory that could not be removed is tried again
    FLUSH_CHECK_MS = 1_000
    CHECKPOINT_MS = 60_000
    HW_CHECKPOINT_MS = 5_000  # replica.high.watermark.checkpoint.interval.ms: how soon other processes see a new HW

    def __init__(self, directory: str, *, fs: FileSystem | None = None, clock: Clock | None = None,
                 configs=None, background: bool = True, log_class: type[UnifiedLog] = UnifiedLog,
                 log_options: dict | None = None,
                 tasks: dict | None = None, node_id: int = 0, cleaner_config: CleanerConfig | None = None,
                 hw_checkpoint_interval_ms: int | None = None) -> None:
        """Open (creating if needed) `directory`. `configs(topic) -> LogConfig` gives each topic's config;
        logs are `log_class(..., **log_options)`; `tasks` adds {name: (interval_ms, callable)} to the
        background thread's schedule; `cleaner_config` is the log cleaner's."""
        self.dir = os.path.abspath(directory)
        self.fs = fs or FileSystem()
        self.clock = clock or SystemClock()
        self._configs = configs or (lambda topic: LogConfig())
        self._log_class, self._log_options = log_class, dict(log_options or {})
        self._tasks = {"flush": (self.FLUSH_CHECK_MS, self.flush_due_logs),
                       "retention": (self.RETENTION_CHECK_MS, self.cleanup_logs),
                       "checkpoint": (self.CHECKPOINT_MS, self.checkpoint_recovery_points),
                       "hw": (hw_checkpoint_interval_ms or self.HW_CHECKPOINT_MS, self.checkpoint_high_watermarks),
                       "delete-logs": (self.DELETE_RETRY_MS, self.delete_due_logs),
                       **(tasks or {})}
        self._pending_deletes: list[tuple[int, str]] = []  # (due ms, directory) of deleted logs not yet removed
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], UnifiedLog] = {}
        self._failures: dict[str, KafkaStorageError] = {}  # background tasks failing now, by name
        self.health = Health(self.dir, log)  # and what the log and `Engine.health()` say of them
        self.repairs: list[str] = []  # what opening the directory found wrong at its root, in words
        self._closed = False
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
            for lg in self._logs.values():
                lg.close()
            self._release_lock()
            raise
        self._start_background()

    def _start_background(self) -> None:
        self.cleaner = LogCleaner(self.dir, self.fs, self.clock, self.logs, self.cleaner_config, self._background)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set to make the thread look at its schedule again (a deletion, close)
        self._thread = None
        if self._background:
            self._thread = threading.Thread(target=self._run, name=f"kafkalog-log-manager:{self.dir}", daemon=True)
            self._thread.start()

    def _stop_background(self) -> None:
        if self.cleaner is not None:
            self.cleaner.close()
        self._stop.set()
        self._wake.set()
        if hasattr(self.clock, "wake"):
            self.clock.wake()
        if self._thread is not None:
            self._thread.join()

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
            return offset_checkpoint.read(self.fs, path)
        except KafkaError as exc:
            self.repairs.append(f"ignored an unreadable checkpoint (its logs are recovered in full): {exc}")
            log.warning("%s", self.repairs[-1])
            return {}

    def _load_logs(self) -> None:
        recovery = self._checkpoint(offset_checkpoint.RECOVERY_POINT)
        starts = self._checkpoint(offset_checkpoint.LOG_START)
        hws = self._checkpoint(offset_checkpoint.HIGH_WATERMARK)
        cleaned = self._checkpoint(offset_checkpoint.CLEANER)
        for entry in sorted(self.fs.listdir(self.dir)):
            path = os.path.join(self.dir, entry)
            tp = names.parse_partition_dir(entry)
            if tp is not None and tp[0] == names.METADATA_TOPIC:
                continue  # a KRaft broker's metadata log: not a topic partition, and never touched (Kafka's too)
            if tp is None or not self.fs.isdir(path):
                if entry.endswith("-delete") and self.fs.isdir(path):
                    self.fs.rmtree(path)  # a deletion that did not finish
                continue
            self._logs[tp] = self._log_class(
                self.fs, path, self._configs(tp[0]), self.clock, recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0), high_watermark=hws.get(tp, 0),
                clean_shutdown=self.clean_shutdown, cleaner_checkpoint=cleaned.get(tp), **self._log_options)

    # --- logs ---------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog:
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.dir) from None

    def logs(self) -> dict[tuple[str, int], UnifiedLog]:
        with self._lock:
            return dict(self._logs)

    def create_log(self, topic: str, partition: int, topic_id: str | None = None) -> UnifiedLog:
        """Create `<topic>-<partition>/` with its partition.metadata (or return the existing log). A failure is a
        KafkaStorageError and leaves no directory behind that it made."""
        with self._lock:
            key = (topic, partition)
            if key in self._logs:
                return self._logs[key]
            path = os.path.join(self.dir, names.partition_dir_name(topic, partition))
            made = not self.fs.exists(path)
            try:
                self.fs.makedirs(path)
                partition_metadata.write(self.fs, path, topic_id or partition_metadata.new_topic_id())
                self.fs.fsync_dir(self.dir)
                self._logs[key] = self._log_class(self.fs, path, self._configs(topic), self.clock,
                                                  **self._log_options)
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

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the log and move its directory aside (`...-delete`), to be removed by the background thread once the
        log's `file.delete.delay.ms` has passed (at once without the thread)."""
        with self._lock:
            lg = self._logs.get((topic, partition))
            delay = lg.config.file_delete_delay_ms if lg is not None else 0
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

    def set_aside(self, topic: str, partition: int, kind: str) -> str:
        """Close the log and rename its directory `<dir>.<id>-<kind>` (Kafka's `-delete` / `-stray`). A log set
        aside to be deleted is closed without a flush, as Kafka's asyncDelete leaves it: its bytes are going."""
        with self.cleaner.paused((topic, partition)), self._lock:
            lg = self._logs.pop((topic, partition), None)
            if lg is None:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.dir)
            lg.close(flush=kind != "delete")
            moved = f"{lg.dir}.{uuid.uuid4().hex}-{kind}"
            self.fs.rename(lg.dir, moved)
            self.fs.fsync_dir(self.dir)
            return moved

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

    def flush_due_logs(self) -> int:
        return sum(lg.maybe_flush_on_time() for lg in self.logs().values())

    def cleanup_logs(self) -> int:
        """Retention for every log, then removal of `.deleted` files past their delay."""
        removed = 0
        for lg in self.logs().values():
            removed += lg.delete_old_segments()
            lg.delete_pending_files()
        return removed

    def checkpoint_recovery_points(self) -> None:
        logs = self.logs()
        offset_checkpoint.write(self.fs, os.path.join(self.dir, offset_checkpoint.RECOVERY_POINT),
                                {tp: lg.recovery_point for tp, lg in logs.items()})
        offset_checkpoint.write(self.fs, os.path.join(self.dir, offset_checkpoint.LOG_START),
                                {tp: lg.log_start_offset for tp, lg in logs.items()
                                 if lg.log_start_offset > lg.segments[0].base_offset})

    def checkpoint_high_watermarks(self) -> None:
        offset_checkpoint.write(self.fs, os.path.join(self.dir, offset_checkpoint.HIGH_WATERMARK),
                                {tp: lg.high_watermark for tp, lg in self.logs().items()})

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
            for lg in self.logs().values():  # each log is closed whatever the one before raised
                steps.run(lg.close)
            steps.run(self.checkpoint_recovery_points)
            steps.run(self.checkpoint_high_watermarks)
            steps.run(self.cleaner.write_checkpoint)
            if not steps.errors:  # the marker says every log is clean: only then
                steps.run(self.fs.atomic_write, os.path.join(self.dir, CLEAN_SHUTDOWN),
                          json.dumps({"version": 0, "brokerEpoch": 0}, separators=(",", ":")).encode())
        finally:
            self._release_lock()
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
            logs, self._logs = list(self._logs.values()), {}
            self._pending_deletes = []  # a dead process removes nothing more: the next open does
        for lg in logs:
            lg.close(flush=False)

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
