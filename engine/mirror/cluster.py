"""A Kafka cluster as the mirror sees it, through confluent-kafka (librdkafka): clients, topics, group offsets, and
librdkafka's errors as kafkalog's typed errors.

No file of its own. Thread-safety: a `Cluster` is used by one mirror thread.
"""
from __future__ import annotations

import logging
import time

from engine.common import errors

log = logging.getLogger("kafkalog.mirror")
_librdkafka = logging.getLogger("kafkalog.mirror.librdkafka")  # librdkafka's own log lines: debug only
_librdkafka.propagate = False
_librdkafka.addHandler(logging.NullHandler())

# topic configs not copied to the destination (MirrorMaker 2's default exclusions): throttles and
# min.insync.replicas depend on the destination's brokers, and the destination keeps the source's timestamps
# (a LogAppendTime destination would overwrite them)
NOT_COPIED = frozenset({"follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
                        "message.timestamp.difference.max.ms", "message.timestamp.type",
                        "unclean.leader.election.enable", "min.insync.replicas"})
TIMEOUT_S = 30.0


def kafka():
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401 (a submodule: loaded for confluent_kafka.admin below)
    except ImportError as exc:  # an optional dependency: say how to get it
        raise errors.UnsupportedVersionError(
            "mirroring to or from a Kafka cluster needs confluent-kafka: pip install 'kafkalog[kafka]'") from exc
    return confluent_kafka


def typed(exc_or_error, what: str) -> errors.KafkaError:
    """librdkafka's error (a KafkaException or a KafkaError) as kafkalog's typed error, with what was being done."""
    ck = kafka()
    err = exc_or_error.args[0] if isinstance(exc_or_error, ck.KafkaException) else exc_or_error
    code = err.code()
    E = ck.KafkaError
    table = {
        E._TRANSPORT: errors.BrokerNotAvailableError, E._ALL_BROKERS_DOWN: errors.BrokerNotAvailableError,
        E._RESOLVE: errors.BrokerNotAvailableError, E.BROKER_NOT_AVAILABLE: errors.BrokerNotAvailableError,
        E._TIMED_OUT: errors.KafkaTimeoutError, E.REQUEST_TIMED_OUT: errors.KafkaTimeoutError,
        E._MSG_TIMED_OUT: errors.KafkaTimeoutError,
        E._UNKNOWN_TOPIC: errors.UnknownTopicOrPartitionError,
        E.UNKNOWN_TOPIC_OR_PART: errors.UnknownTopicOrPartitionError,
        E._UNKNOWN_PARTITION: errors.UnknownTopicOrPartitionError,
        E.TOPIC_AUTHORIZATION_FAILED: errors.TopicAuthorizationFailedError,
        E.GROUP_AUTHORIZATION_FAILED: errors.GroupAuthorizationFailedError,
        E.CLUSTER_AUTHORIZATION_FAILED: errors.ClusterAuthorizationFailedError,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: errors.TransactionalIdAuthorizationFailedError,
        E._FENCED: errors.ProducerFencedError, E.PRODUCER_FENCED: errors.ProducerFencedError,
        E.INVALID_PRODUCER_EPOCH: errors.ProducerFencedError,
        E.TOPIC_ALREADY_EXISTS: errors.TopicAlreadyExistsError, E.INVALID_CONFIG: errors.InvalidConfigurationError,
        E.INVALID_PARTITIONS: errors.InvalidPartitionsError,
        E.INVALID_REPLICATION_FACTOR: errors.InvalidReplicationFactorError,
        E.UNKNOWN_MEMBER_ID: errors.UnknownMemberIdError, E.REBALANCE_IN_PROGRESS: errors.RebalanceInProgressError,
        E.ILLEGAL_GENERATION: errors.IllegalGenerationError,
    }
    cls = table.get(code)
    if cls is not None:
        out = cls(f"{what}: {err.str()}")
    else:
        out = ClusterError(f"{what}: {err.str()} ({err.name()})")
        out.code = code if code >= 0 else -1
    if err.retriable() or err.txn_requires_abort():  # an abortable transaction: the mirror restarts from progress
        out.retriable = True
    return out


class ClusterError(errors.KafkaError):
    """An error of the cluster's that kafkalog has no class for: `code` and `retriable` are the cluster's."""


