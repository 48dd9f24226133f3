"""Share groups' membership (KIP-932): the coordinator's side of ShareGroupHeartbeat.

A member joins with epoch 0 and the topic names it subscribes to (its own member id, as Kafka 4's clients make it; an
empty one is made here), heartbeats with its epoch, and leaves with epoch -1; one that misses heartbeats for the
session timeout is removed. A group has an epoch, bumped whenever a member joins or leaves or the subscribed topics
change (names, or the partitions of a subscribed topic); the `simple` assignor (`simple_assignment`) then spreads the
partitions over the members as Kafka 4.1's does: each partition to one member while there are enough partitions, and
several members on one partition when there are more members than partitions (share groups need no exclusive
ownership: records, not partitions, are handed to one member at a time; the 4.0 sources instead gave every member every
partition). Only share-partitions whose state is initialized are assigned, as in Kafka 4.1+: the heartbeat that first
sees a subscribed partition has it initialized (its start offset set by share.auto.offset.reset) and answers without
it; the members are given it from their next heartbeats. A member whose assignment changed moves to the group epoch
and is sent its new assignment in the answer to its next heartbeat; nothing is revoked first.
A member that sends an epoch it does not have (a greater one, or a smaller one that is not its previous one) is
fenced (FENCED_MEMBER_EPOCH) and joins again with epoch 0.
States: Empty (no members), Stable.
Crash policy: membership is memory only, as a member's session is: after a restart the members join again (the
share-partitions' delivery state is what persists: engine.groups.share_state_records).
Thread-safety: guarded by the share group coordinator's lock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from engine.common.errors import FencedMemberEpochError, InvalidRequestError, UnknownMemberIdError
from engine.groups.consumer_group import TopicsView
from engine.segments.partition_metadata import new_topic_id as new_member_id

Parts = dict[str, frozenset[int]]  # topic id -> partitions
EMPTY, STABLE = "Empty", "Stable"


class ShareHeartbeat(NamedTuple):
    """A ShareGroupHeartbeat's fields (None means "unchanged since the last heartbeat")."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = "/127.0.0.1"


