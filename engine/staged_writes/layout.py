"""The files of the staged-writes protocol, under `<dir>/.kafkalog-staging/`, and the requests they hold.

Byte layout:
- `<job>/<attempt>.batches`: a task attempt's rows as Kafka batches (staged_batches.py has its layout);
- `requests/<job>.<state>`: one request, JSON `{"job", "files", "transactional_id", "sink_id", "batch_id"}` (batch id
  null for a batch write), written to a `.tmp` and renamed into place. Its suffix is its state, and every change of
  state is one rename, which only one side can win: `json` (queued) -> `applying` (the owner claimed it) ->
  `committing` (the owner is committing its transaction) -> removed once `<job>.done` holds the answer,
  `{"appended": n}` or `{"error": {"type", "message", "file", "offset"}}`. The requester may take a request out of
  the owner's hands at its deadline: `json` or `applying` -> `cancelled` (it will never be applied), `committing`
  -> `abandoned` (the outcome is unknown to it; a later request of the same job learns it from the job's marker).
A job id names files: `[A-Za-z0-9_-]`, 1 to 128 characters.
Crash policy: every file is complete or absent (tmp + rename); a `.tmp` is rewritten by the next writer. A request in
`applying` or `committing` whose owner died is returned to `json` by the next owner (queue.StagedWrites.requeue).
Thread-safety: the functions here hold no state; concurrent callers race only through renames.
"""
from __future__ import annotations

import json
import os
import re

from engine.common import errors
from engine.common.errors import InvalidConfigurationError, KafkaError
from engine.segments.fs import FileSystem

STAGING = ".kafkalog-staging"
REQUESTS = "requests"
QUEUED, APPLYING, COMMITTING, DONE, CANCELLED, ABANDONED = "json", "applying", "committing", "done", "cancelled", \
    "abandoned"
_JOB = re.compile(r"[A-Za-z0-9_-]{1,128}")
_FIELDS = ("job", "files", "transactional_id", "sink_id", "batch_id")


def staging_dir(path: str, job: str | None = None) -> str:
    root = os.path.join(path, STAGING)
    return root if job is None else os.path.join(root, job)


def make_job_dir(path: str, job: str) -> str:
    """Create the folder a job's attempts stage into (when missing) and return it. The staging root may vanish between
    the two mkdirs of that (an answered job's discard removes it once empty): made again then."""
    directory = staging_dir(path, job)
    for attempt in range(3):
        try:
            os.makedirs(directory, exist_ok=True)
            return directory
        except FileNotFoundError:
            if attempt == 2:
                raise
    return directory


def requests_dir(path: str) -> str:
    return os.path.join(staging_dir(path), REQUESTS)


def request_file(path: str, job: str, state: str) -> str:
    return os.path.join(requests_dir(path), f"{job}.{state}")


def check_request(req) -> dict:
    """`req` when it is a well-formed request, else InvalidConfigurationError naming what is wrong."""
    if not isinstance(req, dict) or set(req) != set(_FIELDS):
        raise InvalidConfigurationError(f"a staged-write request is an object with the fields {', '.join(_FIELDS)}, "
                                        f"got {req!r:.200}")
    if not isinstance(req["job"], str) or not _JOB.fullmatch(req["job"]):
        raise InvalidConfigurationError(f"a staged write's job id is 1 to 128 of [A-Za-z0-9_-], got {req['job']!r}")
    if not isinstance(req["files"], list) or not all(isinstance(f, str) for f in req["files"]):
        raise InvalidConfigurationError(f"a staged write's files are a list of paths, got {req['files']!r:.200}")
    for name in ("transactional_id", "sink_id"):
        if not isinstance(req[name], str) or not req[name]:
            raise InvalidConfigurationError(f"a staged write's {name} is a non-empty string, got {req[name]!r}")
    if req["batch_id"] is not None and (type(req["batch_id"]) is not int or req["batch_id"] < 0):
        raise InvalidConfigurationError(f"a staged write's batch_id is null or an int >= 0, got {req['batch_id']!r}")
    return req


def write_json(fs: FileSystem, path: str, doc: dict) -> None:
    """Write `doc` to `path` whole (tmp + rename); KafkaStorageError when it cannot."""
    fs.atomic_write(path, json.dumps(doc).encode())


def read_json(fs: FileSystem, path: str) -> dict:
    """The document at `path` (FileNotFoundError when it is gone)."""
    return json.loads(fs.read_bytes(path))


def describe(exc: BaseException) -> dict:
    """An outcome's error: a KafkaError as it is, anything else as the typed error the requester raises for it."""
    if not isinstance(exc, KafkaError):
        if isinstance(exc, OSError):
            exc = errors.KafkaStorageError(f"{type(exc).__name__}: {exc}", file=exc.filename)
        else:
            exc = errors.UnknownServerError(f"{type(exc).__name__}: {exc}")
    return {"type": type(exc).__name__, "message": exc.message, "file": exc.file, "offset": exc.offset}


def rebuild(error: dict, path: str) -> KafkaError:
    """The typed error an outcome describes, saying it happened in the process that owns `path`."""
    cls = getattr(errors, str(error.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, KafkaError)):
        cls = errors.UnknownServerError
    return cls(f"the staged write failed in the process that owns {path}: {error.get('message')}",
               file=error.get("file") or path, offset=error.get("offset"))


def discard_request(path: str, request: dict) -> None:
    """Remove the staged files of a request: its job's, and those of every directory its files are in (Spark may
    commit through another writer object than the one whose tasks staged them)."""
    for job in {request["job"]} | {os.path.basename(os.path.dirname(f)) for f in request["files"]}:
        discard(path, job)


def discard(path: str, job: str) -> None:
    """Remove everything a job staged (failed attempts' files included), and the staging root once it is empty."""
    import shutil

    if not _JOB.fullmatch(job):
        return  # not a job's folder: nothing of ours
    shutil.rmtree(staging_dir(path, job), ignore_errors=True)
    for directory in (requests_dir(path), staging_dir(path)):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError:
            break  # something else is still staged or requested
