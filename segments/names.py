"""Kafka's file and directory names (LogFileUtils, LocalLog, Topic).

Segment files are `<base offset, 20 digits>.<suffix>`; a partition directory is
`<topic>-<partition>`; temporary suffixes `.deleted`, `.cleaned`, `.swap` follow the normal one.
Pure functions; thread-safe.
"""
from __future__ import annotations

import functools
import re

from engine.common.errors import InvalidTopicError

LOG, INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT = ".log", ".index", ".timeindex", ".txnindex", ".snapshot"
DELETED, CLEANED, SWAP = ".deleted", ".cleaned", ".swap"
SEGMENT_SUFFIXES = (LOG, INDEX, TIME_INDEX, TXN_INDEX)
MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1
METADATA_TOPIC = "__cluster_metadata"  # a KRaft broker's metadata log (its `-0` directory is left alone)
# no client reads them
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", METADATA_TOPIC})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def file_name(offset: int, suffix: str) -> str:
    """`00000000000000000042.log` for (42, ".log")."""
    return f"{offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int:
    """The offset a segment or snapshot file is named after (the text before the first '.')."""
    return int(name.split(".", 1)[0])


def validate_topic(topic: str) -> str:
    """Refuse what Kafka refuses: empty, '.', '..', over 249 chars, or chars outside [a-zA-Z0-9._-]."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic name must be a non-empty string, got {topic!r}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is {len(topic)} characters, the maximum is {MAX_TOPIC_LENGTH}")
    if not _LEGAL.fullmatch(topic):
        raise InvalidTopicError(f"topic name {topic!r} may only contain ASCII letters, digits, '.', '_' and '-'")
    return topic


def partition_dir_name(topic: str, partition: int) -> str:
    validate_topic(topic)
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidTopicError(f"partition must be a non-negative int, got {partition!r}")
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a `<topic>-<partition>` directory name, or None if it is not one."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isascii() or not part.isdigit() or not topic or part != str(int(part)) \
            or int(part) > MAX_PARTITION:
        return None  # Kafka's partition is an int32 and its directory name carries it without leading zeros
    return (topic, int(part)) if _legal_topic(topic) else None


_SET_ASIDE = re.compile(r"(.+)\.([0-9a-f]{32})-(stray|delete)")


def parse_set_aside(name: str) -> tuple[str, int, str] | None:
    """(topic, partition, kind) of a partition directory set aside as `<topic>-<partition>.<32 hex>-<kind>` (Kafka's
    `-stray` and `-delete` directories), or None if it is not one."""
    m = _SET_ASIDE.fullmatch(name)
    tp = parse_partition_dir(m.group(1)) if m else None
    return None if tp is None else (tp[0], tp[1], m.group(3))


@functools.lru_cache(maxsize=4096)
def _legal_topic(topic: str) -> bool:
    """Whether `validate_topic` takes `topic` (remembered: a directory of many partitions names few topics)."""
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return False
    return True
