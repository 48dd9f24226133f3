"""Staging writes for the directory's owner to commit, as a Spark task of the kafkalog sink does
(engine.staged_writes): shared by the unit tests, the crash trials and the stress harness."""
from __future__ import annotations

import os

from engine.record.codec import encode_batch
from engine.staged_writes import layout
from engine.staged_writes.staged_batches import SUFFIX, frame_head


def stage_batches(path, job: str, frames: list[tuple], name: str = "attempt") -> str:
    """A file of Kafka batches `<name>.batches` in job `job`'s folder (engine.staged_writes.staged_batches, as the
    sinks' tasks write it): one frame per (topic, partition, records, stamped_at_commit), each batch encoded by
    the engine's codec from its (key, value, headers, timestamp) records; the file's path."""
    file = os.path.join(layout.make_job_dir(path, job), f"{name}{SUFFIX}")
    with open(file, "wb") as out:
        for topic, partition, records, stamped in frames:
            out.write(frame_head(topic, partition, stamped) + encode_batch(records))
    return file


def stage_values(path, job: str, topic: str, values: list[bytes], *, rows_per_batch: int, name: str = "attempt",
                 partition: int = 0, timestamp: int | None = None) -> str:
    """stage_batches of the records of `values` for `topic`-`partition`, `rows_per_batch` to a batch, with no key or
    headers, and with `timestamp` (None: the commit's)."""
    return stage_batches(path, job, [
        (topic, partition, [(None, v, [], timestamp or 0) for v in values[start:start + rows_per_batch]],
         timestamp is None) for start in range(0, len(values), rows_per_batch)], name=name)
