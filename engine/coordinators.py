"""The engine's coordinators, made on first use: the transaction coordinator with the committed offsets of
transactions (engine.transactions), the group coordinator (engine.groups.group_coordinator) and the share group
coordinator (engine.groups.share_group_coordinator). They keep their state in internal topics
(`__transaction_state`, `__consumer_offsets`, `__share_group_state`), which they write through the coordinators' side
of the engine (engine.internal_topics: appends and markers with acks='all').

State: the coordinators once made, and the group and transaction configs they are made with.
On disk: nothing of its own (the internal topics' records; see each coordinator).
Threads: made under a lock of their own, never the engine's admin lock (a client's first transactional or group call
must not wait for a topic change); their periodic work (timeouts, expiry) runs on broker 0's log manager thread and
does nothing once the engine is closing.
"""
from __future__ import annotations

import threading
from typing import Callable

from engine.common.clock import Clock
from engine.groups import offsets as group_offsets
from engine.groups.consumer_group import TopicsView
from engine.groups.group_coordinator import GroupCoordinator, GroupLog
from engine.groups.group_coordinator_config import GroupConfig
from engine.groups import share_state_records
from engine.groups.share_group_coordinator import ShareGroupCoordinator
from engine.internal_topics import InternalTopics
from engine.transactions import Transactions
from engine.txn.transaction_coordinator import TransactionConfig


class Coordinators:
    """The transaction and group coordinators of one engine: made over `internal` on `clock`; `closed()` says the
    engine is closing (their periodic work then does nothing); the transaction coordinator takes producer ids from
    `allocate_producer_id()` and the partitions to look for orphans in from `transaction_partitions()`; the group
    coordinator's consumer groups learn the topics they subscribe to from `topics(names)`; the share group coordinator
    reads partitions through `share_reads` (topic_named, partition, dynamic, available: its constructor's)."""

    def __init__(self, internal: InternalTopics, clock: Clock, closed: Callable[[], bool], group_config: GroupConfig,
                 transaction_config: TransactionConfig, *, allocate_producer_id: Callable[[], int],
                 transaction_partitions: Callable[[], set[tuple[str, int]] | None],
                 topics: TopicsView | None = None, share_reads: dict[str, Callable] | None = None) -> None:
        self._internal, self._clock, self._closed, self._topics = internal, clock, closed, topics
        self._share_reads = share_reads or {}
        self._share: ShareGroupCoordinator | None = None
        self.group_config, self.transaction_config = group_config, transaction_config
        self._allocate_producer_id, self._transaction_partitions = allocate_producer_id, transaction_partitions
        self._lock = threading.RLock()
        self._txn: Transactions | None = None
        self._groups: GroupCoordinator | None = None

    def load_existing(self) -> None:
        """On open: make the coordinators whose internal topics exist, so their timeouts and expiry run. (The share
        group coordinator has none to run after a restart, since members and acquisitions are memory only: it loads
        `__share_group_state` on first use, so a directory whose state records it cannot read, a later Kafka's, opens
        and says so only when share groups are used.)"""
        topics = self._internal.internal_topics()
        if group_offsets.TOPIC in topics:
            self.groups  # noqa: B018 (loads groups and offsets)
        if topics:
            self.transactions  # noqa: B018

    @property
    def transactions(self) -> Transactions:
        """The transaction coordinator and the committed group offsets (created on first use)."""
        if self._txn is None:
            with self._lock:
                if self._txn is None:
                    self._txn = Transactions(
                        self._internal, self._clock, self.transaction_config, groups=lambda: self.groups,
                        allocate_producer_id=self._allocate_producer_id,
                        transaction_partitions=self._transaction_partitions)
        return self._txn

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator: consumer groups and their committed offsets (loaded on first use)."""
        if self._groups is None:
            with self._lock:
                if self._groups is None:
                    groups = GroupCoordinator(GroupLog(self._internal), self._clock, self.group_config, self._topics)
                    if self._internal.adopted(group_offsets.TOPIC):
                        groups.load()
                    self._groups = groups
        return self._groups

    @property
    def share_groups(self) -> ShareGroupCoordinator:
        """The share group coordinator (made on first use, loading `__share_group_state`)."""
        if self._share is None:
            with self._lock:
                if self._share is None:
                    share = ShareGroupCoordinator(self._internal, self._clock, self._topics,
                                                  other_group=self._other_group, config=self.group_config,
                                                  **self._share_reads)
                    if self._internal.adopted(share_state_records.TOPIC):
                        share.load()
                    self._share = share
        return self._share

    def _other_group(self, group_id: str) -> bool:
        """Whether a classic or consumer group has this id (a share group may not take it)."""
        groups = self.groups
        return group_id in groups.consumer.groups or group_id in groups.groups

    def _running(self, coordinator):
        """`coordinator` if it was made and the engine is not closing (a closing engine's tasks do nothing)."""
        return coordinator if coordinator is not None and not self._closed() else None

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort transactions open past their timeout (a background task, every
        transaction.abort.timed.out.transaction.cleanup.interval.ms)."""
        txn = self._running(self._txn)
        return txn.coordinator.abort_timed_out() if txn else 0

    def expire_transactional_ids(self) -> int:
        """Forget transactional ids idle past transactional.id.expiration.ms (a background task, hourly)."""
        txn = self._running(self._txn)
        return txn.coordinator.expire_ids() if txn else 0

    def tick_groups(self) -> int:
        """Apply group deadlines (session and rebalance timeouts) nobody is waiting on (a background task)."""
        groups, share = self._running(self._groups), self._running(self._share)
        return (groups.tick() if groups else 0) + (share.tick() if share else 0)

    def expire_group_offsets(self) -> int:
        """Tombstone offsets past offsets.retention.minutes (a background task every 10 minutes)."""
        groups = self._running(self._groups)
        return groups.expire_offsets() if groups else 0
