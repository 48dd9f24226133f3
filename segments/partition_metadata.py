"""`partition.metadata`: the topic id of a partition directory (Kafka's PartitionMetadataFile).

Byte layout: exactly `version: 0\\ntopic_id: <Uuid>` with no trailing newline, where the Uuid is
the URL-safe base64 (no padding) of its 16 bytes. Crash policy: written tmp + fsync + rename, or (a new partition,
among many) unsynced until one sync of the file system makes the whole request durable.
Thread-safety: written once by the log manager.
"""
from __future__ import annotations

import base64
import os
import re
import uuid

from engine.common.errors import KafkaStorageError
from engine.segments.fs import FileSystem

FILE = "partition.metadata"


def new_topic_id() -> str:
    """A random non-zero Kafka Uuid in its text form."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A Kafka Uuid (a topic id on the wire and in records) in the text form this file holds (topic_uuid's inverse)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_uuid(text: str | None) -> uuid.UUID | None:
    """A topic id's text form (22 characters of URL-safe base64, as this file holds it) as a UUID (None for text
    that is not one)."""
    if not text:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError):
        return None


def write(fs: FileSystem, directory: str, topic_id: str, sync: bool = True) -> None:
    """Write the file (tmp + fsync + rename; with `sync=False` in place and unsynced, for a new directory that the
    caller syncs with others: a torn or lost one is written again from the catalogue on the next open)."""
    data = f"version: 0\ntopic_id: {topic_id}".encode()
    if sync:
        fs.atomic_write(os.path.join(directory, FILE), data)
        return
    with fs.open(os.path.join(directory, FILE), "wb") as f:
        fs.write(f, data)


def read(fs: FileSystem, directory: str) -> str | None:
    path = os.path.join(directory, FILE)
    if not fs.exists(path):
        return None
    return parse(fs.read_bytes(path), path)


def parse(data: bytes, path: str | None = None) -> str:
    """The topic id in a `partition.metadata` file's bytes; KafkaStorageError when malformed."""
    try:
        fields = dict(re.split(r":\s+", line, maxsplit=1) for line in data.decode().splitlines() if line)
    except ValueError as exc:  # undecodable bytes, or a line without a "name: value" pair
        raise KafkaStorageError(f"malformed partition.metadata ({exc})", file=path) from exc
    topic_id = fields.get("topic_id", "")
    if fields.get("version") != "0" or not re.fullmatch(r"[A-Za-z0-9_-]{22}", topic_id):
        raise KafkaStorageError("malformed partition.metadata", file=path)
    return topic_id
