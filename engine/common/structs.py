"""The small value types clients exchange, shaped like kafka-python's (`kafka.structs`).

`TopicPartition`, `OffsetAndMetadata`, `OffsetAndTimestamp` and `RecordMetadata` are named tuples with kafka-python's
fields, so code that unpacks them keeps working; `settings_of` builds a settings tuple from a dict. Immutable;
thread-safe. Imports only engine.common.errors.
"""
from __future__ import annotations

import operator
from functools import partial
from itertools import repeat
from typing import Iterable, NamedTuple

from engine.common.errors import InvalidConfigurationError


class TopicPartition(NamedTuple):
    topic: str
    partition: int


def topic_partitions(topic: str, partitions: Iterable[int]) -> list[TopicPartition]:
    """`[TopicPartition(topic, p) for p in partitions]` (ints), without a Python call per partition: a group's
    assignment of thousands of partitions is decoded, assigned and encoded on every rebalance. The TopicPartitions
    of partitions 0 to 65,535 of up to 4,096 topics are made once and shared (they are immutable): a named tuple
    costs ~0.14 µs to make, a shared one a lookup, and a run of them (an assignor's range) one slice."""
    if type(partitions) not in (list, tuple, range):
        partitions = list(partitions)
    if not partitions:
        return []
    shareable = type(topic) is str
    shared = _shared.get(topic) if shareable else None
    found = None if shared is None else _looked_up(shared, partitions)
    if found is None and shareable and min(partitions) >= 0 and (hi := max(partitions)) < _SHARED_PARTITIONS:
        found = _looked_up(_share(topic, shared or [], hi), partitions)
    return list(map(_NEW_TOPIC_PARTITION, zip(repeat(topic), partitions))) if found is None else found


def _looked_up(shared: list[TopicPartition], partitions) -> list[TopicPartition] | None:
    """The shared TopicPartitions of `partitions` (by index: partition p is shared[p]); None when one of them is not
    shared yet, or is not a partition number an index would find (negative, not an int)."""
    if type(partitions) is range and partitions.step == 1 and partitions.start >= 0:
        return shared[partitions.start:partitions.stop] if partitions.stop <= len(shared) else None
    try:
        if min(partitions) < 0:  # (a negative index counts from the end)
            return None
        return [shared[partitions[0]]] if len(partitions) == 1 else list(operator.itemgetter(*partitions)(shared))
    except (IndexError, TypeError):
        return None


def _share(topic: str, shared: list[TopicPartition], hi: int) -> list[TopicPartition]:
    """`shared` grown to hold partition `hi` of `topic` (a new list: callers holding the old one keep it)."""
    size = min(max(hi + 1, 2 * len(shared), 64), _SHARED_PARTITIONS)
    added = range(len(shared), size)
    grown = shared + list(map(_NEW_TOPIC_PARTITION, zip(repeat(topic), added)))
    if len(_shared) >= _SHARED_TOPICS and topic not in _shared:
        _shared.clear()  # (topics come and go: the share starts again)
    _shared[topic] = grown
    return grown


_NEW_TOPIC_PARTITION = partial(tuple.__new__, TopicPartition)  # what the named tuple's __new__ does, in C
_SHARED_PARTITIONS, _SHARED_TOPICS = 1 << 16, 1 << 12
_shared: dict[str, list[TopicPartition]] = {}  # topic -> its TopicPartitions by partition (GIL: one op each)
TOPIC_OF, PARTITION_OF = operator.itemgetter(0), operator.itemgetter(1)  # a TopicPartition's fields, in C


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, with the committer's metadata string."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class RecordMetadata(NamedTuple):
    """Where a sent record landed (offset -1 with acks=0, as Kafka)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


def header_size(headers) -> int:
    """Kafka's serialized header size of (str, bytes|None) pairs: key and value bytes, as kafka-python reports."""
    if not headers:
        return -1
    return sum(len(k.encode("utf-8", "surrogateescape")) + (len(v) if v is not None else 0) for k, v in headers)


CONSUMER_RECORD_FIELDS = ("topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type", "key",
                          "value", "headers", "checksum", "serialized_key_size", "serialized_value_size",
                          "serialized_header_size")


def consumer_record_fields(r) -> tuple | None:
    """A ConsumerRecord's fields in kafka-python's order (None for anything else)."""
    try:
        return tuple(getattr(r, f) for f in CONSUMER_RECORD_FIELDS)
    except AttributeError:
        return None


def consumer_record_repr(r) -> str:
    return "ConsumerRecord(" + ", ".join(f"{f}={getattr(r, f)!r}" for f in CONSUMER_RECORD_FIELDS) + ")"


class ConsumerGroupMetadata(NamedTuple):
    """Where a consumer stands in its group (what send_offsets_to_transaction and on_assignment receive)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def settings_of(cls, settings: dict | None, kind: str):
    """`cls` (a NamedTuple of settings with defaults) from a dict of its field names; an unknown name is an
    InvalidConfigurationError that lists the known ones."""
    settings = dict(settings or {})
    unknown = set(settings) - set(cls._fields)
    if unknown:
        raise InvalidConfigurationError(f"unknown {kind} setting(s): {', '.join(sorted(unknown))} (known: "
                                        f"{', '.join(cls._fields)})")
    return cls(**settings)
