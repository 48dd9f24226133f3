"""The group coordinator's half for the consumer group protocol (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe on engine.groups.consumer_group's groups, their session and rebalance timeouts, and the checks
an offset commit from such a group's member passes (the member epoch stands in for the classic generation).

A heartbeat works out its records from the group as it stands, appends them to the group's `__consumer_offsets`
partition in one batch and replays them into the group (the log first: a failed append changes nothing). The
subscribed topics' metadata is looked at on every heartbeat (a dictionary lookup here, where Kafka refreshes it on an
interval): a topic created or grown moves the group epoch at the next heartbeat of any member.
A member is removed when no heartbeat came for group.consumer.session.timeout.ms, or when it still owns partitions it
was asked to revoke rebalance.timeout.ms after it was asked.
An in-process member heartbeats with a `notify` callback: whenever a change to its group leaves it with a step to take
(a new target to move to, partitions to give up, partitions now released for it), it is told to heartbeat now rather
than at its next interval (a remote member learns it at its next heartbeat, as from Kafka). The callbacks run once the
group coordinator's lock is released (`defer`), and take no lock of the member's.
Members of the classic protocol in a group (online migration) speak through `classic_join`, `classic_sync`,
`classic_heartbeat` and `classic_leave` (engine.groups.classic_members); their session is their JoinGroup's. A heartbeat
may upgrade a classic group first, and a member of the consumer protocol leaving the last may downgrade the group
(`on_downgrade`, the classic coordinator's).
Byte layout and crash policy: engine.groups.consumer_group_records' (one batch per heartbeat, all or nothing).
Thread-safety: every method runs under the group coordinator's lock (its caller holds it).
"""
from __future__ import annotations

import logging
import math
from typing import Callable, NamedTuple, Sequence

