"""Applying one staged write: its rows appended in one transaction, one staged batch at a time (the Kafka batches
the sinks' tasks encoded, engine.staged_writes.staged_batches).

Each job leaves a marker in the same transaction: the offset its sink's group (`sink_id`) commits on partition 0 of
the first topic the job writes, whose metadata lists the last jobs applied there with their row counts
(`kafkalog-jobs <job>:<rows> ...`, newest last, at most JOB_MARKER_BYTES), and for a streaming micro-batch the batch
id + 1 as the offset. Before anything is appended the producer's `init_transactions` completes or aborts whatever
transaction of the same id a dead owner left open, and then the marker decides: a batch write whose job it lists,
or a micro-batch the group has passed, landed already and is not appended again (the answer is the rows its job
recorded; 0 for a micro-batch Spark re-ran under another job).
Crash policy: a crash mid-apply leaves an open transaction that the next apply's `init_transactions` aborts; one
after the commit leaves the marker, so the job is never appended twice.
Thread-safety: one apply at a time per directory (queue.StagedWrites holds the lock); the staged files are only read.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol

from engine.common.clock import Clock
from engine.common.errors import KafkaError
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.segments.fs import FileSystem
from engine.staged_writes import staged_batches

JOB_MARKER = "kafkalog-jobs"
JOB_MARKER_BYTES = 3072  # of offset.metadata.max.bytes' 4096


class Withdrawn(KafkaError):
    """The request was taken back (its requester's deadline, or the owner closing) before its commit: aborted."""


class Owner(Protocol):
    """What applying staged writes uses of the directory's owner (an open engine, through its public API): its file
    system and path, its clock, a transactional `producer(**config)`, and the offset a group `committed`."""

    fs: FileSystem
    path: str
    clock: Clock

    def producer(self, **config) -> Any: ...

    def committed(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None: ...


def _topics(fs, files: list[str]) -> set[str]:
    """The topics a job writes (its frames' heads only)."""
    return set().union(*(staged_batches.topics(fs, path) for path in files))


def _append(e: Owner, producer, path: str, ask: Callable[[], None]) -> Iterator[int]:
    """Append one staged file through `producer`, batch by batch (engine.clients.producer.Producer.append_batch),
    calling `ask` before each (it raises to stop) and yielding the rows each appended."""
    for frame in staged_batches.frames(e.fs, path):
        ask()
        producer.append_batch(frame.topic, frame.partition, frame.batch,
                              e.clock.time_ms() if frame.stamped_at_commit else None)
        yield frame.records


def jobs_in(marker: OffsetAndMetadata | None) -> dict[str, int]:
    """The jobs a marker lists, with the rows each appended."""
    words = (marker.metadata or "").split() if marker is not None else []
    if not words or words[0] != JOB_MARKER:
        return {}
    return {job: int(rows) for job, _, rows in (w.rpartition(":") for w in words[1:])}


def with_job(jobs: dict[str, int], job: str, rows: int) -> str:
    """A marker's metadata listing `jobs` and then `job`, the oldest dropped to stay within JOB_MARKER_BYTES."""
    entries = [f"{j}:{n}" for j, n in jobs.items() if j != job] + [f"{job}:{rows}"]
    while len(JOB_MARKER) + sum(len(e) + 1 for e in entries) > JOB_MARKER_BYTES:
        entries.pop(0)
    return " ".join([JOB_MARKER, *entries])


def apply(e: Owner, request: dict, still_wanted: Callable[[], bool] = lambda: True,
          commit_point: Callable[[], bool] = lambda: True) -> int:
    """Append a request's staged rows in one transaction of the owner `e`; returns the rows the job appended (when
    it had landed before: the rows it appended then). `still_wanted` is asked before each batch and `commit_point`
    once before the commit: False from either aborts the transaction and raises Withdrawn."""
    topics = _topics(e.fs, request["files"])
    if not topics:
        return 0
    job, sink, batch_id = request["job"], request["sink_id"], request["batch_id"]
    marker = TopicPartition(min(topics), 0)
    producer = e.producer(transactional_id=request["transactional_id"], linger_ms=0, batch_size=1 << 20)
    try:
        producer.init_transactions()  # a transaction a dead owner left open is aborted (or completed) first
        done = e.committed(sink, marker)
        jobs = jobs_in(done)
        if batch_id is not None:  # a micro-batch: landed when the sink's group has passed its id
            if done is not None and done.offset > batch_id:
                return jobs.get(job, 0)  # its own job again (an answer lost), or Spark re-ran it in another job
        elif job in jobs:
            return jobs[job]
        producer.begin_transaction()
        try:
            rows = 0

            def ask() -> None:
                if not still_wanted():
                    raise Withdrawn(f"staged write {job} withdrawn after {rows} rows: aborted")
            for path in request["files"]:
                for appended in _append(e, producer, path, ask):
                    rows += appended
            offset = batch_id + 1 if batch_id is not None else (done.offset if done is not None else 0)
            producer.send_offsets_to_transaction({marker: OffsetAndMetadata(offset, with_job(jobs, job, rows))}, sink)
            if not commit_point():
                raise Withdrawn(f"staged write {job} withdrawn before its commit: aborted")
            producer.commit_transaction()
        except BaseException:
            producer.abort_transaction()
            raise
        return rows
    finally:
        producer.close()
