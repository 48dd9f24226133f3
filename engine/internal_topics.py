"""What the coordinators write and read of an open engine: the internal topics (`__transaction_state`,
`__consumer_offsets`: created on first use, 50 partitions, replicated up to 3 times), their leaders, the
coordinator's appends to them and the transaction markers it writes to any partition, all with acks='all' (Kafka's
ReplicaManager.appendRecords with origin Coordinator, and WriteTxnMarkers).

On disk: nothing of its own (the partitions' logs; the catalogue records the topics: engine.admin_manager).
Crash policy: an append or a marker returns once the ISR holds it, as a client's acks='all' append does.
Thread-safety: thread-safe: the leader map is read as a whole, a partition serialises its own appends, and topic
creation takes the admin manager's lock.
"""
from __future__ import annotations

from typing import Callable

from engine.admin_manager import AdminManager
from engine.common.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from engine.log.unified_log import CLIENT, AppendInfo
from engine.metadata import Catalogue
from engine.replica_manager import ReplicaManager
from engine.replication.partition import LazyPartition, Partition

INTERNAL_WRITE_TIMEOUT_MS = 30_000


class InternalTopics:
    """The coordinators' side of one engine (see the module docstring): `leaders` is the engine's map of each
    partition's leader, `appended(topic, partition)` wakes the engine's waiters after a marker."""

    def __init__(self, path: str, catalogue: Catalogue, leaders: dict[tuple[str, int], Partition],
                 admin: AdminManager, replicas: ReplicaManager, check_open: Callable[[], None],
                 appended: Callable[[str, int], None]) -> None:
        self.path, self._catalogue, self._leaders = path, catalogue, leaders
        self._admin, self._replicas, self._check_open, self._appended = admin, replicas, check_open, appended

    def internal_topics(self) -> dict[str, int]:
        """The internal topics this directory has, with their partition counts."""
        return self._admin.internal_topics()

    def adopted(self, name: str) -> bool:
        """Whether internal topic `name` exists, adopting a broker's partitions of it first if the directory has
        some (so a coordinator loads the groups or transactions a broker left there)."""
        if self._admin.adoptable(name):
            self._admin.ensure_internal_topic(name)
        return name in self._admin.internal_topics()

    def ensure_internal_topic(self, name: str) -> bool:
        """Create internal topic `name` unless it exists; a broker's own partitions of it are adopted as they are.
        True if it was created now."""
        return self._admin.ensure_internal_topic(name)

    def internal_partition(self, topic: str, partition: int) -> Partition:
        """The leader of an internal topic's partition (NotLeaderOrFollowerError when it has none)."""
        found = self._leaders.get((topic, partition))
        if found is None:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader", file=self.path)
        return self._replicas.made(found)

    def leaders(self) -> dict[tuple[str, int], Partition | LazyPartition]:
        """Every partition's leader, internal topics included (LazyPartition: not made yet, see
        engine.replication.partition)."""
        return dict(self._leaders)

    def append_internal(self, topic: str, partition: int, data, origin: str = CLIENT) -> AppendInfo:
        """A coordinator's append to an internal topic, acks='all'."""
        self._check_open()
        part = self.internal_partition(topic, partition)
        info = part.append(data, -1, origin)
        self._replicas.wait_for_replication(part, info, INTERNAL_WRITE_TIMEOUT_MS)
        return info

    def append_marker(self, topic: str, partition: int, commit: bool, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, timeout_ms: int) -> AppendInfo:
        """WriteTxnMarkers to one partition (any topic), acks='all'."""
        self._check_open()
        part = self._leaders.get((topic, partition))
        if part is None:
            rec = self._catalogue.topics.get(topic)
            if rec is None or partition >= rec.partitions:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.path)
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader", file=self.path)
        part = self._replicas.made(part)
        info = part.append_marker(commit, producer_id, producer_epoch, coordinator_epoch)
        self._replicas.wait_for_replication(part, info, timeout_ms)
        self._appended(topic, partition)
        return info
