"""What every handler family of the listener shares: Kafka's error codes for exceptions, the codes the handlers
answer with, the two ways a handler turns an engine call into a code, and topic ids as the wire carries them. No
state; thread-safe."""
from __future__ import annotations

from typing import Callable

from engine.common.errors import InvalidReplicaAssignmentError, KafkaError, UnknownTopicOrPartitionError
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.groups import offsets
from engine.txn import transaction_log

NODE_ID = 0  # the one node a listener presents
UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 33, 34
UNSUPPORTED_VERSION = 35
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OPERATION_NOT_ATTEMPTED = 55
SASL_AUTHENTICATION_FAILED = 58
GROUP_ID_NOT_FOUND = 69
UNKNOWN_TOPIC_ID = 100
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75
COORDINATOR_TOPICS = (offsets.TOPIC, transaction_log.TOPIC)  # the internal topics Kafka's APIs describe


def error_code(exc: BaseException) -> int:
    """Kafka's code for an exception (UNKNOWN_SERVER_ERROR for anything not one of Kafka's errors)."""
    return getattr(exc, "code", UNKNOWN_SERVER_ERROR) if isinstance(exc, KafkaError) else UNKNOWN_SERVER_ERROR


def code_of(call: Callable[[], object]) -> int:
    """0 when `call()` returns, else the Kafka code of what it raised."""
    try:
        call()
        return 0
    except KafkaError as exc:
        return error_code(exc)


def error_of(call: Callable[[], object]) -> tuple[int, str | None]:
    """(0, None) when `call()` returns, else (Kafka's code, the message); a bad config value is INVALID_CONFIG."""
    try:
        call()
        return 0, None
    except KafkaError as exc:
        return error_code(exc), str(exc)
    except (ValueError, TypeError) as exc:
        return INVALID_CONFIG, str(exc)


def check_assignment(replicas: list[list[int]], indexes: list[int] | None = None) -> None:
    """A manual replica assignment a one-node listener can honour: partitions 0..n-1 (`indexes`, when the request
    numbers them), each with node 0 as its one replica; InvalidReplicaAssignmentError otherwise."""
    if indexes is not None and sorted(indexes) != list(range(len(indexes))):
        raise InvalidReplicaAssignmentError(f"the assignment's partitions {sorted(indexes)} are not 0 to "
                                            f"{len(indexes) - 1}")
    for ids in replicas:
        if list(ids) != [NODE_ID]:
            raise InvalidReplicaAssignmentError(f"replicas {list(ids)}: this listener is one node, id {NODE_ID}, "
                                                f"and holds every partition's one replica")


def committed_offsets(topics: list[dict]) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets an OffsetCommit or TxnOffsetCommit request carries."""
    return {TopicPartition(t["name"], p["partition_index"]):
            OffsetAndMetadata(p["committed_offset"], p["committed_metadata"] or "", p["committed_leader_epoch"])
            for t in topics for p in t["partitions"]}


def partition_codes(topics: list[dict], code: int, unknown=frozenset()) -> list[dict]:
    """An OffsetCommit or TxnOffsetCommit response's topics: `code` for every partition the request named, but
    UNKNOWN_TOPIC_OR_PARTITION for those in `unknown`."""
    return [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"],
         "error_code": UnknownTopicOrPartitionError.code if (t["name"], p["partition_index"]) in unknown else code}
        for p in t["partitions"]]} for t in topics]


def partition_count(engine, topic: str, unknown: int) -> int:
    """The partitions `topic` has, or `unknown` when no such topic is there for clients."""
    try:
        return engine.partitions_for(topic)
    except KafkaError:
        return unknown


def commit_split(engine, committed: dict) -> tuple[dict, set]:
    """The offsets of an OffsetCommit or TxnOffsetCommit that Kafka commits (partitions that exist), and the
    partitions it answers UNKNOWN_TOPIC_OR_PARTITION instead (as Kafka's KafkaApis checks its metadata first)."""
    counts = {topic: partition_count(engine, topic, 0) for topic in {tp.topic for tp in committed}}
    unknown = {(tp.topic, tp.partition) for tp in committed if not 0 <= tp.partition < counts[tp.topic]}
    return {tp: o for tp, o in committed.items() if (tp.topic, tp.partition) not in unknown}, unknown
