"""The group coordinator: membership, generations and committed offsets of consumer groups (Kafka's classic
GroupCoordinator, in process: one per engine, for every group).

Requests and their answers are Kafka's: JoinGroup (a member id `client_id-uuid` for a new member; the first
member leads, and another member leads when it leaves; the protocol is the one most members vote for among those
all support, InconsistentGroupProtocolError when none is common), SyncGroup (the leader's assignment is stored
and handed out), Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch, with their errors (UnknownMemberIdError,
IllegalGenerationError, RebalanceInProgressError, FencedInstanceIdError, ...). JoinGroup and SyncGroup may be
held until the rebalance moves on: they return a group_metadata.Pending that the coordinator completes. A
follower's SyncGroup carries no data, so it is made as its JoinGroup is answered (the Java client sends it from its
network thread the moment the answer arrives): every member moves to the new generation when the leader syncs.
Group states: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and Dead once an empty group has no
offsets left. A member is evicted when it misses heartbeats for its session timeout (while it waits in a join or
a sync it counts as alive, bounded by the rebalance timeout); a rebalance completes when every member rejoined,
or at the rebalance timeout without those that did not (static members stay). Static members
(group.instance.id) that rejoin with a new member id take over their old assignment without a rebalance, and
fence the old member id.
A member that joined with a `notify` callback (every in-process consumer does) is told the moment a rebalance
begins, so it rejoins at its next poll rather than at its next heartbeat; heartbeats still carry liveness. The
callbacks run once the coordinator's lock is released, each whatever the one before raised.
Time: the coordinator never sleeps; `tick()` (called by every request, by waiting clients and by the engine's
background thread) applies every deadline that has passed on the injected clock.
Storage: group records (engine.groups.group_metadata) and offset commits (engine.groups.offsets) are appended to
the group's `__consumer_offsets` partition; on open the coordinator replays them (groups, offsets, and members
whose sessions then have to be renewed). Offsets expire offsets.retention.minutes after the group emptied (or
after their commit, for a group without members or with the topic unsubscribed); they become tombstones, and so
does the group's record once its last offset is gone.
Both protocols share the group ids: a group of the consumer group protocol is engine.groups.consumer_group's, and
a classic group moves to it and back as Kafka's online migration does (engine.groups.classic_members); JoinGroup,
SyncGroup, Heartbeat and LeaveGroup to a consumer group are its classic members'.
Thread-safety: one lock serialises every request; callers wait on their Pending outside it.
"""
from __future__ import annotations

import logging
import math
import uuid
from typing import Callable, Protocol

from engine.common.closing import DeferringLock
from engine.common.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from engine.groups import classic_members, consumer_group, consumer_group_records, consumer_protocol, \
    group_metadata, offsets
from engine.groups.group_coordinator_config import GroupConfig
from engine.groups.group_metadata import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupDescription,
    GroupMetadata,
    JoinResult,
    MemberMetadata,
    Pending,
)
from engine.groups.consumer_group import Heartbeat, HeartbeatAnswer, TopicsView
from engine.groups.consumer_group_coordinator import PROTOCOL_TYPE, ConsumerGroupCoordinator, \
    ConsumerGroupDescription
from engine.groups.offsets import CommitRecord, OffsetStore
from engine.record import codec
from engine.log.unified_log import COORDINATOR

log = logging.getLogger("kafkalog.groups")
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
CLIENT_HOST = "/127.0.0.1"  # members are in this process


class InternalLog(Protocol):
    """What the group coordinator's storage uses of an engine (engine.internal_topics.InternalTopics)."""

    def internal_topics(self) -> dict[str, int]: ...

    def ensure_internal_topic(self, name: str) -> bool: ...

    def internal_partition(self, topic: str, partition: int): ...

    def append_internal(self, topic: str, partition: int, data, origin: str = ...): ...


class GroupLog:
    """The coordinator's storage: its groups' `__consumer_offsets` partitions, through `internal`."""

    def __init__(self, internal: InternalLog) -> None:
        self._internal = internal
        self.on_created = None  # called when the topic is created here (adopting a broker's partitions of it)

    def append(self, partition: int, rows: list[tuple[bytes, bytes | None]], now: int, **batch) -> None:
        """One batch of (key, value) records."""
        if self._internal.ensure_internal_topic(offsets.TOPIC) and self.on_created is not None:
            self.on_created()
        data = codec.encode_batch([(k, v, None, now) for k, v in rows], **batch)
        self._internal.append_internal(offsets.TOPIC, partition, data, origin=COORDINATOR)

    def batches(self):
        """(partition, batch) of every `__consumer_offsets` partition up to its high watermark."""
        count = self._internal.internal_topics().get(offsets.TOPIC, 0)
        for p in range(count):
            lg = self._internal.internal_partition(offsets.TOPIC, p).log
            yield from ((p, b) for _, b in lg.batches(lg.log_start_offset, lg.high_watermark))


