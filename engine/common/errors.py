"""Typed errors mirroring Kafka's, each with Kafka's error code and `retriable` flag.

Every error can name where it happened: `file` (a path), `position` (byte offset
in that file or buffer) and `offset` (a Kafka record offset). Errors pickle, so
they cross process boundaries (Spark workers, crash-test children).
Leaf module: imports nothing from kafkalog.
"""
from __future__ import annotations

from typing import Any


class KafkaError(Exception):
    """Base of every kafkalog error. `code` is Kafka's protocol error code."""

    code: int = -1  # UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(
        self,
        message: str = "",
        *,
        file: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.position = position
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file is not None:
            where.append(f"file {self.file}")
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.file, self.position, self.offset))


def _rebuild(cls, message, file, position, offset):
    return cls(message, file=file, position=position, offset=offset)


# --- records and batches -------------------------------------------------------------------
class CorruptRecordError(KafkaError):
    """CORRUPT_MESSAGE: bad CRC, bad framing, truncated or undecodable bytes."""

    code, retriable = 2, True


class InvalidRecordError(KafkaError):
    """INVALID_RECORD: a record that is well-formed bytes but breaks Kafka's rules. `record_errors`: (index of the
    record in its batch, why) of each refused record, where the refusal names records (Produce v8+'s record_errors,
    from which a client fails just those records)."""

    code = 87
    record_errors: tuple[tuple[int, str], ...] = ()


class RecordTooLargeError(KafkaError):
    """MESSAGE_TOO_LARGE: a record, batch or decompressed stream over its limit."""

    code = 10


class RecordBatchTooLargeError(KafkaError):
    """RECORD_LIST_TOO_LARGE: an append larger than the segment can hold."""

    code = 18


class UnsupportedCompressionTypeError(KafkaError):
    """UNSUPPORTED_COMPRESSION_TYPE: a codec id outside 0-4 or an unknown codec name."""

    code = 76


class UnsupportedMessageFormatError(KafkaError):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT: legacy magic 0/1 or an unknown magic."""

    code = 43


class InvalidTimestampError(KafkaError):
    """INVALID_TIMESTAMP."""

    code = 32


# --- topics, partitions, offsets ------------------------------------------------------------
class OffsetOutOfRangeError(KafkaError):
    """OFFSET_OUT_OF_RANGE: a fetch below the log start offset or past the end."""

    code = 1


class OffsetNotAvailableError(KafkaError):
    """OFFSET_NOT_AVAILABLE: no offset answers the lookup yet (a share group's by_duration reset finding no record
    as recent as its duration asks)."""

    code, retriable = 78, True


class UnknownTopicOrPartitionError(KafkaError):
    """UNKNOWN_TOPIC_OR_PARTITION."""

    code, retriable = 3, True


class InvalidTopicError(KafkaError):
    """INVALID_TOPIC_EXCEPTION: a name Kafka would refuse, or a reserved internal name."""

    code = 17


class TopicAlreadyExistsError(KafkaError):
    """TOPIC_ALREADY_EXISTS."""

    code = 36


class InvalidPartitionsError(KafkaError):
    """INVALID_PARTITIONS."""

    code = 37


class InvalidReplicationFactorError(KafkaError):
    """INVALID_REPLICATION_FACTOR."""

    code = 38


class InvalidReplicaAssignmentError(KafkaError):
    """INVALID_REPLICA_ASSIGNMENT: a manual replica assignment naming brokers that do not exist, or uneven."""

    code = 39


class InvalidRequiredAcksError(KafkaError):
    """INVALID_REQUIRED_ACKS: acks other than 0, 1 or -1 ('all')."""

    code = 21


class InvalidConfigurationError(KafkaError):
    """INVALID_CONFIG: an unknown config name or a value out of range."""

    code = 40


class PolicyViolationError(KafkaError):
    """POLICY_VIOLATION: a request a policy refuses (as Kafka's controller refuses an operation of more than 10,000
    metadata records)."""

    code = 44


class InvalidRequestError(KafkaError):
    """INVALID_REQUEST: a request the broker cannot serve as asked (malformed, or asking what it does not do)."""

    code = 42


class UnsupportedVersionError(KafkaError):
    """UNSUPPORTED_VERSION: a feature or option kafkalog does not support (yet)."""

    code = 35


# --- producers and transactions ------------------------------------------------------------
class OutOfOrderSequenceError(KafkaError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER."""

    code = 45