class ShareAnswer(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Parts | None  # None: unchanged since the member last heard it


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    previous_epoch: int
    topics: tuple[str, ...]
    rack: str | None
    client_id: str
    client_host: str
    session_deadline: int
    assignment: Parts = field(default_factory=dict)
    sent: bool = False  # whether the member was sent its current assignment


class ShareGroup:
    """One share group's members and epoch."""

    def __init__(self, group_id: str, ready: Callable[[str, int], bool] = lambda topic_id, partition: True) -> None:
        self.group_id = group_id
        self.ready = ready  # whether a share-partition's state is initialized (only those are assigned)
        self.epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.subscribed: dict[str, tuple[str, int]] = {}  # the subscribed topics: name -> (topic id, partitions)
        self._assignable: dict[str, tuple[str, tuple[int, ...]]] = {}

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def heartbeat(self, hb: ShareHeartbeat, topics: TopicsView, now: int, session_ms: int,
                  interval_ms: int) -> ShareAnswer:
        """Apply one heartbeat; its answer."""
        member = self.members.get(hb.member_id)
        if hb.member_epoch == -1:
            if member is None:
                raise UnknownMemberIdError(f"share group {self.group_id!r} has no member {hb.member_id!r}")
            self.remove(hb.member_id, topics)
            return ShareAnswer(hb.member_id, -1, interval_ms, None)
        if hb.member_epoch == 0:
            if hb.topic_names is None and member is None:
                raise InvalidRequestError("a share group member joins with its SubscribedTopicNames")
            member_id = hb.member_id or new_member_id()
            if member is None:
                member = ShareMember(member_id, 0, -1, (), hb.rack_id, hb.client_id, hb.client_host, 0)
                self.members[member_id] = member
                self.epoch += 1
            member.sent = False
        elif member is None:
            raise UnknownMemberIdError(f"share group {self.group_id!r} has no member {hb.member_id!r}")
        elif hb.member_epoch != member.epoch and hb.member_epoch != member.previous_epoch:
            raise FencedMemberEpochError(f"member {hb.member_id!r} of share group {self.group_id!r} sent epoch "
                                         f"{hb.member_epoch}; its epoch is {member.epoch}")
        member.session_deadline = now + session_ms
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.rack_id is not None:
            member.rack = hb.rack_id
        if hb.topic_names is not None and tuple(sorted(set(hb.topic_names))) != member.topics:
            member.topics = tuple(sorted(set(hb.topic_names)))
            self.epoch += 1
        self.reassign(topics)
        if member.sent:
            return ShareAnswer(member.member_id, member.epoch, interval_ms, None)
        member.previous_epoch, member.epoch = member.epoch, self.epoch
        member.sent = True
        return ShareAnswer(member.member_id, member.epoch, interval_ms, member.assignment)

    def remove(self, member_id: str, topics: TopicsView) -> None:
        if self.members.pop(member_id, None) is not None:
            self.epoch += 1
            self.reassign(topics)

    def reassign(self, topics: TopicsView) -> None:
        """The simple assignor over the subscribed topics' initialized share-partitions as they are now (the group
        epoch moves when they change); a member whose assignment changes is sent it at its next heartbeat, which
        moves it to the group epoch."""
        names = sorted({t for m in self.members.values() for t in m.topics})
        self.subscribed = topics(names) if names else {}
        assignable = {name: (tid, tuple(p for p in range(n) if self.ready(tid, p)))
                      for name, (tid, n) in self.subscribed.items()}
        if assignable != self._assignable:
            self._assignable = assignable
            self.epoch += 1
        targets = simple_assignment({mid: m.topics for mid, m in self.members.items()}, assignable,
                                    {mid: m.assignment for mid, m in self.members.items()})
        for mid, m in self.members.items():
            if targets[mid] != m.assignment:
                m.assignment = targets[mid]
                m.sent = False

    def expired(self, now: int) -> list[str]:
        return [mid for mid, m in self.members.items() if m.session_deadline <= now]

    def subscribed_partitions(self) -> set[tuple[str, int]]:
        """(topic id, partition) of every partition of the topics the members subscribe to."""
        return {(tid, p) for tid, n in self.subscribed.values() for p in range(n)}


def simple_assignment(subscriptions: dict[str, tuple[str, ...]], topics: dict[str, tuple[str, tuple[int, ...]]],
                      current: dict[str, Parts]) -> dict[str, Parts]:
    """Kafka 4.1's simple share assignor, in kafkalog's words: every partition of a subscribed topic goes to one member
    subscribed to it, spread evenly (a member keeps a partition it had while under its share), and then a member left
    with none shares the partition of its topics that the fewest members have; so with more members than partitions
    each partition is read by several."""
    out: dict[str, dict[str, set[int]]] = {mid: {} for mid in subscriptions}
    counts = dict.fromkeys(subscriptions, 0)
    holders: dict[tuple[str, int], list[str]] = {}
    partitions = [(tid, p, name) for name, (tid, ps) in sorted(topics.items()) for p in ps]
    quota = -(-len(partitions) // max(1, len(subscriptions)))
    for tid, p, name in partitions:
        candidates = sorted(mid for mid, t in subscriptions.items() if name in t)
        if not candidates:
            continue
        kept = [mid for mid in candidates if p in current.get(mid, {}).get(tid, ()) and counts[mid] < quota]
        mid = kept[0] if kept else min(candidates, key=lambda c: (counts[c], c))
        out[mid].setdefault(tid, set()).add(p)
        counts[mid] += 1
        holders[(tid, p)] = [mid]
    for mid in sorted(subscriptions):
        if counts[mid]:
            continue
        mine = [(tid, p) for tid, p, name in partitions if name in subscriptions[mid]]
        if mine:
            tid, p = min(mine, key=lambda k: (len(holders[k]), k))
            out[mid].setdefault(tid, set()).add(p)
            holders[(tid, p)].append(mid)
    return {mid: {tid: frozenset(ps) for tid, ps in parts.items()} for mid, parts in out.items()}