from engine.common.errors import (
    GroupIdNotFoundError,
    IllegalGenerationError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from engine.groups import classic_members, consumer_group, consumer_group_records as rec, offsets
from engine.groups.group_metadata import GroupMetadata, JoinResult
from engine.groups.consumer_group import ConsumerGroup, Heartbeat, HeartbeatAnswer, Member, Settings, TopicsView

log = logging.getLogger("kafkalog.groups")
PROTOCOL_TYPE = "consumer"


class MemberDescription(NamedTuple):
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: dict[str, frozenset[int]]
    target_assignment: dict[str, frozenset[int]]
    state: str


class ConsumerGroupDescription(NamedTuple):
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[MemberDescription]
    topic_names: dict[str, str]  # topic id -> name, of the topics the group subscribes to


class ConsumerGroupCoordinator:
    """The consumer groups of one group coordinator: `append(partition, rows, now)` writes to `__consumer_offsets`,
    `topics(names)` says which of the named topics exist (all of them for None) and their ids and partition counts,
    `defer(callback)` runs a member's `notify` once the coordinator's lock is released."""

    def __init__(self, append: Callable[[int, list, int], None], topics: TopicsView, settings: Settings,
                 defer: Callable[[Callable[[], None]], None]) -> None:
        self._append = append
        self.topics = topics  # (what the group records name: {topic name: (topic id, partitions)})
        self._defer = defer
        self.settings = settings
        self.groups: dict[str, ConsumerGroup] = {}
        self._notify: dict[tuple[str, str], Callable[[], None]] = {}  # (group, member) -> its `notify`, if in process
        # (group, the member leaving or None for a static replacement, now, the members' notify callbacks, whether to
        # rebalance, the classic generation): makes the group a classic one (the classic coordinator's; None: groups
        # never downgrade)
        self.on_downgrade: Callable[[ConsumerGroup, str | None, int, dict, bool, int], None] | None = None

    # --- records ----------------------------------------------------------------------------------
    def replay(self, r: rec.Record) -> None:
        """One record, from the log on load or just appended."""
        g = self.groups.get(r.group_id)
        if g is None:
            if r.value is None:
                return
            g = self.groups[r.group_id] = ConsumerGroup(r.group_id)
        g.replay(r)
        if r.kind == rec.MEMBER_METADATA and r.value is None:
            self._notify.pop((r.group_id, r.member_id), None)
        if r.kind == rec.GROUP_EPOCH and r.value is None and not g.members:
            del self.groups[r.group_id]  # the group's last record is gone: the group is deleted

    def _write(self, g: ConsumerGroup, records: list[rec.Record], now: int, by: str = "",
               before: Sequence[tuple[bytes, bytes | None]] = ()) -> None:
        """Append `records` (after the rows `before`, in one batch) and replay them; then tell the group's other
        in-process members with a step to take."""
        if not records:
            return
        self._append(offsets.partition(g.group_id), [*before, *(rec.encode(r) for r in records)], now)
        if g.group_id not in self.groups:
            self.groups[g.group_id] = g
        for r in records:
            self.replay(r)
        for mid, m in g.members.items():
            if mid != by and (m.epoch != g.assignment_epoch or m.state != consumer_group.STABLE):
                notify = self._notify.get((g.group_id, mid))
                if notify is not None:
                    self._defer(notify)

    def renew_sessions(self, now: int) -> None:
        """After a load: every member's session starts now (they must heartbeat within its timeout)."""
        for g in self.groups.values():
            for mid, m in g.members.items():
                g.session_deadlines[mid] = now + self._session_ms(m)

    def _session_ms(self, m: Member) -> int:
        """A member's session timeout: its JoinGroup's for a member of the classic protocol, else the group's."""
        return self.settings.session_timeout_ms if m.classic is None else m.classic.session_timeout_ms

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(self, hb: Heartbeat, now: int, notify: Callable[[], None] | None = None,
                  upgrading: GroupMetadata | None = None, before: Sequence[tuple[bytes, bytes | None]] = (),
                  notifies: dict[str, Callable[[], None]] | None = None) -> HeartbeatAnswer:
        """One heartbeat; `notify` (an in-process member's): told to heartbeat at once when a change leaves it a step
        to take (see the module docstring). With `upgrading`, the classic group of that id becomes a consumer group
        first (engine.groups.classic_members.upgrade), in one batch with the rows `before` (its record's tombstone)
        and the heartbeat's records; `notifies`: its in-process members' callbacks."""
        consumer_group.check_request(hb, self.settings.assignors)
        if upgrading is None:
            g = self.groups.get(hb.group_id) or ConsumerGroup(hb.group_id)
            result = consumer_group.heartbeat(g, hb, self.topics, self.settings, now=now)
            records = result.records
        else:
            conversion = classic_members.upgrade(upgrading, self.topics)
            converted = ConsumerGroup(hb.group_id)
            for r in conversion:
                converted.replay(r)
            result = consumer_group.heartbeat(converted, hb, self.topics, self.settings, now=now)
            records, g = conversion + result.records, ConsumerGroup(hb.group_id)
            log.info("group %s: upgraded from a classic group (generation %d) to a consumer group", hb.group_id,
                     upgrading.generation)
        m = result.member
        if m is not None and m.epoch == consumer_group.STATIC_LEAVE_EPOCH:
            self._notify.pop((g.group_id, m.member_id), None)  # (gone until it comes back, under a new id)
        elif m is not None and notify is not None:
            self._notify[(g.group_id, m.member_id)] = notify
        for mid, callback in (notifies or {}).items():
            self._notify[(hb.group_id, mid)] = callback
        if m is None and self._downgrade(g, hb.member_id, now):
            return result.answer
        self._write(g, records, now, by=result.answer.member_id, before=before)
        if upgrading is not None:  # (the classic members' sessions: their JoinGroup's)
            for mid, member in g.members.items():
                if mid != m.member_id:
                    g.session_deadlines[mid] = now + self._session_ms(member)
        if m is None or m.epoch == consumer_group.STATIC_LEAVE_EPOCH:
            if m is not None:  # a static member that left keeps its place until its session ends
                g.rebalance_deadlines.pop(m.member_id, None)
            return result.answer
        g.session_deadlines[m.member_id] = now + self.settings.session_timeout_ms
        if m.state == consumer_group.UNREVOKED_PARTITIONS:
            if g.rebalance_deadlines.get(m.member_id, (None,))[0] != m.epoch:
                g.rebalance_deadlines[m.member_id] = (m.epoch, now + max(m.rebalance_timeout_ms, 0))
        else:
            g.rebalance_deadlines.pop(m.member_id, None)
        return result.answer

    def tick(self, now: int) -> None:
        """Remove the members whose session or rebalance timeout passed."""
        for g in list(self.groups.values()):
            for mid, deadline in list(g.session_deadlines.items()):
                if now >= deadline and mid in g.members:
                    self._fence(g, mid, now, "its session timed out")
            for mid, (epoch, deadline) in list(g.rebalance_deadlines.items()):
                m = g.members.get(mid)
                if m is not None and now >= deadline:
                    if m.epoch == epoch:
                        self._fence(g, mid, now, f"it did not revoke its partitions within {m.rebalance_timeout_ms} ms")
                    else:
                        g.rebalance_deadlines.pop(mid, None)

    def _fence(self, g: ConsumerGroup, member_id: str, now: int, why: str) -> None:
        log.info("consumer group %s: member %s removed: %s", g.group_id, member_id, why)
        if not self._downgrade(g, member_id, now):
            self._write(g, consumer_group.fence(g, member_id, self.topics), now)

    def _downgrade(self, g: ConsumerGroup, leaving: str, now: int) -> bool:
        """When `leaving` is the last member of the consumer group protocol and classic members remain: the group
        becomes a classic group (`on_downgrade`, the classic coordinator's, writes it) and True; else False."""
        if self.on_downgrade is None or not classic_members.downgrade_due(g, leaving):
            return False
        self.on_downgrade(g, leaving, now, self._take_notifies(g), True, g.epoch)
        return True

    def drop(self, g: ConsumerGroup, rows_after: Sequence[tuple[bytes, bytes | None]], now: int) -> None:
        """Make every record of `g` a tombstone, in one batch with the rows `rows_after` (a downgrade's classic group
        record): the group is gone from here."""
        tombstones = classic_members.tombstones(g)
        self._append(offsets.partition(g.group_id), [*(rec.encode(r) for r in tombstones), *rows_after], now)
        for r in tombstones:
            self.replay(r)
        self.groups.pop(g.group_id, None)

    # --- members of the classic protocol (engine.groups.classic_members) ------------------------------
    def classic_join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                     protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                     rebalance_timeout_ms: int, now: int, notify: Callable[[], None] | None = None) -> JoinResult:
        """A classic member's JoinGroup to a consumer group with members: answered at once (see classic_members)."""
        g = self.groups[group_id]
        replaced = g.members.get(g.static.get(instance_id, "")) if instance_id is not None else None
        epoch = g.epoch
        result = classic_members.join(g, member_id, instance_id, client_id, client_host, protocol_type, protocols,
                                      session_timeout_ms, rebalance_timeout_ms, self.topics, self.settings, now)
        m = result.member
        if notify is not None:
            self._notify[(group_id, m.member_id)] = notify
        self._write(g, result.records, now, by=m.member_id)
        g.session_deadlines[m.member_id] = now + session_timeout_ms
        g.rebalance_deadlines.pop(m.member_id, None)
        if replaced is not None and replaced.member_id != m.member_id:
            self._downgrade_replaced(g, replaced, m, epoch, now)
        return JoinResult(m.member_id, m.epoch, classic_members.PROTOCOL_TYPE, classic_members.protocol_of(m), "", [])

    def _downgrade_replaced(self, g: ConsumerGroup, replaced: Member, joined: Member, epoch: int, now: int) -> None:
        """Kafka's downgrade on a static replacement: a classic member took the place of a static member and every
        member is now of the classic protocol, so the group becomes a classic group (at the group's epoch before the
        join, `epoch`, as Kafka converts the group it had) holding the joined member with the replaced one's
        assignment; it rebalances only if the subscription changed."""
        if self.on_downgrade is None or any(x.classic is None for x in g.members.values()):
            return
        changed = (replaced.topic_names, replaced.topic_regex) != (joined.topic_names, joined.topic_regex)
        self.on_downgrade(g, None, now, self._take_notifies(g), changed, epoch)

    def _take_notifies(self, g: ConsumerGroup) -> dict[str, Callable[[], None]]:
        """The in-process members' notify callbacks of `g`, handed over (to the classic group it becomes)."""
        return {mid: self._notify.pop((g.group_id, mid)) for mid in list(g.members)
                if (g.group_id, mid) in self._notify}

    def classic_sync(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None, now: int) -> bytes:
        g = self.groups[group_id]
        try:
            assignment = classic_members.sync(g, member_id, instance_id, generation_id, protocol_type, protocol_name,
                                              self.topics)
        except RebalanceInProgressError:
            self._rejoin_by(g, member_id, instance_id, now)
            raise
        self._renew(g, member_id, instance_id, now)
        return assignment

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                          now: int) -> None:
        """A classic member's Heartbeat: RebalanceInProgressError when it must rejoin."""
        g = self.groups[group_id]
        rejoin = classic_members.must_rejoin(g, member_id, instance_id, generation_id)
        self._renew(g, member_id, instance_id, now)
        if rejoin:
            self._rejoin_by(g, member_id, instance_id, now)
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing: member {member_id} must rejoin")

    def classic_leave(self, group_id: str, member_id: str, instance_id: str | None, now: int) -> None:
        g = self.groups[group_id]
        leaving, records = classic_members.leave(g, member_id, instance_id, self.topics)
        log.info("consumer group %s: classic member %s left", group_id, leaving)
        self._write(g, records, now)

    @staticmethod
    def _named(g: ConsumerGroup, member_id: str, instance_id: str | None) -> Member:
        """The member a classic request named (checked already: classic_members)."""
        return g.members[g.static.get(instance_id, member_id) if instance_id is not None else member_id]

    def _renew(self, g: ConsumerGroup, member_id: str, instance_id: str | None, now: int) -> None:
        m = self._named(g, member_id, instance_id)
        g.session_deadlines[m.member_id] = now + self._session_ms(m)

    def _rejoin_by(self, g: ConsumerGroup, member_id: str, instance_id: str | None, now: int) -> None:
        """A classic member told to rejoin must do so within its rebalance timeout (Kafka's join timeout), or leave."""
        m = self._named(g, member_id, instance_id)
        if m.member_id not in g.rebalance_deadlines:
            g.rebalance_deadlines[m.member_id] = (m.epoch, now + max(m.rebalance_timeout_ms, 0))

    def earliest_deadline(self) -> float:
        times = [t for g in self.groups.values() for t in g.session_deadlines.values()]
        times += [t for g in self.groups.values() for _, t in g.rebalance_deadlines.values()]
        return min(times, default=math.inf)

    # --- offsets and admin ----------------------------------------------------------------------------
    def check_commit(self, group_id: str, member_id: str, member_epoch: int, stale_error: bool) -> bool:
        """Whether `group_id` is a consumer group (then the commit's member and epoch were checked: UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for OffsetCommit before v9 and for a classic member). A commit with
        no member and a negative epoch is an admin's, allowed only while the group is empty."""
        g = self.groups.get(group_id)
        if g is None:
            return False
        if not member_id and member_epoch < 0:
            if g.members:
                raise UnknownMemberIdError(f"consumer group {group_id!r} has members: commit from a member")
            return True
        m = g.members.get(member_id)
        if m is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in consumer group {group_id!r}")
        if member_epoch != m.epoch:  # (a classic member is told in its protocol's terms, as Kafka tells it)
            error = StaleMemberEpochError if stale_error and m.classic is None else IllegalGenerationError
            raise error(f"member {member_id} of consumer group {group_id!r} committed with epoch {member_epoch}; its "
                        f"epoch is {m.epoch}")
        return True

    def empty(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is None or not g.members

    def delete(self, group_id: str, now: int) -> None:
        """An empty consumer group's records become tombstones (its offsets are the caller's)."""
        g = self.groups.get(group_id)
        if g is None:
            return
        self._write(g, consumer_group.group_tombstones(g), now)

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topic names the group's members subscribe to (their names and what their expressions match)."""
        g = self.groups[group_id]
        _, matched = consumer_group.resolve(g.members.values(), self.topics)
        return set().union(*(consumer_group.subscribed(m, matched) for m in g.members.values()))

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        g = self.groups.get(group_id)
        if g is None:
            raise GroupIdNotFoundError(f"consumer group {group_id!r} does not exist")
        assignor = consumer_group.preferred_assignor(g.members.values(), self.settings.assignors)
        return ConsumerGroupDescription(group_id, g.state, g.epoch, g.assignment_epoch, assignor,
                                        [_describe_member(g, m) for m in g.members.values()],
                                        g.topic_names(self.topics))


def _describe_member(g: ConsumerGroup, m: Member) -> MemberDescription:
    return MemberDescription(m.member_id, m.instance_id, m.rack_id, m.epoch, m.client_id, m.client_host,
                             list(m.topic_names), m.topic_regex, m.assigned, g.targets.get(m.member_id, {}),
                             consumer_group.MEMBER_STATES.get(m.state, "Unknown"))