class DuplicateSequenceError(KafkaError):
    """DUPLICATE_SEQUENCE_NUMBER."""

    code = 46


class InvalidProducerEpochError(KafkaError):
    """INVALID_PRODUCER_EPOCH."""

    code = 47


class InvalidTxnStateError(KafkaError):
    """INVALID_TXN_STATE."""

    code = 48


class NoOffsetForPartitionError(KafkaError):
    """A consumer has no position for a partition and auto_offset_reset is 'none'."""


class ProducerFencedError(KafkaError):
    """PRODUCER_FENCED: another producer with the same transactional.id has a newer epoch."""

    code = 90


class InvalidProducerIdMappingError(KafkaError):
    """INVALID_PRODUCER_ID_MAPPING: the producer id is not the one the coordinator holds for the transactional id."""

    code = 49


class InvalidTransactionTimeoutError(KafkaError):
    """INVALID_TRANSACTION_TIMEOUT: transaction_timeout_ms outside [1, transaction.max.timeout.ms]."""

    code = 50


class TransactionCoordinatorFencedError(KafkaError):
    """TRANSACTION_COORDINATOR_FENCED: a marker from an older coordinator epoch."""

    code = 52


class TransactionalIdNotFoundError(KafkaError):
    """TRANSACTIONAL_ID_NOT_FOUND."""

    code = 105


class TransactionAbortableError(KafkaError):
    """TRANSACTION_ABORTABLE: the transaction can no longer commit (a send failed); abort it and retry."""

    code = 120


# --- replication and storage -----------------------------------------------------------------
class NotEnoughReplicasError(KafkaError):
    """NOT_ENOUGH_REPLICAS."""

    code, retriable = 19, True


class NotEnoughReplicasAfterAppendError(KafkaError):
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND: written by the leader, but the ISR shrank below min.insync.replicas."""

    code, retriable = 20, True


class NotLeaderOrFollowerError(KafkaError):
    """NOT_LEADER_OR_FOLLOWER: this broker does not host the partition as leader (or at all)."""

    code, retriable = 6, True


class FencedLeaderEpochError(KafkaError):
    """FENCED_LEADER_EPOCH: the request carries a leader epoch older than the partition's."""

    code, retriable = 74, True


class UnknownLeaderEpochError(KafkaError):
    """UNKNOWN_LEADER_EPOCH: the request carries a leader epoch newer than this replica knows."""

    code, retriable = 75, True


class StaleControllerEpochError(KafkaError):
    """STALE_CONTROLLER_EPOCH: a request from a controller that has been replaced."""

    code = 11


class KafkaTimeoutError(KafkaError):
    """REQUEST_TIMED_OUT: an operation did not finish in time."""

    code, retriable = 7, True


class IllegalStateError(KafkaError):
    """A client used after close(), or a call that its state does not allow."""


class UnknownServerError(KafkaError):
    """UNKNOWN_SERVER_ERROR: an unexpected failure in the process that served a request (its type and message say
    which)."""


class KafkaStorageError(KafkaError):
    """KAFKA_STORAGE_ERROR: an I/O failure in a log directory."""

    code, retriable = 56, True


class CorruptIndexError(KafkaStorageError):
    """An index file fails its sanity check (Kafka's CorruptIndexException)."""

    retriable = False


class InvalidOffsetError(KafkaError):
    """An index or log append whose offset does not increase (Kafka's InvalidOffsetException)."""


class InvalidLogDirectoryError(KafkaStorageError):
    """The path cannot hold a log directory: a file, under a file, or not accessible."""

    retriable = False


class LogDirectoryLockedError(KafkaStorageError):
    """The log directory's `.lock` is held by another process or engine."""

    retriable = False


# --- consumer groups ------------------------------------------------------------------------------
class CoordinatorNotAvailableError(KafkaError):
    """COORDINATOR_NOT_AVAILABLE: the group is being unloaded or is dead."""

    code, retriable = 15, True


class OffsetMetadataTooLargeError(KafkaError):
    """OFFSET_METADATA_TOO_LARGE: a committed offset's metadata is over offset.metadata.max.bytes (4096)."""

    code = 12


class IllegalGenerationError(KafkaError):
    """ILLEGAL_GENERATION: a request from an older generation of the group."""

    code = 22


