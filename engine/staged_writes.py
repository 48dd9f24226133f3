"""Writes staged by processes that cannot open the engine, applied by the process that owns the directory.

Spark's tasks, and the Python worker where Spark runs a sink's commit, are other processes than the application's:
they cannot take the directory's lock. They stage rows, and the owner appends them (engine.spark.sink).
Byte layout, under `<dir>/.kafkalog-staging/`:
- `<job>/<attempt>.arrow`: a task attempt's rows, Arrow IPC, columns topic (string), partition (int32, null: the
  partitioner), key and value (binary), headers (list<struct<key: string, value: binary>>), timestamp (int64 ms,
  null: now);
- `requests/<job>.json`: a commit request, `{"job", "files", "transactional_id", "sink_id", "batch_id"}` (batch id
  null for a batch write), written to a `.tmp` and renamed; the owner renames it `<job>.applying`, applies it and
  writes `<job>.done`, `{"appended": n}` or `{"error": message}`, the same way.
Applying a request appends all its rows through one transactional producer and commits the transaction (with a
streaming micro-batch's id as the offset of the sink's group, in the same transaction), so a reader at
read_committed sees a commit whole or not at all; a micro-batch whose id the group already passed is skipped.
`commit` is a sink's driver side (the Python sink's, and, run as `python -m engine.staged_writes <path> <timeout ms>`
with the request on stdin, the JVM sink's): it opens the engine, or asks the owner when the directory is locked.
Crash policy: a crash mid-apply leaves an open transaction that the next `init_transactions` of that id aborts; the
requester then times out and Spark fails the job (or retries the micro-batch), which stages and requests again.
Thread-safety: `apply_pending` runs on the engine's background thread (task `staged-writes`), one request at a time.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import time

from engine.common.errors import KafkaError, KafkaTimeoutError
from engine.common.structs import OffsetAndMetadata, TopicPartition

STAGING = ".kafkalog-staging"
REQUESTS = "requests"


@functools.cache
def staged_schema():
    """The Arrow schema of a staged file (the layout above; pyarrow is imported on first use)."""
    import pyarrow as pa

    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("key", pa.binary()), ("value", pa.binary()),
                      ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                      ("timestamp", pa.int64())])


def staging_dir(path: str, job: str | None = None) -> str:
    root = os.path.join(path, STAGING)
    return root if job is None else os.path.join(root, job)


def _records(table) -> dict:
    """(topic, partition or None) -> the records of a staged table for `send_batch`, in order: (key, value) pairs
    when no row has headers or a timestamp (the accumulator's native path), else (key, value, headers, timestamp)."""
    n = table.num_rows
    keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
    if table.column("headers").null_count == n and table.column("timestamp").null_count == n:
        rows = zip(keys, values)
    else:
        rows = ((k, v, [(h["key"], h["value"]) for h in hs] if hs else None, ts) for k, v, hs, ts in
                zip(keys, values, table.column("headers").to_pylist(), table.column("timestamp").to_pylist()))
    topics, partitions = table.column("topic"), table.column("partition")
    if n and partitions.null_count == n and len(topics.unique()) == 1:  # one topic, Kafka's partitioner
        return {(topics[0].as_py(), None): list(rows)}
    groups: dict = {}
    for where, row in zip(zip(topics.to_pylist(), partitions.to_pylist()), rows):
        groups.setdefault(where, []).append(row)
    return groups


def apply(e, request: dict) -> int:
    """Append a request's staged rows in one transaction of the engine `e`; returns the rows appended (0 for a
    micro-batch already committed). The job's staged files are removed either way."""
    import pyarrow as pa

    groups: dict = {}
    try:
        for path in request["files"]:
            with pa.memory_map(path) as source:
                for key, records in _records(pa.ipc.open_file(source).read_all()).items():
                    groups.setdefault(key, []).extend(records)
        if not groups:
            return 0
        batch_id = request.get("batch_id")
        marker = TopicPartition(min(topic for topic, _ in groups), 0)  # where a streaming sink keeps its progress
        if batch_id is not None:
            done = e.committed(request["sink_id"], marker)
            if done is not None and done.offset > batch_id:
                return 0  # Spark re-ran a micro-batch whose commit had landed
        # one request is a bulk append: batches as large as the topic takes (the accumulator caps them by its
        # max.message.bytes), not the 16 KiB a latency-bound producer uses
        producer = e.producer(transactional_id=request["transactional_id"], linger_ms=0, batch_size=1 << 20)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            try:
                for (topic, partition), records in groups.items():
                    producer.send_batch(topic, records, partition)
                if batch_id is not None:
                    producer.send_offsets_to_transaction({marker: OffsetAndMetadata(batch_id + 1, "")},
                                                         request["sink_id"])
                producer.commit_transaction()
            except BaseException:
                producer.abort_transaction()
                raise
        finally:
            producer.close()
        return sum(len(records) for records in groups.values())
    finally:
        discard_request(e.path, request)


def discard_request(path: str, request: dict) -> None:
    """Remove the staged files of a request: its job's, and those of every directory its files are in (Spark may
    commit through another writer object than the one whose tasks staged them)."""
    for job in {request["job"]} | {os.path.basename(os.path.dirname(f)) for f in request["files"]}:
        discard(path, job)


def discard(path: str, job: str) -> None:
    """Remove everything a job staged (failed attempts' files included), and the staging root once it is empty."""
    shutil.rmtree(staging_dir(path, job), ignore_errors=True)
    for directory in (os.path.join(staging_dir(path), REQUESTS), staging_dir(path)):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError:
            break  # something else is still staged or requested


def _write_json(path: str, doc: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def apply_pending(e) -> int:
    """Apply every commit request found under `e`'s directory (the engine's `staged-writes` task)."""
    requests = os.path.join(staging_dir(e.path), REQUESTS)
    if not os.path.isdir(requests):
        return 0
    applied = 0
    for name in sorted(os.listdir(requests)):
        if not name.endswith(".json"):
            continue
        base = os.path.join(requests, name[:-len(".json")])
        try:
            os.rename(base + ".json", base + ".applying")
        except FileNotFoundError:
            continue  # cancelled by its requester meanwhile
        with open(base + ".applying") as f:
            request = json.load(f)
        try:
            outcome = {"appended": apply(e, request)}
        except KafkaError as exc:
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
        _write_json(base + ".done", outcome)
        os.remove(base + ".applying")
        applied += 1
    return applied


def request(path: str, req: dict, timeout_ms: int) -> int:
    """Ask the process that owns `path` to apply `req`, and wait for it; returns the rows appended."""
    requests = os.path.join(staging_dir(path), REQUESTS)
    os.makedirs(requests, exist_ok=True)
    base = os.path.join(requests, req["job"])
    _write_json(base + ".json", req)
    deadline = time.monotonic() + timeout_ms / 1000
    while not os.path.exists(base + ".done"):
        if time.monotonic() > deadline:
            try:
                os.rename(base + ".json", base + ".cancelled")  # not picked up: withdraw it
            except FileNotFoundError:
                continue  # the owner is applying it: its outcome will come
            os.remove(base + ".cancelled")
            discard_request(path, req)
            raise KafkaTimeoutError(f"the process that has {path} open did not apply the staged write within "
                                    f"{timeout_ms} ms (is its engine open with background=False?)", file=path)
        time.sleep(0.02)
    with open(base + ".done") as f:
        outcome = json.load(f)
    os.remove(base + ".done")
    discard_request(path, req)
    if "error" in outcome:
        raise KafkaError(f"the staged write failed in the process that owns {path}: {outcome['error']}", file=path)
    return outcome["appended"]


def commit(path: str, req: dict, timeout_ms: int) -> int:
    """Apply `req` (a sink's committed attempts): by opening the engine on `path`, or, when another process (the
    application) has it open, by asking that process's engine to; returns the rows appended."""
    import engine
    from engine.common.errors import LogDirectoryLockedError

    try:
        e = engine.open(path)
    except LogDirectoryLockedError:
        return request(path, req, timeout_ms)
    with e:
        return apply(e, req)


def main(argv: list[str]) -> int:
    """`python -m engine.staged_writes <path> <timeout ms>` with a request on stdin: the JVM sink's commit. Prints
    the rows appended; a failure is one line on stderr ("ErrorName: message") and exit status 1."""
    import sys

    path, timeout_ms = argv
    try:
        print(commit(path, json.load(sys.stdin), int(timeout_ms)))
    except Exception as exc:  # the caller is the JVM: it reports this one line as the commit's error
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