class GroupCoordinator:
    """Kafka's GroupCoordinator in process: JoinGroup, SyncGroup, Heartbeat and LeaveGroup on each group's state
    machine, OffsetCommit and OffsetFetch (plain and transactional), the session and rebalance deadlines, offset
    expiry, and the admin calls (list, describe, reset, delete). Every handler works on the same groups under one
    lock, which is why they stay one class of about 620 lines; a group's own state is engine.groups.group_metadata's."""

    def __init__(self, storage: GroupLog, clock, config: GroupConfig | None = None,
                 topics: TopicsView | None = None) -> None:
        self._log = storage
        self.clock = clock
        self.config = cfg = config or GroupConfig.of(None)
        self._lock = DeferringLock()  # a member's `notify` runs once it is released
        self.groups: dict[str, GroupMetadata] = {}
        self._quiet_until: float = 0  # no deadline passes before this time (0: unknown, `tick` looks at every group)
        self.offsets = OffsetStore(on_group=self._load_record)
        # the consumer group protocol's groups (KIP-848); `topics` says which subscribed topics exist
        self.consumer = ConsumerGroupCoordinator(
            storage.append, topics or (lambda names: {}),
            consumer_group.Settings(cfg.group_consumer_session_timeout_ms, cfg.group_consumer_heartbeat_interval_ms,
                                    {a.name: a for a in cfg.group_consumer_assignors}), self._lock.defer)
        if cfg.group_consumer_migration_policy in ("downgrade", "bidirectional"):
            self.consumer.on_downgrade = self._downgraded
        storage.on_created = self.load

    # --- load -----------------------------------------------------------------------------------
    def load(self) -> None:
        """Replay `__consumer_offsets` (groups and offsets) up to each partition's high watermark."""
        with self._lock:
            for p, batch in self._log.batches():
                self.offsets.apply_batch(p, batch, batch.records())
            self.consumer.renew_sessions(self.clock.time_ms())
            self._wake()

    def _load_record(self, key, value: bytes | None) -> None:
        """A `__consumer_offsets` record that is not an offset commit: a classic group's or a consumer group's."""
        if consumer_group_records.is_consumer_group_key(key):
            self.consumer.replay(consumer_group_records.decode(key, value))
            return
        group_id = group_metadata.decode_key(key)
        if group_id is not None:
            self._load_group(group_id, value)

    def _load_group(self, group_id: str, value: bytes | None) -> None:
        if value is None:
            self.groups.pop(group_id, None)
            return
        rec = group_metadata.decode_value(value)
        now = self.clock.time_ms()
        g = GroupMetadata(group_id, now, STABLE if rec.members else EMPTY)
        g.protocol_type, g.protocol, g.generation = rec.protocol_type or None, rec.protocol, rec.generation
        g.state_timestamp = rec.current_state_timestamp if rec.current_state_timestamp >= 0 else now
        for m in rec.members:
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms, rec.protocol_type,
                                    [(rec.protocol or "", m.subscription)], now)
            member.assignment = m.assignment
            g.add(member)
        g.leader = rec.leader if rec.leader in g.members else g.leader
        self.groups[group_id] = g
        self._wake()

    # --- helpers --------------------------------------------------------------------------------
    def _store(self, g: GroupMetadata, now: int, tombstone: bool = False) -> None:
        value = None if tombstone else group_metadata.encode_value(g.record())
        self._log.append(offsets.partition(g.group_id), [(group_metadata.encode_key(g.group_id), value)], now)

    def _group(self, group_id: str) -> GroupMetadata:
        g = self.groups.get(group_id)
        if g is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no members")
        if g.state == DEAD:
            raise CoordinatorNotAvailableError(f"group {group_id!r} is dead")
        return g

    def _member(self, g: GroupMetadata, member_id: str, instance_id: str | None) -> MemberMetadata:
        if instance_id is not None:
            owner = g.static_members.get(instance_id)
            if owner is not None and owner != member_id:
                raise FencedInstanceIdError(f"group.instance.id {instance_id!r} of group {g.group_id!r} now belongs "
                                            f"to member {owner} (this member, {member_id}, is fenced)")
        member = g.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {g.group_id!r}")
        return member

    def _join_result(self, g: GroupMetadata, member: MemberMetadata, skip: bool = False) -> JoinResult:
        leader = member.member_id == g.leader
        members = [(m.member_id, m.group_instance_id, m.metadata(g.protocol)) for m in g.members.values()] \
            if leader and not skip else []
        return JoinResult(member.member_id, g.generation, g.protocol_type, g.protocol, g.leader or "", members, skip)

    # --- JoinGroup ------------------------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, client_id: str, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   group_instance_id: str | None = None, notify: Callable[[], None] | None = None) -> Pending:
        """JoinGroup: a Pending completed with the JoinResult once the rebalance moves on. `notify`, called from any
        thread with no lock of the member's held, tells this member when a later rebalance begins, so it rejoins
        without waiting for its next heartbeat to say so (it must only flag the rejoin)."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group id must be a non-empty str, got {group_id!r}")
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            raise InvalidSessionTimeoutError(
                f"session_timeout_ms={session_timeout_ms} is outside [group_min_session_timeout_ms="
                f"{cfg.group_min_session_timeout_ms}, group_max_session_timeout_ms={cfg.group_max_session_timeout_ms}]")
        with self._lock:
            now = self.tick()
            if group_id in self.consumer.groups:
                if not self.consumer.empty(group_id):  # a classic member of a consumer group (online migration)
                    result = self.consumer.classic_join(group_id, member_id, group_instance_id, client_id, CLIENT_HOST,
                                                        protocol_type, protocols, session_timeout_ms,
                                                        rebalance_timeout_ms, now, notify)
                    pending = Pending(result.member_id)
                    pending.complete(result)
                    self._wake()
                    return pending
                self.consumer.delete(group_id, now)  # an empty one becomes a classic group, as Kafka converts it
            g = self.groups.get(group_id)
            if g is None or g.state == DEAD:
                g = self.groups[group_id] = GroupMetadata(group_id, now)
            if not g.supports(protocol_type, protocols):
                raise InconsistentGroupProtocolError(
                    f"group {group_id!r} uses protocol type {g.protocol_type!r} and protocols "
                    f"{sorted(g.candidate_protocols())}; this member offers {protocol_type!r} "
                    f"{[n for n, _ in protocols]}")
            pending = Pending()
            if not member_id:
                existing = g.static_members.get(group_instance_id) if group_instance_id is not None else None
                if existing is not None:
                    self._replace_static(g, existing, client_id, protocols, session_timeout_ms, rebalance_timeout_ms,
                                         pending, now, notify)
                else:
                    member = MemberMetadata(f"{client_id}-{uuid.uuid4()}", group_instance_id, client_id, CLIENT_HOST,
                                            rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, now)
                    member.is_new = True
                    member.notify = notify
                    member.awaiting_join = pending
                    pending.member_id = member.member_id
                    g.add(member)
                    self._prepare_rebalance(g, now, f"{member.member_id} joined")
                    self._maybe_complete_join(g, now)
                return pending
            member = self._member(g, member_id, group_instance_id)
            if g.state == EMPTY:
                raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
            pending.member_id = member_id
            member.notify = notify
            changed = member.protocols != protocols
            g.set_protocols(member, protocols)
            member.last_heartbeat = now
            if session_timeout_ms < member.session_timeout_ms:
                self._wake()
            member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            if g.state == PREPARING_REBALANCE:
                if member.awaiting_join is not None:
                    member.awaiting_join.complete(error=RebalanceInProgressError("a newer JoinGroup replaced this one"))
                member.awaiting_join = pending
                self._maybe_complete_join(g, now)
            elif g.state == COMPLETING_REBALANCE and not changed:
                pending.complete(self._join_result(g, member))
            elif g.state == STABLE and not changed and member.member_id != g.leader:
                pending.complete(self._join_result(g, member))
            else:
                member.awaiting_join = pending
                self._prepare_rebalance(g, now, f"{member_id} rejoined with new metadata")
                self._maybe_complete_join(g, now)
            return pending

    def _replace_static(self, g: GroupMetadata, old_id: str, client_id: str, protocols, session_timeout_ms: int,
                        rebalance_timeout_ms: int, pending: Pending, now: int,
                        notify: Callable[[], None] | None) -> None:
        """A static member rejoined with no member id: a new id takes over its membership and assignment."""
        self._wake()
        old = g.members[old_id]
        fenced = FencedInstanceIdError(f"group.instance.id {old.group_instance_id!r} rejoined group "
                                       f"{g.group_id!r} as a new member; {old_id} is fenced")
        for held in (old.awaiting_join, old.awaiting_sync):
            if held is not None:
                held.complete(error=fenced)
        was_leader = g.leader == old_id
        g.remove(old_id)
        member = MemberMetadata(f"{client_id}-{uuid.uuid4()}", old.group_instance_id, client_id, CLIENT_HOST,
                                rebalance_timeout_ms, session_timeout_ms, old.protocol_type, protocols, now)
        member.assignment, member.notify = old.assignment, notify
        pending.member_id = member.member_id
        g.add(member)
        if was_leader:
            g.leader = member.member_id
        if g.state == STABLE and g.select_protocol() == g.protocol:  # as Kafka: only the protocol choice matters
            self._store(g, now)
            pending.complete(self._join_result(g, member, skip=member.member_id == g.leader))
            return
        member.awaiting_join = pending
        self._prepare_rebalance(g, now, f"static member {member.group_instance_id} rejoined")
        self._maybe_complete_join(g, now)

    def _prepare_rebalance(self, g: GroupMetadata, now: int, reason: str) -> None:
        self._wake()  # a join deadline is set; members waiting for their sync answer become mortal again
        if g.state == PREPARING_REBALANCE:
            if g.initial_deadline is not None:  # the initial delay grows with each new member, up to its cap
                g.join_deadline = min(now + self.config.group_initial_rebalance_delay_ms, g.initial_deadline)
            return
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = b""
                if m.awaiting_sync is not None:
                    m.awaiting_sync.complete(error=RebalanceInProgressError(f"group {g.group_id!r} is rebalancing"))
                    m.awaiting_sync = None
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        delay = self.config.group_initial_rebalance_delay_ms
        if g.state == EMPTY and delay > 0:
            g.join_deadline, g.initial_deadline = now + delay, now + max(timeout, delay)
        else:
            g.join_deadline, g.initial_deadline = now + timeout, None
        g.sync_deadline = None
        g.pending_sync.clear()
        log.info("group %s prepares rebalance (generation %d): %s", g.group_id, g.generation, reason)
        g.transition(PREPARING_REBALANCE, now)
        for m in g.members.values():  # in one process the members hear it now, not at their next heartbeat
            if m.awaiting_join is None and m.notify is not None:
                self._lock.defer(m.notify)

    def _maybe_complete_join(self, g: GroupMetadata, now: int) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        if g.initial_deadline is not None:
            if now >= g.join_deadline:
                self._complete_join(g, now)
        elif g.all_joined() or now >= g.join_deadline:
            self._complete_join(g, now)

    def _complete_join(self, g: GroupMetadata, now: int) -> None:
        self._wake()  # a join or sync deadline is set; the joined members become mortal again
        for m in list(g.members.values()):
            if m.awaiting_join is None and m.group_instance_id is None:
                self._remove(g, m.member_id, "did not rejoin before the rebalance timeout", now, rebalance=False)
        g.initial_deadline = None
        joined = [m for m in g.members.values() if m.awaiting_join is not None]
        if g.members and g.leader not in {m.member_id for m in joined}:
            if not joined:  # only static members that have not rejoined: wait another rebalance timeout
                g.join_deadline = now + max(m.rebalance_timeout_ms for m in g.members.values())
                return
            g.leader = joined[0].member_id
        g.generation += 1
        if not g.members:
            g.protocol = None
            g.transition(EMPTY, now)
            g.join_deadline = None
            self._store(g, now)
            return
        g.protocol = g.select_protocol()
        g.transition(COMPLETING_REBALANCE, now)
        g.join_deadline = None
        g.pending_sync = set(g.members)
        g.sync_deadline = now + max(m.rebalance_timeout_ms for m in g.members.values())
        for m in joined:
            held, result = m.awaiting_join, self._join_result(g, m)
            m.awaiting_join, m.is_new, m.last_heartbeat = None, False, now
            if m.member_id != g.leader:  # a follower's SyncGroup carries nothing: it leaves with the answer
                held.sync = m.awaiting_sync = Pending(m.member_id)
                g.pending_sync.discard(m.member_id)
            held.complete(result)

    # --- SyncGroup ------------------------------------------------------------------------------
    def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes] | None = None,
                   group_instance_id: str | None = None) -> Pending:
        with self._lock:
            now = self.tick()
            if group_id in self.consumer.groups and group_id not in self.groups:
                pending = Pending(member_id)
                pending.complete(self.consumer.classic_sync(group_id, member_id, group_instance_id, generation_id,
                                                            protocol_type, protocol_name, now))
                self._wake()
                return pending
            g = self._group(group_id)
            member = self._member(g, member_id, group_instance_id)
            if generation_id != g.generation:
                raise IllegalGenerationError(f"generation {generation_id} of group {group_id!r} is not the current "
                                             f"one ({g.generation})")
            if (protocol_type is not None and protocol_type != g.protocol_type) or \
                    (protocol_name is not None and protocol_name != g.protocol):
                raise InconsistentGroupProtocolError(f"group {group_id!r} uses {g.protocol_type}/{g.protocol}")
            if g.state == EMPTY:
                raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
            if g.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
            pending = Pending()
            member.last_heartbeat = now
            g.pending_sync.discard(member_id)
            if g.state == STABLE:
                pending.complete(member.assignment)
                return pending
            member.awaiting_sync = pending
            if member_id == g.leader:
                given = assignments or {}
                for m in g.members.values():
                    m.assignment = bytes(given.get(m.member_id, b""))
                self._store(g, now)
                g.transition(STABLE, now)
                g.sync_deadline = None
                self._wake()  # the members that waited for their assignment become mortal again
                for m in g.members.values():
                    if m.awaiting_sync is not None:
                        m.awaiting_sync.complete(m.assignment)
                        m.awaiting_sync = None
            return pending

    # --- Heartbeat and LeaveGroup ---------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> None:
        with self._lock:
            now = self.tick()
            if group_id in self.consumer.groups and group_id not in self.groups:
                self._wake()
                self.consumer.classic_heartbeat(group_id, member_id, group_instance_id, generation_id, now)
                return
            g = self._group(group_id)
            if g.state == EMPTY:
                raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
            member = self._member(g, member_id, group_instance_id)
            if generation_id != g.generation:
                raise IllegalGenerationError(f"generation {generation_id} of group {group_id!r} is not the current "
                                             f"one ({g.generation})")
            member.last_heartbeat = now
            if g.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")

    def leave_group(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> None:
        with self._lock:
            now = self.tick()
            if group_id in self.consumer.groups and group_id not in self.groups:
                self.consumer.classic_leave(group_id, member_id, group_instance_id, now)
                self._wake()
                return
            g = self._group(group_id)
            if group_instance_id is not None and not member_id:
                member_id = g.static_members.get(group_instance_id, "")
            self._member(g, member_id, group_instance_id)
            self._remove(g, member_id, "left the group", now)

    def _remove(self, g: GroupMetadata, member_id: str, reason: str, now: int, rebalance: bool = True) -> None:
        member = g.remove(member_id)
        gone = UnknownMemberIdError(f"member {member_id} {reason}")
        for held in (member.awaiting_join, member.awaiting_sync):
            if held is not None:
                held.complete(error=gone)
        log.info("member %s of group %s %s", member_id, g.group_id, reason)
        if not rebalance:
            return
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, now, f"{member_id} {reason}")
        self._maybe_complete_join(g, now)

    # --- time -----------------------------------------------------------------------------------
    def tick(self) -> int:
        """Apply every deadline that has passed: session expiries, rebalance and sync timeouts. The time. Before the
        earliest deadline it looks at nothing: a rebalance of M members then costs O(M), not O(M) per request."""
        with self._lock:
            now = self.clock.time_ms()
            if now < self._quiet_until:
                return now
            for g in list(self.groups.values()):
                for m in list(g.members.values()):  # (an earlier removal's rebalance may remove a later one)
                    if not self._alive(m, now) and m.member_id in g.members:
                        self._remove(g, m.member_id, f"missed heartbeats for session_timeout_ms="
                                                     f"{m.session_timeout_ms}", now)
                if g.state == PREPARING_REBALANCE and g.join_deadline is not None and now >= g.join_deadline:
                    self._complete_join(g, now)
                if g.state == COMPLETING_REBALANCE and g.sync_deadline is not None and now >= g.sync_deadline:
                    for member_id in sorted(g.pending_sync):
                        self._remove(g, member_id, "did not sync before the rebalance timeout", now, rebalance=False)
                    self._prepare_rebalance(g, now, "members did not sync in time")
                    self._maybe_complete_join(g, now)
            self.consumer.tick(now)
            self._quiet_until = self._earliest_deadline()
            return now

    def _wake(self) -> None:
        """A deadline may now come before `_quiet_until` (a member joined, or stopped waiting for a join or sync
        answer; a join or sync deadline was set; a session timeout shrank; groups were loaded): look again."""
        self._quiet_until = 0

    @staticmethod
    def _expiry(m: MemberMetadata) -> int | None:
        """When `m` stops being alive: a new member's join timeout while it waits to join, never while a known
        member waits for its join or sync answer, else its session timeout after its last heartbeat."""
        if m.awaiting_join is not None:
            return m.last_heartbeat + NEW_MEMBER_JOIN_TIMEOUT_MS if m.is_new else None
        if m.awaiting_sync is not None:
            return None
        return m.last_heartbeat + m.session_timeout_ms

    @classmethod
    def _alive(cls, m: MemberMetadata, now: int) -> bool:
        expiry = cls._expiry(m)
        return expiry is None or now < expiry

    def _earliest_deadline(self) -> float:
        """The earliest join, sync or member deadline of any group (inf: none)."""
        times = [t for g in self.groups.values() for t in (g.join_deadline, g.sync_deadline) if t is not None]
        times += [t for g in self.groups.values() for t in map(self._expiry, g.members.values()) if t is not None]
        return min(min(times, default=math.inf), self.consumer.earliest_deadline())

    def next_deadline(self) -> int | None:
        """The earliest time at which `tick()` has something to do (None: nothing scheduled)."""
        with self._lock:
            if not self._quiet_until:
                self._quiet_until = self._earliest_deadline()
            return None if self._quiet_until == math.inf else int(self._quiet_until)

    # --- the consumer group protocol ------------------------------------------------------------
    def consumer_group_heartbeat(self, hb: Heartbeat, notify: Callable[[], None] | None = None) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat (KIP-848): join (epoch 0), heartbeat, leave (-1; -2 for a static member that comes
        back). An empty classic group becomes a consumer group, as Kafka converts it; a join to a classic group with
        members upgrades it where the migration policy allows (engine.groups.classic_members), and is
        GroupIdNotFoundError where it does not (or for a heartbeat that is no join). `notify`, an in-process member's,
        called from any thread with no lock of the member's held, tells it to heartbeat now when a change to the group
        leaves it a step to take."""
        with self._lock:
            now = self.tick()
            classic = self.groups.get(hb.group_id)
            if classic is not None and hb.group_id not in self.consumer.groups:
                if classic.state not in (EMPTY, DEAD):
                    if hb.member_epoch != 0 or classic.protocol_type != PROTOCOL_TYPE or \
                            self.config.group_consumer_migration_policy not in ("upgrade", "bidirectional"):
                        raise GroupIdNotFoundError(f"group {hb.group_id!r} is a classic group with members, not a "
                                                   f"consumer group")
                    answer = self._upgrade(classic, hb, now, notify)
                    self._wake()
                    return answer
                if hb.member_epoch == 0:
                    if classic.generation > 0 or classic.protocol_type:
                        self._store(classic, now, tombstone=True)
                    del self.groups[hb.group_id]
            answer = self.consumer.heartbeat(hb, now, notify)
            self._wake()
            return answer

    def _upgrade(self, g: GroupMetadata, hb: Heartbeat, now: int, notify) -> HeartbeatAnswer:
        """The classic group `g`, with members, becomes a consumer group as `hb` joins it (Kafka's online upgrade):
        joins and syncs it held are answered REBALANCE_IN_PROGRESS, and its members stay, as members of the classic
        protocol in the consumer group (engine.groups.classic_members)."""
        tombstone = (group_metadata.encode_key(g.group_id), None)
        notifies = {m.member_id: m.notify for m in g.members.values() if m.notify is not None}
        try:
            answer = self.consumer.heartbeat(hb, now, notify, upgrading=g, before=[tombstone], notifies=notifies)
        except InconsistentGroupProtocolError as exc:  # (a member's metadata is not a consumer subscription)
            raise GroupIdNotFoundError(f"cannot upgrade the classic group {g.group_id!r} to a consumer group: "
                                       f"{exc.message}") from None
        del self.groups[g.group_id]
        rebalancing = RebalanceInProgressError(f"group {g.group_id!r} became a consumer group: rejoin")
        for held in [h for m in g.members.values() for h in (m.awaiting_join, m.awaiting_sync) if h is not None]:
            held.complete(error=rebalancing)
        return answer

    def _downgraded(self, cg, leaving: str | None, now: int, notifies: dict, rebalance: bool, generation: int) -> None:
        """The consumer group `cg` becomes a classic group at `generation` as its last member of the consumer group
        protocol, `leaving`, goes, or (None) was replaced by a classic static member (Kafka's online downgrade): its
        records become tombstones, the classic group's record is written in the same batch, and, with `rebalance`, a
        rebalance starts."""
        g = classic_members.downgrade(cg, leaving, now, self.consumer.topics, generation)
        for mid in notifies.keys() & g.members.keys():
            g.members[mid].notify = notifies[mid]
        self.consumer.drop(cg, [(group_metadata.encode_key(g.group_id), group_metadata.encode_value(g.record()))],
                           now)
        self.groups[g.group_id] = g
        if rebalance:
            self._prepare_rebalance(g, now, f"downgraded from a consumer group as {leaving or 'a static member'} "
                                            f"{'left' if leaving else 'was replaced with another subscription'}")
        else:
            log.info("group %s: downgraded from a consumer group as a static member was replaced", g.group_id)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe: a consumer group's epochs, assignor and members with their assignments."""
        with self._lock:
            self.tick()
            return self.consumer.describe(group_id)

    # --- offsets --------------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, committed: dict[TopicPartition, OffsetAndMetadata], member_id: str = "",
                       generation_id: int = -1, group_instance_id: str | None = None,
                       stale_epoch_error: bool = True) -> None:
        """OffsetCommit: from a member of the current generation, or (generation -1) for a group with no members.
        For a group of the consumer group protocol the generation is the member's epoch (a stale one is
        StaleMemberEpochError, or IllegalGenerationError with `stale_epoch_error` False: OffsetCommit before v9)."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group id must be a non-empty str, got {group_id!r}")
        with self._lock:
            now = self.tick()
            if self.consumer.check_commit(group_id, member_id, generation_id, stale_epoch_error):
                self._write_offsets(group_id, committed, now)
                return
            g = self.groups.get(group_id)
            if g is None or g.state == DEAD:
                if generation_id >= 0:
                    raise IllegalGenerationError(f"group {group_id!r} has no generation {generation_id}")
                g = self.groups[group_id] = GroupMetadata(group_id, now)
            elif not (generation_id < 0 and g.state == EMPTY):
                if generation_id < 0 and not member_id:
                    raise UnknownMemberIdError(f"group {group_id!r} has active members: commit from a member (or "
                                               f"wait until the group is empty)")
                member = self._member(g, member_id, group_instance_id)
                if g.state == COMPLETING_REBALANCE:
                    raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
                if generation_id != g.generation:
                    raise IllegalGenerationError(f"generation {generation_id} of group {group_id!r} is not the "
                                                 f"current one ({g.generation})")
                member.last_heartbeat = now
            self._write_offsets(group_id, committed, now)

    def _write_offsets(self, group_id: str, committed: dict, now: int, **batch) -> None:
        rows = [(offsets.encode_key(group_id, tp), offsets.encode_value(om, now))
                for tp, om in sorted(committed.items())]
        if not rows:
            return
        p = offsets.partition(group_id)
        self._log.append(p, rows, now, **batch)
        pending_in = (p, batch["producer_id"]) if batch.get("transactional") else None  # until the marker
        self.offsets.put(group_id, {tp: CommitRecord(om, now) for tp, om in committed.items()}, pending_in)

    def commit_transactional(self, member: ConsumerGroupMetadata, committed: dict, producer_id: int,
                             producer_epoch: int) -> None:
        """TxnOffsetCommit: a transactional batch, applied when the transaction's COMMIT marker lands. With a
        member's generation and id (KIP-447) they are checked as a member's commit is; with the group id alone
        (generation -1, no member) they are not, as Kafka accepts from older producers."""
        with self._lock:
            now = self.tick()
            g = self.groups.get(member.group_id)
            if member.generation_id >= 0 or member.member_id or member.group_instance_id is not None:
                # (a consumer group's member and epoch are its coordinator's to check; a classic one's here)
                if not self.consumer.check_commit(member.group_id, member.member_id, member.generation_id, False):
                    if g is None or g.state in (EMPTY, DEAD):
                        raise UnknownMemberIdError(f"group {member.group_id!r} has no member {member.member_id!r}")
                    self._member(g, member.member_id, member.group_instance_id)
                    if member.generation_id != g.generation:
                        raise IllegalGenerationError(f"generation {member.generation_id} of group "
                                                     f"{member.group_id!r} is not the current one ({g.generation})")
            self._write_offsets(member.group_id, committed, now, producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=0, transactional=True)

    def fetch_offsets(self, group_id: str, partitions=None) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: the group's committed offsets (all of them, or those of `partitions` that have one)."""
        found = {tp: c.value for tp, c in self.offsets.offsets(group_id).items()}
        return found if partitions is None else {tp: found[tp] for tp in partitions if tp in found}

    def reset_offsets(self, group_id: str, committed: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Set a group's offsets from outside it (kafka-consumer-groups.sh --reset-offsets): only while it is empty."""
        with self._lock:
            g = self.groups.get(group_id)
            if g is not None and g.state not in (EMPTY, DEAD):
                raise NonEmptyGroupError(f"group {group_id!r} has active members ({g.state}); stop them first")
            self.commit_offsets(group_id, committed)

    def delete_group(self, group_id: str) -> None:
        """DeleteGroups (kafka-consumer-groups.sh --delete): an empty group's committed offsets and its record become
        tombstones. NonEmptyGroupError while it has members; GroupIdNotFoundError for a group that does not exist."""
        with self._lock:
            now = self.tick()
            g = self.groups.get(group_id)
            committed = self.offsets.offsets(group_id)
            if group_id in self.consumer.groups:
                if not self.consumer.empty(group_id):
                    raise NonEmptyGroupError(f"consumer group {group_id!r} has active members; stop them first")
                self.consumer.delete(group_id, now)
            elif (g is None or g.state == DEAD) and not committed:
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            if g is not None and g.state not in (EMPTY, DEAD):
                raise NonEmptyGroupError(f"group {group_id!r} has active members ({g.state}); stop them first")
            rows = [(offsets.encode_key(group_id, tp), None) for tp in sorted(committed)]
            rows.append((group_metadata.encode_key(group_id), None))
            self._log.append(offsets.partition(group_id), rows, now)
            self.offsets.put(group_id, dict.fromkeys(committed))
            if g is not None:
                g.transition(DEAD, now)
                del self.groups[group_id]
            log.info("group %s deleted with %d committed offsets", group_id, len(committed))

    def expire_offsets(self) -> int:
        """Tombstone offsets past offsets.retention.minutes, and empty groups (of either protocol) left without
        offsets; the count of offsets."""
        retention = self.config.offsets_retention_minutes * 60_000
        with self._lock:
            now = self.tick()
            expired = 0
            for group_id in sorted(set(self.offsets.groups()) | set(self.groups) | set(self.consumer.groups)):
                g = self.groups.get(group_id)
                if self.offsets.has_pending(group_id):
                    continue
                committed = self.offsets.offsets(group_id).items()
                if group_id in self.consumer.groups and not self.consumer.empty(group_id):
                    topics = self.consumer.subscribed_topics(group_id)  # (a member's offsets stay while subscribed)
                    gone = [tp for tp, c in committed if tp.topic not in topics and (
                        now >= c.expire_timestamp if c.expire_timestamp >= 0 else now >= c.commit_timestamp + retention)]
                else:
                    topics = self._subscribed_topics(g) if g is not None and g.state == STABLE else None
                    gone = [tp for tp, c in committed if self._expired(g, tp, c, topics, now, retention)]
                if gone:
                    rows = [(offsets.encode_key(group_id, tp), None) for tp in sorted(gone)]
                    self._log.append(offsets.partition(group_id), rows, now)
                    self.offsets.put(group_id, dict.fromkeys(gone))
                    expired += len(gone)
                if group_id in self.consumer.groups and not self.offsets.offsets(group_id):
                    self.consumer.delete(group_id, now)  # (empty here: one with members was passed over above)
                elif g is not None and g.state == EMPTY and not self.offsets.offsets(group_id):
                    g.transition(DEAD, now)
                    if g.generation > 0 or g.protocol_type:
                        self._store(g, now, tombstone=True)
                    del self.groups[group_id]
            return expired

    def _subscribed_topics(self, g: GroupMetadata) -> set[str] | None:
        if g.protocol_type != consumer_protocol.PROTOCOL_TYPE or not g.protocol:
            return None
        topics: set[str] = set()
        for m in g.members.values():
            try:
                topics.update(consumer_protocol.decode_subscription(m.metadata(g.protocol)).topics)
            except (CorruptRecordError, KeyError):  # unreadable or missing metadata: keep every offset of the group
                return None
        return topics

    @staticmethod
    def _expired(g: GroupMetadata | None, tp: TopicPartition, c: CommitRecord, topics: set[str] | None, now: int,
                 retention: int) -> bool:
        if c.expire_timestamp >= 0:
            return now >= c.expire_timestamp
        if g is None or g.state == EMPTY:  # a consumer group counts from when it emptied, others from the commit
            base = g.state_timestamp if g is not None and g.protocol_type else c.commit_timestamp
            return now >= base + retention
        if topics is not None and tp.topic not in topics:
            return now >= c.commit_timestamp + retention
        return False

    # --- admin ----------------------------------------------------------------------------------
    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every group, offsets-only ones included."""
        with self._lock:
            self.tick()
            ids = sorted(set(self.groups) | set(self.offsets.groups()) | set(self.consumer.groups))
            out = []
            for i in ids:
                if i in self.consumer.groups:
                    out.append((i, self.consumer.groups[i].state, PROTOCOL_TYPE))
                else:
                    out.append((i, self.groups[i].state if i in self.groups else EMPTY,
                                (self.groups[i].protocol_type or "") if i in self.groups else ""))
            return out

    def describe_group(self, group_id: str) -> GroupDescription:
        with self._lock:
            self.tick()
            g = self.groups.get(group_id)
            if group_id in self.consumer.groups:
                return self._classic_view(self.consumer.describe(group_id))
            if g is None:
                if group_id in self.offsets.groups():
                    return GroupDescription(group_id, EMPTY, "", "", 0, None, [])
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            members = []
            for m in g.members.values():
                assigned = consumer_protocol.decode_assignment(m.assignment).partitions \
                    if m.assignment and g.protocol_type == consumer_protocol.PROTOCOL_TYPE else []
                members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id, "client_host": m.client_host, "assignment": assigned,
                                "metadata": m.metadata(g.protocol) if g.protocol else b"",
                                "assignment_bytes": m.assignment or b""})
            return GroupDescription(group_id, g.state, g.protocol_type or "", g.protocol or "", g.generation,
                                    g.leader, members)

    def _classic_view(self, d: ConsumerGroupDescription) -> GroupDescription:
        """A consumer group as DescribeGroups shows it (as Kafka 4 does): protocol type "consumer", the assignor as
        protocol, the group epoch as generation, no leader, members with their assigned partitions."""
        names = d.topic_names
        members = [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "metadata": b"", "assignment_bytes": b"",
                    "assignment": sorted(TopicPartition(names[t], p) for t, ps in m.assignment.items() if t in names
                                         for p in ps)} for m in d.members]
        return GroupDescription(d.group_id, d.state, PROTOCOL_TYPE, d.assignor_name, d.group_epoch, None, members)