class InconsistentGroupProtocolError(KafkaError):
    """INCONSISTENT_GROUP_PROTOCOL: the member shares no assignment protocol (or protocol type) with the group."""

    code = 23


class InvalidGroupIdError(KafkaError):
    """INVALID_GROUP_ID: the group id is empty or not a string."""

    code = 24


class UnknownMemberIdError(KafkaError):
    """UNKNOWN_MEMBER_ID: the coordinator does not know this member (evicted, or it left)."""

    code = 25


class InvalidSessionTimeoutError(KafkaError):
    """INVALID_SESSION_TIMEOUT: outside [group.min.session.timeout.ms, group.max.session.timeout.ms]."""

    code = 26


class RebalanceInProgressError(KafkaError):
    """REBALANCE_IN_PROGRESS: the group is rebalancing; rejoin it."""

    code = 27


class NonEmptyGroupError(KafkaError):
    """NON_EMPTY_GROUP: the operation needs a group with no active members."""

    code = 68


class GroupIdNotFoundError(KafkaError):
    """GROUP_ID_NOT_FOUND: no such group."""

    code = 69


class FencedInstanceIdError(KafkaError):
    """FENCED_INSTANCE_ID: another member joined with this group.instance.id."""

    code = 82


class FencedMemberEpochError(KafkaError):
    """FENCED_MEMBER_EPOCH: the consumer group protocol's coordinator fenced this member epoch; the member gives up
    its partitions and joins again with epoch 0."""

    code = 110


class UnreleasedInstanceIdError(KafkaError):
    """UNRELEASED_INSTANCE_ID: another member of the consumer group still holds this group.instance.id."""

    code = 111


class UnsupportedAssignorError(KafkaError):
    """UNSUPPORTED_ASSIGNOR: the coordinator has no server assignor of that name."""

    code = 112


class StaleMemberEpochError(KafkaError):
    """STALE_MEMBER_EPOCH: an offset commit or fetch carried a member epoch the member has moved past; it retries
    with the epoch of its last heartbeat."""

    code = 113


class InvalidRegularExpressionError(KafkaError):
    """INVALID_REGULAR_EXPRESSION: a consumer group member's SubscribedTopicRegex is not a regular expression of
    Kafka's dialect (RE2's syntax)."""

    code = 128


class UnknownTopicIdError(KafkaError):
    """UNKNOWN_TOPIC_ID: no topic has this topic id (deleted, or never made here)."""

    code, retriable = 100, True


class InvalidRecordStateError(KafkaError):
    """INVALID_RECORD_STATE: a share group acknowledgement names a record this member has not acquired (another
    member holds it, its acquisition lock timed out, or it was already acknowledged)."""

    code = 121


class ShareSessionNotFoundError(KafkaError):
    """SHARE_SESSION_NOT_FOUND: a ShareFetch or ShareAcknowledge names a share session the broker does not have; the
    client opens a new one (epoch 0)."""

    code, retriable = 122, True


class InvalidShareSessionEpochError(KafkaError):
    """INVALID_SHARE_SESSION_EPOCH: the share session epoch is not the next one the session expects."""

    code, retriable = 123, True


class CommitFailedError(KafkaError):
    """The commit cannot complete: the group rebalanced and the partitions may belong to another member
    (the Java client's CommitFailedException)."""


class CleaningAbortedError(KafkaError):
    """A log changed (truncation, retention, close) while the cleaner compacted it: the clean's output was
    discarded and a later clean starts again (Kafka's LogCleaningAbortedException)."""

    retriable = True


# --- a Kafka cluster (engine.mirror) -----------------------------------------------------------
class BrokerNotAvailableError(KafkaError):
    """No broker of the cluster answered (unreachable, refused, or the bootstrap list names none)."""

    code, retriable = 8, True


class TopicAuthorizationFailedError(KafkaError):
    code = 29


class GroupAuthorizationFailedError(KafkaError):
    code = 30


class ClusterAuthorizationFailedError(KafkaError):
    code = 31


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = 53


def not_supported_yet(feature: str) -> UnsupportedVersionError:
    """The error for an option that a later kafkalog release implements."""
    return UnsupportedVersionError(f"{feature} is not supported yet by kafkalog")


__all__ = sorted(
    [n for n, o in list(globals().items()) if isinstance(o, type) and issubclass(o, KafkaError)]
    + ["not_supported_yet"]
)
