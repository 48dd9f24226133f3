"""A staged file of Kafka batches (`<path>/.kafkalog-staging/<job>/<attempt>.batches`): a Spark task attempt's
rows, encoded by the task (kafkalog.spark.StagedBatches on the JVM, engine.spark.sink in Python workers), for the
commit to append.

Byte layout: frames, one after another to the end of the file, each
- the topic's name: int16 length, then UTF-8;
- the partition: int32, chosen by the task (the row's own, or Kafka's partitioner);
- flags: int8, bit 0 (STAMPED_AT_COMMIT): the batch's timestamps are the commit's (its rows had none);
- one uncompressed RecordBatch v2 (kafka-format.md), base offset 0, no producer (id -1, epoch -1, base sequence
  -1), its CRC over what the task wrote; the batch's size field gives its length.
All integers are big-endian. A file ends after a whole frame; anything else (a torn write, bytes that are not a
batch, a CRC that does not match) is a CorruptRecordError naming the file and the frame's position.
Crash policy: read only, and only the files of attempts Spark committed (complete: a task closes its file before it
reports); a killed attempt's file is named by no commit and goes with the job's folder.
Thread-safety: the functions hold no state; each call reads its file with its own handle.
"""
from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from engine.common.errors import CorruptRecordError
from engine.record import batch_format as bf
from engine.record.codec import iter_batches
from engine.segments.fs import FileSystem

SUFFIX = ".batches"
STAMPED_AT_COMMIT = 0x01
_PARTITION_FLAGS = struct.Struct(">ib")


class Frame(NamedTuple):
    """One staged batch: where it goes, and its bytes (a bytearray the commit may restamp in place)."""

    topic: str
    partition: int
    stamped_at_commit: bool
    batch: bytearray

    @property
    def records(self) -> int:
        return int.from_bytes(self.batch[bf.HEADER_SIZE - 4:bf.HEADER_SIZE], "big")


def frame_head(topic: str, partition: int, stamped_at_commit: bool) -> bytes:
    """The bytes before a frame's batch."""
    name = topic.encode("utf-8")
    return len(name).to_bytes(2, "big") + name + _PARTITION_FLAGS.pack(partition, STAMPED_AT_COMMIT
                                                                       if stamped_at_commit else 0)


def is_staged_batches(path: str) -> bool:
    return path.endswith(SUFFIX)


def frames(fs: FileSystem, path: str) -> Iterator[Frame]:
    """Every frame of the file at `path`, in order, one batch read (and its CRC checked) at a time."""
    return _walk(fs, path, True)


def topics(fs: FileSystem, path: str) -> set[str]:
    """The topics the file's frames name (their heads only are read)."""
    return {frame.topic for frame in _walk(fs, path, False)}


def _walk(fs: FileSystem, path: str, read_batches: bool) -> Iterator[Frame]:
    def corrupt(position: int, why: str) -> CorruptRecordError:
        return CorruptRecordError(f"a staged batch file is damaged: {why}", file=path, offset=position)

    with fs.open(path, "rb") as f:
        size, position = fs.size(path), 0
        while position < size:
            head = fs.pread(f, 2, position)
            name_length = int.from_bytes(head, "big") if len(head) == 2 else 0
            fixed = 2 + name_length + _PARTITION_FLAGS.size
            head = fs.pread(f, fixed + bf.LOG_OVERHEAD, position) if name_length > 0 else b""
            if len(head) < fixed + bf.LOG_OVERHEAD:
                raise corrupt(position, f"a frame's head is empty or runs past the end ({size} bytes)")
            try:
                topic = head[2:2 + name_length].decode("utf-8")
            except UnicodeDecodeError:
                raise corrupt(position, "a topic name is not UTF-8") from None
            partition, flags = _PARTITION_FLAGS.unpack_from(head, 2 + name_length)
            length = bf.LOG_OVERHEAD + int.from_bytes(head[fixed + 8:fixed + 12], "big", signed=True)
            if length < bf.HEADER_SIZE or position + fixed + length > size:
                raise corrupt(position, f"a batch of {length} bytes does not fit the file ({size} bytes)")
            batch = bytearray()
            if read_batches:
                batch = bytearray(length)
                if fs.pread_into(f, batch, position + fixed) != length:
                    raise corrupt(position, "the file ended inside a batch")
                if batch[16] != bf.MAGIC or not next(iter_batches(batch)).is_valid():
                    raise corrupt(position, "a batch is not the RecordBatch v2 its task wrote (magic or CRC)")
            yield Frame(topic, partition, bool(flags & STAMPED_AT_COMMIT), batch)
            position += fixed + length