class Cluster:
    """A cluster given by its client config (at least `bootstrap.servers`; any librdkafka setting, e.g. security)."""

    def __init__(self, config: dict, timeout_s: float = TIMEOUT_S) -> None:
        if not isinstance(config, dict) or not config.get("bootstrap.servers"):
            raise errors.InvalidConfigurationError("a Kafka cluster needs 'bootstrap.servers'")
        self.config = dict(config)
        self.timeout_s = timeout_s
        self._admin = None
        self._groups: dict = {}  # group id -> the consumer its offsets are read and committed with
        self.last_error: str | None = None
        self._no_admin: str | None = None  # why CreateTopics/DescribeConfigs cannot be sent (asked once)

    @property
    def servers(self) -> str:
        return self.config["bootstrap.servers"]

    def client_config(self, **extra) -> dict:
        return {"logger": _librdkafka, **self.config, "error_cb": self._error, **extra}

    def _error(self, err) -> None:
        """librdkafka reports connection trouble here and keeps retrying; the next call that times out says why."""
        self.last_error = err.str()
        log.debug("cluster %s: %s", self.servers, err.str())

    @property
    def admin(self):
        if self._admin is None:
            self._admin = kafka().admin.AdminClient(self.client_config())
        return self._admin

    def metadata(self, topic: str | None = None):
        """The cluster's metadata (BrokerNotAvailableError naming the bootstrap servers when none answers)."""
        try:
            md = self.admin.list_topics(topic, timeout=self.timeout_s)
            if md.controller_id not in md.brokers and not self._no_admin:  # e.g. librdkafka's mock cluster
                self._no_admin = f"the cluster names no controller (id {md.controller_id}) for admin requests"
            return md
        except kafka().KafkaException as exc:
            why = f" (last error: {self.last_error})" if self.last_error else ""
            err = typed(exc, f"cluster {self.servers} did not answer{why}")
            if isinstance(err, errors.KafkaTimeoutError):
                err = errors.BrokerNotAvailableError(err.message)
            raise err from None

    def topics(self) -> dict[str, int]:
        """Every topic (internal ones left out) with its partition count."""
        md = self.metadata()
        return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__") and t.error is None}

    def partitions(self, topic: str) -> int | None:
        t = self.metadata(topic).topics.get(topic)
        if t is None or t.error is not None:
            if t is not None and t.error.code() == kafka().KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise typed(t.error, f"topic {topic!r}")
            return None
        return len(t.partitions)

    def topic_configs(self, topic: str) -> tuple[dict, str | None]:
        """The configs set on `topic` (not defaults), and why none could be read (None when they were)."""
        ck = kafka()
        if self._no_admin:
            return {}, self._no_admin
        resource = ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, topic)
        try:
            entries = self.admin.describe_configs([resource], request_timeout=min(self.timeout_s, 10))[resource].result()
        except ck.KafkaException as exc:
            err = typed(exc, "DescribeConfigs")
            if isinstance(err, errors.KafkaTimeoutError):
                self._no_admin = str(err)
            return {}, str(err)
        dynamic = ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {e.name: e.value for e in entries.values() if e.source == dynamic and e.value is not None}, None

    def create_topic(self, topic: str, partitions: int, configs: dict, replication_factor: int = -1) -> str | None:
        """Create `topic` (the broker's default replication factor unless given); None when created or already
        there with at least `partitions`, else why the topic is as it is (the broker refused CreateTopics and
        creates topics on first use, say). InvalidPartitionsError when it exists with fewer partitions."""
        ck = kafka()
        new = ck.admin.NewTopic(topic, partitions, replication_factor,
                                config={k: str(v) for k, v in configs.items() if k not in NOT_COPIED})
        note = f"not created ({self._no_admin}): relying on the broker's auto.create.topics.enable" \
            if self._no_admin else None
        try:
            if not self._no_admin:
                self.admin.create_topics([new], request_timeout=min(self.timeout_s, 10))[topic].result()
                return None
        except ck.KafkaException as exc:
            err = typed(exc, f"creating topic {topic!r}")
            if isinstance(err, errors.KafkaTimeoutError):
                self._no_admin = str(err)
            if isinstance(err, (errors.TopicAuthorizationFailedError, errors.ClusterAuthorizationFailedError,
                                errors.InvalidConfigurationError, errors.InvalidReplicationFactorError)):
                raise err from None
            if not isinstance(err, errors.TopicAlreadyExistsError):
                note = f"not created ({err}): relying on the broker's auto.create.topics.enable"
        deadline = time.monotonic() + self.timeout_s
        while True:
            have = self.partitions(topic)
            if have is not None:
                break
            if time.monotonic() > deadline:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist on {self.servers} and "
                                                          f"could not be created")
            time.sleep(0.1)
        if have < partitions:
            raise errors.InvalidPartitionsError(f"topic {topic!r} on {self.servers} has {have} partitions, the "
                                                f"source has {partitions}: records keep their partition number")
        return note

    def _group_client(self, group: str):
        """The one consumer (never subscribed) that reads and commits `group`'s offsets, kept until close()."""
        if group not in self._groups:
            self._groups[group] = kafka().Consumer(self.client_config(**{"group.id": group,
                                                                        "enable.auto.commit": False}))
        return self._groups[group]

    def close(self) -> None:
        """Close the clients kept for groups."""
        groups, self._groups = self._groups, {}
        for consumer in groups.values():
            consumer.close()

    def committed(self, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offsets (partitions without one left out)."""
        ck = kafka()
        try:
            found = self._group_client(group).committed([ck.TopicPartition(t, p) for t, p in tps],
                                                        timeout=self.timeout_s)
        except ck.KafkaException as exc:
            raise typed(exc, f"offsets of group {group!r}") from None
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit for a group with no active member (UnknownMemberIdError when it has some)."""
        ck = kafka()
        try:
            out = self._group_client(group).commit(
                offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
            for tp in out or ():
                if tp.error is not None:
                    raise typed(tp.error, f"committing for group {group!r}")
        except ck.KafkaException as exc:
            raise typed(exc, f"committing for group {group!r}") from None

    def end_offset(self, consumer, topic: str, partition: int) -> int:
        ck = kafka()
        try:
            return consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=self.timeout_s)[1]
        except ck.KafkaException as exc:
            raise typed(exc, f"end offset of {topic}-{partition}") from None
