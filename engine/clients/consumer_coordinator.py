"""A consumer's side of group membership (Kafka's ConsumerCoordinator): join, sync, heartbeat and leave with
the engine's group coordinator (engine.groups.group_coordinator), assignment on the leader, the rebalance
listener, and the commits a member makes.

The consumer's thread drives rebalances from `poll()`: before joining it commits its positions (auto-commit)
and, under the eager protocol, revokes everything; the leader runs the chosen assignor; a member applies its
assignment and calls `on_partitions_assigned`. Under the cooperative protocol nothing is revoked before the join:
the member keeps consuming, revokes only what the new assignment takes away, and rejoins at once so the
partition can move in the next round. A member that lost its membership (session expiry, fencing) calls
`on_partitions_lost` instead of `on_partitions_revoked`, and does not commit.
A join or sync in flight is waited on for at most the poll's timeout and resumed by the next poll, as the Java
consumer does. The coordinator tells the member the moment a rebalance begins (in one process it can): the flag is
set and a poll waiting for records wakes, so no heartbeat paces a rebalance. The engine's heartbeat thread
(engine.clients.heartbeat_thread, one for all its members) sends this member's heartbeat every heartbeat_interval_ms
from its first join until close(), for liveness; the heartbeat flags a rebalance or a lost membership for the next
poll, and leaves the group when poll() was not called for max_poll_interval_ms (a static member does not leave: its
session timeout decides). It sends nothing while a round is under way, from the JoinGroup until the assignment is
applied (the Java client sends none while its JoinGroup is in flight): the member holds the old generation until then,
and the answer to a heartbeat of it would reset the member or ask it for one more round.
Thread-safety: the consumer's thread and the heartbeat thread share the member's identity under one lock.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from typing import Callable

from engine.common.closing import Steps
from engine.common.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from engine.common.structs import PARTITION_OF, TOPIC_OF, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from engine.groups import assignors as asg
from engine.groups import consumer_protocol as cp
from engine.groups.group_metadata import Pending

log = logging.getLogger("kafkalog.consumer")
_NO_ON_ASSIGNMENT = asg.ConsumerPartitionAssignor.on_assignment


class ConsumerRebalanceListener:
    """Callbacks around a rebalance (kafka-python's and the Java client's interface). Override what you need."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Before partitions are taken away: commit what was processed of them."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """After new partitions arrived (all of them under eager, the added ones under cooperative)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The member lost its membership: its partitions may already belong to another member (no commit)."""
        self.on_partitions_revoked(lost)


