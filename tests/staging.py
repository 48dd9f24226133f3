"""Staging writes for the directory's owner to commit, as a Spark task of the kafkalog sink does
(engine.staged_writes): shared by the unit tests, the crash trials and the stress harness."""
from __future__ import annotations

import os

import pyarrow as pa

from engine.staged_writes import layout

SCHEMA = layout.staged_schema()


def stage_values(path, job: str, topic: str, values: list[bytes], *, rows_per_batch: int, name: str = "attempt",
                 partition: int | None = None, timestamp: int | None = None) -> str:
    """An Arrow file `<name>.arrow` in job `job`'s folder under the directory `path` (made as the sinks make it): the
    records of `values` for `topic`, `rows_per_batch` to a batch, with no key or headers, and with `partition` and
    `timestamp` (null: the owner chooses); the file's path."""
    file = os.path.join(layout.make_job_dir(path, job), f"{name}.arrow")
    with pa.OSFile(file, "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as out:
        for start in range(0, len(values), rows_per_batch):
            chunk = values[start:start + rows_per_batch]
            n = len(chunk)
            out.write_batch(pa.RecordBatch.from_arrays(
                [pa.array([topic] * n), pa.array([partition] * n, pa.int32()), pa.nulls(n, pa.binary()),
                 pa.array(chunk, pa.binary()), pa.nulls(n, SCHEMA.field("headers").type),
                 pa.array([timestamp] * n, pa.int64())], schema=SCHEMA))
    return file


def stage_batches(path, job: str, frames: list[tuple], name: str = "attempt") -> str:
    """A file of Kafka batches `<name>.batches` in job `job`'s folder (engine.staged_writes.staged_batches, as the
    JVM sink's tasks write it): one frame per (topic, partition, records, stamped_at_commit), each batch encoded by
    the engine's codec from its (key, value, headers, timestamp) records; the file's path."""
    from engine.record.codec import encode_batch

    file = os.path.join(layout.make_job_dir(path, job), f"{name}.batches")
    with open(file, "wb") as out:
        for topic, partition, records, stamped in frames:
            name_bytes = topic.encode()
            out.write(len(name_bytes).to_bytes(2, "big") + name_bytes + partition.to_bytes(4, "big", signed=True)
                      + bytes([1 if stamped else 0]) + encode_batch(records))
    return file
