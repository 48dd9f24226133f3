"""The owner's side of the request queue between a process that staged a write and the process that owns the directory
(the requester's side: engine.tools.staged_commit).

Files: layout's `requests/<job>.<state>`; every change of state is one rename, made by the side the state says:
the owner claims (`json` -> `applying`), reaches its commit point (`applying` -> `committing`) and answers (writes
`done`, then removes `committing`); the requester withdraws (`json` or `applying` -> `cancelled`) or, past a second
of grace while the commit is under way, gives up on the answer (`committing` -> `abandoned`). Because only one
rename of a file can succeed, an answer is always true: a withdrawn request is never committed, and an answer the
requester reads is the transaction's outcome.
The owner (`StagedWrites`, one per open engine) applies one request at a time, on a thread of its own that the
engine's background thread wakes when it sees a queued request (with `background=False`: on the caller's thread, by
`Engine.apply_staged_writes()`), so a large job never holds up flushes, retention or group timeouts. On close it
stops at the next Arrow batch of a job under way, aborts its transaction and queues the request again.
The first apply of an engine returns requests a dead owner held (claimed or committing) to the queue: their jobs are
applied again, and one that had landed is recognised by its marker (staged_writes.apply), not appended twice.
Crash policy: see layout; a crash of the requester leaves a request the owner still applies (its answer, unread,
stays as `<job>.done`).
Thread-safety: `StagedWrites` serialises applies with a lock; its thread stops on close().
"""
from __future__ import annotations

import logging
import threading
import time

from engine.common.errors import KafkaError
from engine.segments.fs import FileSystem
from engine.staged_writes.apply import Owner, Withdrawn, apply
from engine.staged_writes.layout import (
    APPLYING,
    COMMITTING,
    DONE,
    QUEUED,
    check_request,
    describe,
    discard_request,
    read_json,
    request_file,
    requests_dir,
    write_json,
)

log = logging.getLogger("kafkalog.staged_writes")


class StagedWrites:
    """The owner's side of the queue of the directory `path` on `fs`, for the open engine `e` (what applying uses of
    it; the engine may still be opening)."""

    def __init__(self, fs: FileSystem, path: str, e: Owner) -> None:
        self._e, self._fs, self._path = e, fs, path
        self._lock = threading.Lock()  # one apply at a time per directory
        self._start_lock = threading.Lock()  # starting and stopping the thread
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._requeued = False

    def _queued(self) -> list[str]:
        try:
            names = self._fs.listdir(requests_dir(self._path))
        except FileNotFoundError:
            return []
        suffix = "." + QUEUED
        return sorted(n[:-len(suffix)] for n in names if n.endswith(suffix))

    def poll(self) -> None:
        """The engine's background task: wake the applying thread (started on first use) when a request waits."""
        if self._stopping or not self._queued():
            return
        with self._start_lock:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name=f"kafkalog-staged-writes {self._path}",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.apply_pending()
            except Exception as exc:  # noqa: BLE001 (the queue's own files, a full disk: tried again at the next poll)
                log.warning("staged writes of %s: %s: %s", self._path, type(exc).__name__, exc)

    def apply_pending(self, deadline: float | None = None) -> int:
        """Apply every queued request, one at a time, until none is left, the engine closes or the monotonic
        `deadline` passes; returns how many were answered."""
        with self._lock:
            if not self._requeued:
                self._requeue()
                self._requeued = True
            answered = 0
            for job in self._queued():
                if self._stopping or (deadline is not None and time.monotonic() >= deadline):
                    break
                answered += self._serve(job, deadline)
            return answered

    def _requeue(self) -> None:
        """Queue again the requests a dead owner had claimed (this engine holds the directory: none is under way)."""
        try:
            names = self._fs.listdir(requests_dir(self._path))
        except FileNotFoundError:
            return
        for name in names:
            job, _, state = name.rpartition(".")
            if state in (APPLYING, COMMITTING):
                rename_state(self._fs, request_file(self._path, job, state), request_file(self._path, job, QUEUED))
                log.warning("staged write %s of %s: queued again (its owner stopped in state %r)", job, self._path,
                            state)

    def _serve(self, job: str, deadline: float | None) -> int:
        fs, path = self._fs, self._path
        claimed, committing = request_file(path, job, APPLYING), request_file(path, job, COMMITTING)
        if not rename_state(fs, request_file(path, job, QUEUED), claimed):
            return 0  # withdrawn by its requester meanwhile
        try:
            req = check_request(read_json(fs, claimed))
        except FileNotFoundError:
            return 0  # withdrawn
        except (ValueError, KafkaError) as exc:  # not a request: answered with the error, nothing staged is touched
            self._answer(job, None, {"error": describe(exc)})
            return 1

        def still_wanted() -> bool:
            return not self._stopping and (deadline is None or time.monotonic() < deadline) and fs.exists(claimed)

        try:
            outcome = {"appended": apply(self._e, req, still_wanted, lambda: rename_state(fs, claimed, committing))}
        except Withdrawn:
            if not rename_state(fs, claimed, request_file(path, job, QUEUED)):  # closing: queued for the next owner
                discard_request(path, req)  # its requester withdrew it
            return 0
        except Exception as exc:  # any failure is the requester's typed error
            outcome = {"error": describe(exc)}
        self._answer(job, req, outcome)
        return 1

    def _answer(self, job: str, req: dict | None, outcome: dict) -> None:
        fs, path = self._fs, self._path
        done = request_file(path, job, DONE)
        write_json(fs, done, outcome)
        if not any(remove_state(fs, request_file(path, job, state)) for state in (COMMITTING, APPLYING)):
            remove_state(fs, done)  # its requester gave up waiting: nobody reads the answer
        if req is not None:
            discard_request(path, req)

    def close(self) -> None:
        """Stop: a job under way stops at its next batch and is queued again; waits for the thread."""
        with self._start_lock:
            self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()


def rename_state(fs: FileSystem, src: str, dst: str) -> bool:
    """One state change: False when `src` is gone (the other side changed the state first)."""
    try:
        fs.rename(src, dst)
        return True
    except FileNotFoundError:
        return False


def remove_state(fs: FileSystem, path: str) -> bool:
    """Remove a state's file: False when it is gone (the other side changed the state first)."""
    try:
        fs.remove(path)
        return True
    except FileNotFoundError:
        return False