class ConsumerCoordinator:
    def __init__(self, consumer, groups, *, group_id: str, group_instance_id: str | None, client_id: str,
                 session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 rebalance_timeout_ms: int, assignors: list, auto_commit: Callable[[], None] | None) -> None:
        self._consumer, self._groups, self._clock = consumer, groups, consumer.engine.clock
        self.group_id, self.group_instance_id, self.client_id = group_id, group_instance_id, client_id
        self.session_timeout_ms, self.heartbeat_interval_ms = session_timeout_ms, heartbeat_interval_ms
        self.max_poll_interval_ms, self.rebalance_timeout_ms = max_poll_interval_ms, rebalance_timeout_ms
        self.assignors = assignors
        self.protocol = asg.rebalance_protocol(assignors)
        self.auto_commit = auto_commit  # commits the consumer's positions (enable_auto_commit), or None
        self.listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        self.member_id, self.generation = "", -1
        self.protocol_name: str | None = None
        self.owned: set[TopicPartition] = set()
        self._lock = threading.Lock()
        self._rejoin = True
        self._joining: Pending | None = None
        self._syncing: Pending | None = None
        self._sync_generation = -1
        self._joins = 0  # JoinGroups sent: a heartbeat's answer about an earlier round is stale
        self._stable = False  # a round completed (a generation and its assignment) and no JoinGroup was sent since
        self._fatal: KafkaError | None = None
        self._last_poll = self._clock.time_ms()
        self._heartbeats = consumer.engine.heartbeats
        self._stop = threading.Event()  # set: this member's heartbeats stop (close(); a test's crash)
        self._scheduled = False  # its heartbeats are on the engine's heartbeat thread

    # --- the consumer's thread --------------------------------------------------------------------
    def metadata(self) -> ConsumerGroupMetadata:
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id, self.group_instance_id)

    def request_rejoin(self) -> None:
        with self._lock:
            self._rejoin = True

    def _rebalance_began(self) -> None:
        """The coordinator's word that a rebalance began (any thread): rejoin at the next poll, and wake a poll that
        is waiting for records."""
        with self._lock:
            self._rejoin = True
        self._consumer.wake()

    def poll(self, deadline_ms: int) -> bool:
        """Keep membership current (join, sync) until `deadline_ms` at most; True when stable."""
        if self._fatal is not None:
            raise self._fatal
        self._last_poll = self._clock.time_ms()
        return not self.rebalancing() or self._ensure_active_group(deadline_ms)

    def rebalancing(self) -> bool:
        """Whether the next poll joins, or waits for a round under way (it may call the rebalance listener)."""
        with self._lock:
            return self._rejoin or self.generation < 0 or self._joining is not None or self._syncing is not None

    def in_flight(self) -> Pending | None:
        """The JoinGroup or SyncGroup answer a poll waits for, if any (to be woken by it instead of waiting)."""
        return self._syncing or self._joining

    def _ensure_active_group(self, deadline_ms: int) -> bool:
        while True:
            if self._syncing is None and self._joining is None:
                self._on_join_prepare()
                self._joining = self._send_join()
            if self._joining is not None:
                if not self._await(self._joining, deadline_ms):
                    return False
                pending, self._joining = self._joining, None
                result = self._answer(pending.result)
                if result is None:
                    continue
                with self._lock:
                    self.member_id, self.protocol_name = result.member_id, result.protocol_name
                assignments = self._assign(result) if result.leader_id == result.member_id and \
                    not result.skip_assignment else None
                self._sync_generation = result.generation_id
                self._syncing = pending.sync or self._answer(lambda: self._groups.sync_group(
                    self.group_id, result.generation_id, result.member_id, cp.PROTOCOL_TYPE, result.protocol_name,
                    assignments, self.group_instance_id))
                if self._syncing is None:
                    continue
            if not self._await(self._syncing, deadline_ms):
                return False
            pending, self._syncing = self._syncing, None
            data = self._answer(pending.result)
            if data is None:
                continue
            self._on_join_complete(self._sync_generation, data)
            with self._lock:
                if not self._rejoin:
                    self._start_heartbeats()
                    return True

    def _answer(self, call):
        """`call()`'s answer; None after an error that means "join again" (the membership is reset if it was
        lost); FencedInstanceIdError is fatal."""
        try:
            return call()
        except RebalanceInProgressError:
            self.request_rejoin()
        except (UnknownMemberIdError, IllegalGenerationError) as exc:
            self._reset(member=isinstance(exc, UnknownMemberIdError))
        except FencedInstanceIdError as exc:
            self._fatal = exc
            raise
        return None

    def _send_join(self) -> Pending:
        topics = sorted(self._consumer.subscription() or ())
        with self._lock:
            member_id, generation = self.member_id, self.generation
            self._rejoin = False
            self._joins += 1
            self._stable = False
        owned = [] if self.protocol != asg.COOPERATIVE else \
            sorted(self.owned, key=PARTITION_OF if len(set(map(TOPIC_OF, self.owned))) == 1 else None)  # (ints: faster)
        protocols = [(a.name, cp.encode_subscription(cp.Subscription(topics, a.subscription_user_data(set(topics)),
                                                                     owned, generation)))
                     for a in self.assignors]
        try:
            pending = self._groups.join_group(self.group_id, member_id, self.client_id, cp.PROTOCOL_TYPE, protocols,
                                              self.session_timeout_ms, self.rebalance_timeout_ms,
                                              self.group_instance_id, notify=self._rebalance_began)
        except UnknownMemberIdError:
            self._reset(member=True)
            return self._send_join()
        except FencedInstanceIdError as exc:
            self._fatal = exc
            raise
        with self._lock:
            self.member_id = pending.member_id
        return pending

    def _await(self, pending: Pending, deadline_ms: int) -> bool:
        """Wait for `pending` until `deadline_ms`, applying the coordinator's deadlines meanwhile."""
        while not pending.done:
            now = self._groups.tick()
            if pending.done or now >= deadline_ms:
                break
            nxt = self._groups.next_deadline()
            wait = deadline_ms - now if nxt is None else max(1, min(deadline_ms, nxt) - now)
            self._clock.wait(pending.event, wait)
        return pending.done

    def _assign(self, result) -> dict[str, bytes]:
        """The leader's work: run the group's assignor over every member's subscription."""
        assignor = next(a for a in self.assignors if a.name == result.protocol_name)
        subscriptions = {mid: cp.decode_subscription(meta) if iid is None else
                         cp.decode_subscription(meta)._replace(group_instance_id=iid)
                         for mid, iid, meta in result.members}
        topics = asg.subscribed_topics(subscriptions)
        eng = self._consumer.engine
        partitions_per_topic = {}
        for t in sorted(topics):
            try:
                partitions_per_topic[t] = eng.partitions_for(t)
            except UnknownTopicOrPartitionError:
                continue  # subscribed but not created (yet): nothing to assign
        assignment = assignor.assign(partitions_per_topic, subscriptions)
        if self.protocol == asg.COOPERATIVE:
            self._check_cooperative(assignor.name, subscriptions, assignment)
        return {m: cp.encode_assignment(cp.Assignment(sorted(assignment.get(m, [])))) for m in subscriptions}

    @staticmethod
    def _check_cooperative(name: str, subscriptions: dict, assignment: dict) -> None:
        """IllegalStateError if the assignment gives a member a partition that another member owns and does not keep
        (Kafka's check: no partition both added and revoked in one round). A member mostly gets what it owns, or the
        first of it in the same order: that is seen by identity, and only the partitions new to a member are looked
        up among what every member owns (a group's thousands, twice a rebalance)."""
        everyone: set | None = None
        for member, tps in assignment.items():
            mine = subscriptions[member].owned_partitions if member in subscriptions else []
            if tps == mine[:len(tps)]:
                continue
            added = set(tps).difference(mine)
            if added and everyone is None:
                everyone = set(itertools.chain.from_iterable(s.owned_partitions for s in subscriptions.values()))
            for tp in (tp for tp in tps if tp in added and tp in everyone) if added else ():
                for owner, s in subscriptions.items():
                    if owner != member and tp in s.owned_partitions and tp not in assignment.get(owner, ()):
                        raise IllegalStateError(f"assignor {name!r} gave {tp} to {member} while {owner} still owns "
                                                f"it (not a cooperative assignment)")

    def _on_join_prepare(self) -> None:
        with self._lock:
            lost = self.generation < 0 and bool(self.owned)
        if lost:
            self._revoke(self.owned, lost=True)
            return
        if self.auto_commit is not None:
            self.auto_commit()
        if self.protocol == asg.EAGER:
            self._revoke(self.owned, lost=False, always=True)
        else:
            subscribed = self._consumer.subscription() or set()
            if not subscribed.issuperset(map(TOPIC_OF, self.owned)):  # (the common case, checked at C speed)
                self._revoke({tp for tp in self.owned if tp.topic not in subscribed}, lost=False)

    def _revoke(self, partitions: set[TopicPartition], lost: bool, always: bool = False) -> None:
        """The listener is told while the partitions are still assigned (as the Java consumer does: a commit() in
        on_partitions_revoked commits their positions); they go whatever it raises."""
        partitions = set(partitions)
        try:
            if partitions or always:
                (self.listener.on_partitions_lost if lost else self.listener.on_partitions_revoked)(partitions)
        finally:
            self.owned -= partitions
            self._consumer.set_assignment(self.owned)

    def _on_join_complete(self, generation: int, data: bytes) -> None:
        assignment = cp.decode_assignment(data) if data else cp.Assignment([])
        assigned = set(assignment.partitions)
        with self._lock:
            self.generation = generation
            self._stable = True
        for a in self.assignors:  # (the interface's own on_assignment does nothing: no metadata is made for it)
            if a.name == self.protocol_name and getattr(a.on_assignment, "__func__", None) is not _NO_ON_ASSIGNMENT:
                a.on_assignment(assignment, self.metadata())
        if self.protocol == asg.COOPERATIVE:
            revoked = self.owned - assigned
            added = assigned - self.owned
            if revoked:
                self._revoke(revoked, lost=False)
                self.request_rejoin()  # the partitions move to their new owner in the next round
        else:
            added = assigned
        self.owned = assigned
        self._consumer.set_assignment(self.owned, assignment.partitions)
        self.listener.on_partitions_assigned(added)

    def _reset(self, member: bool) -> None:
        """Forget the generation (and the member id): the next join starts over."""
        with self._lock:
            self.generation = -1
            if member:
                self.member_id = ""
            self._rejoin = True

    # --- commits ----------------------------------------------------------------------------------
    def commit(self, committed: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit as this member (CommitFailedError once the group moved on without it)."""
        with self._lock:
            member_id, generation = self.member_id, self.generation
        if generation < 0 and self._joining is not None:
            raise RebalanceInProgressError(f"consumer group {self.group_id!r} is rebalancing: poll() to rejoin, "
                                           f"then commit")
        try:
            self._groups.commit_offsets(self.group_id, committed, member_id, generation, self.group_instance_id)
        except (UnknownMemberIdError, IllegalGenerationError) as exc:
            self._reset(member=isinstance(exc, UnknownMemberIdError))
            raise CommitFailedError(f"commit of group {self.group_id!r} failed: {exc.message}; the group "
                                    f"rebalanced and these partitions may belong to another member now") from None

    # --- heartbeats -----------------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        if not self._scheduled and not self._stop.is_set():
            self._scheduled = self._heartbeats.add(self, self.heartbeat_interval_ms, self._beat)

    def _beat(self) -> None:
        """The heartbeat thread's call: a heartbeat, unless this member's heartbeats were stopped."""
        if not self._stop.is_set():
            self.heartbeat()

    def heartbeat(self) -> None:
        """One heartbeat (the thread's work): flags a rebalance, a lost membership or a poll timeout."""
        with self._lock:  # only between rounds: a heartbeat of the old generation sent while a round is under way
            if not self._stable or self.generation < 0:  # would reset the member or ask it for one more round
                return
            member_id, generation, joins = self.member_id, self.generation, self._joins
        if self._clock.time_ms() - self._last_poll > self.max_poll_interval_ms:
            log.warning("consumer %s of group %s: poll() was not called for max_poll_interval_ms=%d; leaving the "
                        "group", self.client_id, self.group_id, self.max_poll_interval_ms)
            self.leave("the poll interval expired")
            return
        try:
            self._groups.heartbeat(self.group_id, member_id, generation, self.group_instance_id)
        except RebalanceInProgressError:
            with self._lock:
                if self._joins == joins:  # else the member already rejoined that rebalance
                    self._rejoin = True
        except (UnknownMemberIdError, IllegalGenerationError, CoordinatorNotAvailableError) as exc:
            with self._lock:
                stale = self._joins != joins
            if not stale:
                self._reset(member=isinstance(exc, UnknownMemberIdError))
        except FencedInstanceIdError as exc:
            self._fatal = exc

    def leave(self, reason: str) -> None:
        """LeaveGroup (a dynamic member; a static one just stops), and forget the generation."""
        with self._lock:
            member_id = self.member_id
        if self.group_instance_id is None and member_id:
            with contextlib.suppress(UnknownMemberIdError, CoordinatorNotAvailableError, FencedInstanceIdError):
                self._groups.leave_group(self.group_id, member_id)  # (those errors: it is already gone)
            log.info("consumer %s left group %s: %s", self.client_id, self.group_id, reason)
        self._joining = self._syncing = None
        self._reset(member=self.group_instance_id is None)

    def close(self, commit: Callable[[], None] | None) -> None:
        """Stop the heartbeats (none runs once this starts), then commit (if asked), revoke and leave: each step
        whatever the one before raised (a listener's error), the first error raised at the end, as Kafka's consumer
        closes."""
        self._stop.set()
        self._heartbeats.remove(self)
        self._scheduled = False
        steps = Steps()
        if self.generation >= 0 and commit is not None:
            steps.run(commit)
        if self.owned:
            steps.run(self._revoke, self.owned, self.generation < 0)
        steps.run(self.leave, "closed")
        steps.raise_first()
