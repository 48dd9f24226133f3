"""A consumer's side of the consumer group protocol (KIP-848; Kafka's ConsumerMembershipManager), in process: the
member the consumers make with `group_protocol="consumer"`.

No member leads and nothing is assigned on the client: the member sends ConsumerGroupHeartbeat to the engine's group
coordinator (engine.groups.consumer_group_coordinator) and the coordinator answers with the partitions the member may
own now. The member makes its id itself (as Kafka 4's clients do) and joins with epoch 0 and its subscription; a
heartbeat then carries its epoch and the partitions it owns, and the subscription again whenever it changed.
Heartbeats go from the engine's heartbeat thread every heartbeat interval (the coordinator's
group.consumer.heartbeat.interval.ms) and from `poll()` when one is due or the member has something to say; the
answer's assignment is kept, and the consumer's thread applies it at its next poll, never in the poll whose heartbeat
brought it (as the Java consumer runs its callbacks on the application thread; the asyncio consumer runs a poll with an
assignment pending off its loop, where a listener may wait for the loop): auto-commit, `on_partitions_revoked` for what it loses, the new assignment,
`on_partitions_assigned` for what it gains, then a heartbeat at once so the coordinator learns the revocation and
can hand those partitions on. A member fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) calls `on_partitions_lost`,
does not commit, and joins again with epoch 0 under the same id. The heartbeat thread leaves the group (epoch -1)
when poll() was not called for max_poll_interval_ms; close() commits, revokes and leaves (a static member leaves with
epoch -2 and keeps its partitions for its return). Client-side assignors do not apply: `group_remote_assignor`
names the server assignor to ask for.
Byte layout and crash policy: none (memory only; the coordinator keeps the membership).
Thread-safety: the consumer's thread and the heartbeat thread share the member's state under one lock; the
listener runs on the consumer's thread only.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from engine.common.closing import Steps
from engine.common.errors import (
    CommitFailedError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    KafkaError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from engine.clients.consumer_coordinator import ConsumerRebalanceListener
from engine.groups.consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, Heartbeat, new_member_id

log = logging.getLogger("kafkalog.consumer")
_REJOIN = (FencedMemberEpochError, UnknownMemberIdError, GroupIdNotFoundError)  # partitions lost, join again


class ConsumerProtocolMember:
    def __init__(self, consumer, groups, *, group_id: str, group_instance_id: str | None, client_id: str,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int, rebalance_timeout_ms: int,
                 auto_commit: Callable[[], None] | None, remote_assignor: str | None = None) -> None:
        self._consumer, self._groups, self._clock = consumer, groups, consumer.engine.clock
        self._admin = consumer.engine.admin
        self.group_id, self.group_instance_id, self.client_id = group_id, group_instance_id, client_id
        self.heartbeat_interval_ms = heartbeat_interval_ms  # until the coordinator's first answer says its own
        self.max_poll_interval_ms, self.rebalance_timeout_ms = max_poll_interval_ms, rebalance_timeout_ms
        self.remote_assignor = remote_assignor
        self.auto_commit = auto_commit
        self.listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        self.member_id, self.epoch = new_member_id(), 0
        self.owned: set[TopicPartition] = set()
        self._lock = threading.Lock()
        self._target: set[TopicPartition] | None = None  # an answer's assignment, for the consumer's thread
        self._lost = False  # the coordinator fenced the member: its partitions are lost
        self._resend = True  # the next heartbeat carries the subscription (and goes at once)
        self._next_beat = 0
        self._nudged = False  # the coordinator said the member has a step to take: heartbeat at the next poll
        self._fatal: KafkaError | None = None
        self._last_poll = self._clock.time_ms()
        self._heartbeats = consumer.engine.heartbeats
        self._stop = threading.Event()
        self._scheduled = False

    # --- the consumer's thread --------------------------------------------------------------------
    def metadata(self) -> ConsumerGroupMetadata:
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self.epoch, self.member_id, self.group_instance_id)

    def request_rejoin(self) -> None:
        """The subscription changed (or a subscribed topic did): say so in the next heartbeat, at the next poll."""
        with self._lock:
            self._resend = True

    def rebalancing(self) -> bool:
        with self._lock:
            return self._resend or self.epoch <= 0 or self._target is not None or self._lost

    def in_flight(self) -> None:
        """Nothing is ever held: a heartbeat's answer comes back in the call."""
        return None

    def poll(self, deadline_ms: int) -> bool:
        """Heartbeat if one is due, apply what the coordinator assigned; True when the member holds its assignment."""
        if self._fatal is not None:
            raise self._fatal
        now = self._last_poll = self._clock.time_ms()
        # what earlier answers brought first (a poll with a pending assignment is `rebalancing()`: the asyncio
        # consumer runs it off the loop, where its listener may be called), then a heartbeat if one is due or the
        # member gave something up; what that answer brings waits for the next poll
        gave_up = self._reconcile()
        with self._lock:
            due = self._resend or self.epoch <= 0 or now >= self._next_beat or self._nudged
        if due or gave_up:
            self._heartbeat()
        if not self._scheduled and not self._stop.is_set():
            self._scheduled = self._heartbeats.add(self, self.heartbeat_interval_ms, self._beat)
        return not self.rebalancing()

    def _reconcile(self) -> bool:
        """Apply a fencing or a new assignment (listener calls included); whether a heartbeat should follow."""
        with self._lock:
            lost, target = self._lost, self._target
            self._lost, self._target = False, None
        if lost and self.owned:
            self._revoke(self.owned, lost=True)
        if target is None or target == self.owned:
            return lost
        revoked, added = self.owned - target, target - self.owned
        if revoked:
            if self.auto_commit is not None:
                self.auto_commit()
            self._revoke(revoked, lost=False)
        self.owned = set(target)
        self._consumer.set_assignment(self.owned)
        self.listener.on_partitions_assigned(added)
        return bool(revoked)

    def _revoke(self, partitions: set[TopicPartition], lost: bool) -> None:
        try:
            (self.listener.on_partitions_lost if lost else self.listener.on_partitions_revoked)(set(partitions))
        finally:
            self.owned = self.owned - partitions  # (a new set: the heartbeat thread may be reading the old one)
            self._consumer.set_assignment(self.owned)

    # --- heartbeats (either thread) ---------------------------------------------------------------
    def _owned_by_id(self) -> dict[str, frozenset[int]]:
        out: dict[str, set[int]] = {}
        for tp in self.owned:
            topic_id = self._admin.topic_id_of(tp.topic)
            if topic_id is not None:
                out.setdefault(topic_id, set()).add(tp.partition)
        return {t: frozenset(ps) for t, ps in out.items()}

    def _heartbeat(self, epoch: int | None = None) -> None:
        with self._lock:
            if self._fatal is not None or self._stop.is_set() and epoch is None:
                return
            joining = self.epoch == 0
            full = joining or self._resend
            sent = epoch if epoch is not None else self.epoch
            topics = sorted(self._consumer.subscription() or ()) if full else None
            hb = Heartbeat(self.group_id, self.member_id, sent, self.group_instance_id, None,
                           self.rebalance_timeout_ms if full else -1, topics, None,
                           self.remote_assignor if joining else None,
                           {} if joining else self._owned_by_id() if full or epoch is None else None, self.client_id)
            self._nudged = False  # (a nudge from here on asks for a later heartbeat)
            try:
                answer = self._groups.consumer_group_heartbeat(hb, self._nudge)
            except _REJOIN as exc:
                if epoch is None:
                    log.info("consumer %s of group %s: %s; joining again", self.client_id, self.group_id, exc.message)
                    self.epoch, self._lost, self._resend, self._target = 0, True, True, None
                return
            except KafkaError as exc:
                if epoch is None:
                    self._fatal = exc
                return
            if epoch is not None:
                return
            self.epoch, self._resend = answer.member_epoch, False
            self.heartbeat_interval_ms = answer.heartbeat_interval_ms or self.heartbeat_interval_ms
            self._next_beat = self._clock.time_ms() + self.heartbeat_interval_ms
            if answer.assignment is not None:
                self._target = {TopicPartition(name, p) for t, ps in answer.assignment.items()
                                if (name := self._admin.topic_named(t)) is not None for p in ps}
        self._consumer.wake()

    def _nudge(self) -> None:
        """The coordinator's word that a change to the group left this member a step to take (any thread; no lock, as
        the coordinator asks): heartbeat at the next poll, and wake a poll that waits for records."""
        self._nudged = True
        self._consumer.wake()

    def _beat(self) -> None:
        """The heartbeat thread's call: a heartbeat when one is due, or leaving once poll() stopped coming."""
        if self._stop.is_set():
            return
        if self._clock.time_ms() - self._last_poll > self.max_poll_interval_ms:
            log.warning("consumer %s of group %s: poll() was not called for max_poll_interval_ms=%d; leaving the "
                        "group", self.client_id, self.group_id, self.max_poll_interval_ms)
            self._leave()
            return
        with self._lock:
            due = self.epoch > 0 and self._clock.time_ms() >= self._next_beat
        if due:
            self._heartbeat()

    def _leave(self) -> None:
        """Epoch -1 (a static member: -2, keeping its partitions for its return); the next poll joins again."""
        with self._lock:
            if self.epoch <= 0:
                return
        self._heartbeat(STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH)
        with self._lock:
            self.epoch, self._lost, self._resend = 0, True, True

    # --- commits and close ------------------------------------------------------------------------
    def commit(self, committed: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit with the member's epoch (CommitFailedError once the member lost its membership)."""
        with self._lock:
            member_id, epoch = self.member_id, self.epoch
        try:
            self._groups.commit_offsets(self.group_id, committed, member_id, epoch, self.group_instance_id)
        except (UnknownMemberIdError, StaleMemberEpochError) as exc:
            raise CommitFailedError(f"commit of group {self.group_id!r} failed: {exc.message}; the member's "
                                    f"partitions may belong to another member now") from None

    def close(self, commit: Callable[[], None] | None) -> None:
        """Stop the heartbeats, then commit (if asked), revoke and leave: each step whatever the one before raised."""
        self._stop.set()
        self._heartbeats.remove(self)
        self._scheduled = False
        steps = Steps()
        if self.epoch > 0 and commit is not None:
            steps.run(commit)
        if self.owned:
            steps.run(self._revoke, self.owned, self.epoch <= 0)
        steps.run(self._leave)
        steps.raise_first()
