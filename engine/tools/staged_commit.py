"""The requester's side of the staged-writes queue (the owner's: engine.staged_writes.queue), and `python -m
engine.tools.staged_commit <path> <timeout ms>` with a request on stdin: the JVM sink's commit, which prints the rows
appended (a failure is one line on stderr, `ErrorName: message`, and exit status 1). It is a client of the engine (it
opens one where no process owns the directory), so it sits above it, with the tools.

`request` queues a request and waits for its answer at most its timeout plus a second of grace. While it waits it
tries to open the directory every 250 ms: when no process has it open (the owner died or closed) it becomes the owner
itself, which returns the requests a dead owner held to the queue and applies them, its own included. At the deadline
a request whose commit has not begun is withdrawn (never applied); one whose commit is under way gets a second more,
then is given up on with an error that says its outcome is unknown.
No file of its own (engine.staged_writes.layout). Crash policy: a requester that dies leaves its request to the owner.
Thread-safety: any number of requesters, in threads or processes, one per job id.
"""
from __future__ import annotations

import json
import sys
import time

from engine.common.errors import InvalidConfigurationError, KafkaError, KafkaStorageError, KafkaTimeoutError
from engine.common.errors import LogDirectoryLockedError
from engine.engine import open as open_engine
from engine.segments.fs import FileSystem
from engine.staged_writes.layout import (
    ABANDONED,
    APPLYING,
    CANCELLED,
    COMMITTING,
    DONE,
    QUEUED,
    check_request,
    discard_request,
    read_json,
    rebuild,
    request_file,
    requests_dir,
    write_json,
)
from engine.staged_writes.queue import remove_state, rename_state

POLL_S = 0.05  # how often a requester looks for its answer
PROBE_S = 0.25  # how often a requester tries to open a directory whose owner may be gone
GRACE_S = 1.0  # how long a requester past its deadline waits for a commit under way


def commit(path: str, req: dict, timeout_ms: int) -> int:
    """Apply `req` (a sink's committed attempts) through the process that owns `path`, or by opening it when none
    does; returns the rows appended. The same job requested again is never appended twice."""
    return request(path, req, timeout_ms)


def request(path: str, req: dict, timeout_ms: int, fs: FileSystem | None = None) -> int:
    """Queue `req` for the process that owns `path` and wait for its answer (or become the owner when none is left);
    returns the rows the job appended. KafkaTimeoutError when it was not answered within `timeout_ms` (plus a second
    of grace for a commit under way); the owner's failure as its typed error."""
    check_request(req)
    if type(timeout_ms) is not int or timeout_ms < 0:
        raise InvalidConfigurationError(f"a staged write's timeout is an int >= 0 (ms), got {timeout_ms!r}")
    fs = fs or FileSystem()
    job = req["job"]
    for attempt in range(3):  # another requester that got its answer may remove the empty folder meanwhile
        try:
            fs.makedirs(requests_dir(path))
            write_json(fs, request_file(path, job, QUEUED), req)
            break
        except (OSError, KafkaStorageError) as exc:
            if attempt == 2 or fs.exists(requests_dir(path)):
                raise KafkaStorageError(f"cannot queue staged write {job}: {exc}", file=path) from exc
    deadline = time.monotonic() + timeout_ms / 1000
    probe, failure = 0.0, None
    while True:
        answered = _answer_of(fs, path, req)
        if answered is not None:
            return answered
        now = time.monotonic()
        if now >= deadline:
            return _give_up(fs, path, req, timeout_ms, failure)
        if now >= probe:
            probe = now + PROBE_S
            try:
                _take_over(path, deadline)
            except KafkaError as exc:  # the directory cannot be opened now
                if not exc.retriable:
                    return _give_up(fs, path, req, timeout_ms, exc)
                failure = exc  # said at the deadline if nothing answers
            continue
        time.sleep(min(POLL_S, deadline - now))


def _answer_of(fs: FileSystem, path: str, req: dict) -> int | None:
    """The rows appended when the answer is there (removed once read), None while there is none; the owner's error
    raised."""
    done = request_file(path, req["job"], DONE)
    try:
        outcome = read_json(fs, done)
    except FileNotFoundError:
        return None
    remove_state(fs, done)
    discard_request(path, req)
    if "error" in outcome:
        raise rebuild(outcome["error"], path)
    return outcome["appended"]


def _take_over(path: str, deadline: float) -> None:
    """Open `path` when no process has it (its owner died or closed) and apply what is queued, this request
    included; nothing when it is open elsewhere."""
    try:
        e = open_engine(path, background=False)
    except LogDirectoryLockedError:
        return
    with e:
        e.apply_staged_writes(deadline=deadline)


def _give_up(fs: FileSystem, path: str, req: dict, timeout_ms: int, failure: KafkaError | None) -> int:
    """At the deadline: withdraw the request if its commit has not begun, else wait a second of grace for the
    answer; raises what the requester learnt."""
    job = req["job"]
    grace = time.monotonic() + GRACE_S
    while True:
        answered = _answer_of(fs, path, req)
        if answered is not None:
            return answered
        for state in (QUEUED, APPLYING):
            if rename_state(fs, request_file(path, job, state), request_file(path, job, CANCELLED)):
                remove_state(fs, request_file(path, job, CANCELLED))
                discard_request(path, req)
                if failure is not None:
                    raise failure
                raise KafkaTimeoutError(f"staged write {job} was not applied within {timeout_ms} ms and is withdrawn "
                                        f"(is the engine that has {path} open closed, or opened with "
                                        f"background=False?)", file=path)
        if time.monotonic() >= grace and (
                rename_state(fs, request_file(path, job, COMMITTING), request_file(path, job, ABANDONED))
                or not any(fs.exists(request_file(path, job, s)) for s in (QUEUED, APPLYING, COMMITTING, DONE))):
            remove_state(fs, request_file(path, job, ABANDONED))
            raise KafkaTimeoutError(f"staged write {job}'s commit was under way at the end of its {timeout_ms} ms "
                                    f"and did not finish within a second more: whether it landed is unknown (its "
                                    f"job id is recorded when it lands, so requesting the same job again never "
                                    f"appends it twice)", file=path)
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    try:
        if len(argv) != 2 or not argv[1].isdigit():
            raise InvalidConfigurationError("usage: python -m engine.tools.staged_commit <path> <timeout ms> < request.json")
        try:
            req = json.load(sys.stdin)
        except ValueError as exc:
            raise InvalidConfigurationError(f"the request on stdin is not JSON: {exc}") from None
        print(commit(argv[0], req, int(argv[1])))
    except KafkaError as exc:  # the caller is the JVM: it reports this one line as the commit's error
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
