"""Server-side partition assignors: the coordinator's half of the consumer group protocol (KIP-848; Kafka's
ConsumerGroupPartitionAssignor). Under that protocol no member leads: the coordinator computes each member's target
assignment itself whenever the group's epoch moves past its assignment epoch.

An assignor has a `name` (what a member asks for in ConsumerGroupHeartbeat's ServerAssignor field, and what
`group.consumer.assignors` lists) and `assign(spec) -> {member_id: {topic_id: set(partitions)}}`. The GroupSpec it
reads holds, per member, the topics it subscribes to (existing topics only, by topic id), its group.instance.id and
its current target assignment; the partition count of every subscribed topic; and whether every member subscribes to
the same topics (homogeneous). Custom assignors subclass ServerAssignor.

Built in, with Kafka's algorithms:
- `uniform` (the default): balanced first (two members' partition counts differ by one at most when they subscribe
  alike; as close as the subscriptions allow otherwise), sticky second (a member keeps what it holds unless balance
  asks otherwise). Homogeneous groups: each member keeps up to its quota, the rest fill the members below theirs.
  Heterogeneous groups: unsubscribed partitions are dropped, unassigned ones go to the least loaded subscriber,
  topic by topic (the topics with the most partitions per subscriber first), then partitions move from the most to
  the least loaded subscribers of each topic until it is balanced, in at most 16 passes over the topics.
- `range`: per topic, consecutive ranges over the members sorted by group.instance.id (static members first) then
  member id, the first (partitions % members) getting one more; co-partitioned when every member subscribes to
  the same topics and they have as many partitions. It keeps nothing from the current assignment.

Kafka iterates hash maps where the outcome depends on an order; here those orders are explicit and stable: members in
the GroupSpec's order (the coordinator's, by arrival), topics in Kafka's topic-id order (Uuid.compareTo: the two
halves as signed longs), a member's partitions ascending. tests/broker/test_server_assignors.py runs Kafka's own
classes on random group histories in those same orders and finds the same assignments.
Byte layout and crash policy: none (memory only; the assignments they compute are stored by the coordinator).
Thread-safety: assignors are stateless: one instance serves every group, from any thread.
"""
from __future__ import annotations

import abc
import struct
from typing import Iterable, NamedTuple

from engine.common.errors import InvalidConfigurationError, UnknownServerError
from engine.groups.assignors import java_order
from engine.segments.partition_metadata import topic_uuid

Assignment = dict[str, frozenset[int]]  # topic id -> partitions
MAX_BALANCE_PASSES = 16


class PartitionAssignorError(UnknownServerError):
    """An assignor could not assign the group (Kafka answers the heartbeat with UNKNOWN_SERVER_ERROR)."""


class MemberSpec(NamedTuple):
    """What an assignor knows of one member."""

    topics: frozenset[str]  # the subscribed topics' ids (topics that exist)
    assignment: Assignment  # its current target assignment
    instance_id: str | None = None
    rack_id: str | None = None


class GroupSpec(NamedTuple):
    """An assignor's input: the members (in the coordinator's order), each subscribed topic's partition count, and
    whether every member subscribes to the same topics."""

    members: dict[str, MemberSpec]
    partitions: dict[str, int]  # topic id -> partition count
    homogeneous: bool

    def partition_count(self, topic_id: str) -> int:
        count = self.partitions.get(topic_id)
        if count is None:
            raise PartitionAssignorError(f"members subscribe to topic {topic_id}, which has no metadata")
        return count


class ServerAssignor(abc.ABC):
    """The interface a custom server assignor implements (set `name`, implement `assign`)."""

    name = ""

    @abc.abstractmethod
    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        """Every member's new target assignment (a member left out gets nothing)."""


def uuid_order(topic_id: str) -> tuple[int, int]:
    """A sort key that orders topic ids (22 characters of URL-safe base64) as Kafka's Uuid.compareTo does."""
    return struct.unpack(">qq", topic_uuid(topic_id).bytes)


def _frozen(assignment: dict[str, set[int]]) -> Assignment:
    return {t: frozenset(p) for t, p in assignment.items() if p}


class UniformAssignor(ServerAssignor):
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if not spec.members:
            return {}
        if spec.homogeneous:
            return _homogeneous(spec)
        return _Heterogeneous(spec).build()


def _homogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    topics = sorted(next(iter(spec.members.values())).topics, key=uuid_order)
    if not topics:
        return {}
    held = {(t, p) for m in spec.members.values() for t, ps in m.assignment.items() for p in ps}
    unassigned: list[tuple[str, int]] = []
    total = 0
    for t in topics:
        count = spec.partition_count(t)
        unassigned.extend((t, p) for p in range(count) if (t, p) not in held)
        total += count
    quota, extra = divmod(total, len(spec.members))
    target: dict[str, dict[str, set[int]]] = {}
    unfilled: list[tuple[str, int]] = []
    for member_id, m in spec.members.items():
        room = quota + 1 if extra > 0 else quota
        extra -= 1
        kept: dict[str, set[int]] = {}
        for t in sorted(m.assignment, key=uuid_order):
            if t not in m.topics:
                continue  # unsubscribed: dropped
            ps = sorted(m.assignment[t])
            kept[t] = set(ps[:room])
            unassigned.extend((t, p) for p in ps[room:])
            room -= len(kept[t])
        if room > 0:
            unfilled.append((member_id, room))
        target[member_id] = kept
    i = 0
    for member_id, room in unfilled:
        for t, p in unassigned[i:i + room]:
            target[member_id].setdefault(t, set()).add(p)
        i += room
    if i < len(unassigned):
        raise PartitionAssignorError(f"{len(unassigned) - i} partitions were left unassigned")
    return {m: _frozen(a) for m, a in target.items()}


class _Balancer:
    """The members subscribed to one topic ordered by load, handing out the least loaded (a round over every member
    of the lowest load before the next load up) and the most loaded (the reverse), as Kafka's heterogeneous uniform
    assignor walks them; `sizes` is shared with the builder and moves as partitions do."""

    def __init__(self, sizes: list[int], members: list[int]) -> None:
        self.sizes = sizes
        self.order = sorted(members, key=lambda i: (sizes[i], i))
        n = len(self.order)
        self.low_end, self.low_count, self.next_low = 0, sizes[self.order[0]] - 1, 0
        self.high_start, self.high_end, self.high_count = n, n, sizes[self.order[-1]] + 1
        self.next_high = n - 1

    def imbalance(self) -> int:
        return self.sizes[self.order[-1]] - self.sizes[self.order[0]]

    def least_loaded(self) -> int:
        if self.next_low >= self.low_end:
            self.low_count += 1
            while self.low_end < len(self.order) and self.sizes[self.order[self.low_end]] == self.low_count:
                self.low_end += 1
            self.next_low = 0
        member = self.order[self.next_low]
        self.next_low += 1
        return member

    def most_loaded(self) -> int:
        if self.next_high < self.high_start:
            if self.high_end <= self.high_start and self.high_start > 0:
                self.high_count = self.sizes[self.order[self.high_start - 1]]
            else:
                self.high_count -= 1
            while self.high_start > 0 and self.sizes[self.order[self.high_start - 1]] == self.high_count:
                self.high_start -= 1
            self.next_high = self.high_end - 1
        if self.next_high < 0:
            return -1
        member = self.order[self.next_high]
        self.next_high -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Take the member most_loaded() just returned out of the rounds (it has nothing left to give)."""
        at, last = self.next_high + 1, self.high_end - 1
        self.order[at], self.order[last] = self.order[last], self.order[at]
        self.high_end -= 1

    def balanced(self) -> bool:
        return self.high_count - self.low_count <= 1


class _Heterogeneous:
    """The uniform assignor for members subscribing to different topics."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.ids = list(spec.members)
        self.sizes = [0] * len(self.ids)
        self.subscribers: dict[str, list[int]] = {}
        for i, m in enumerate(spec.members.values()):
            for t in m.topics:
                spec.partition_count(t)
                self.subscribers.setdefault(t, []).append(i)
        self.owners = {t: [-1] * spec.partitions[t] for t in self.subscribers}
        self.target: list[dict[str, set[int]]] = []

    def _topic_order(self, topics: Iterable[str]) -> list[str]:
        def key(t: str):
            return (-self.spec.partitions[t] / len(self.subscribers[t]), len(self.subscribers[t]), uuid_order(t))
        return sorted(topics, key=key)

    def build(self) -> dict[str, Assignment]:
        if not self.subscribers:
            return {}
        for i, m in enumerate(self.spec.members.values()):
            kept = {t: set(ps) for t, ps in m.assignment.items() if t in m.topics}
            for t, ps in kept.items():
                self.sizes[i] += len(ps)
                for p in ps:
                    self.owners[t][p] = i
            self.target.append(kept)
        for t in self._topic_order(t for t, owners in self.owners.items() if -1 in owners):
            balancer = _Balancer(self.sizes, self.subscribers[t])
            for p, owner in enumerate(self.owners[t]):
                if owner == -1:
                    self._move(t, p, balancer.least_loaded())
        self._balance([t for t, members in self.subscribers.items() if len(members) >= 2])
        return {member_id: _frozen(a) for member_id, a in zip(self.ids, self.target)}

    def _balance(self, topics: list[str]) -> None:
        order = self._topic_order(topics)
        last_moved = -1
        for _ in range(MAX_BALANCE_PASSES):
            for i, t in enumerate(order):
                if i == last_moved:
                    return
                if self._balance_topic(t) > 0 or last_moved == -1:
                    last_moved = i

    def _balance_topic(self, topic: str) -> int:
        owners = self.owners[topic]
        balancer = _Balancer(self.sizes, self.subscribers[topic])
        if balancer.imbalance() <= 1:
            return 0
        by_owner = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, p in enumerate(by_owner):
            start.setdefault(owners[p], i)
            end[owners[p]] = i + 1
        moved = 0
        while not balancer.balanced():
            giver = balancer.most_loaded()
            while giver != -1 and end.get(giver, 0) - start.get(giver, 0) <= 0:
                balancer.exclude_most_loaded()
                giver = balancer.most_loaded()
            if giver == -1:
                break
            end[giver] -= 1
            partition = by_owner[end[giver]]
            taker = balancer.least_loaded()
            if balancer.balanced():
                break
            self._move(topic, partition, taker)
            moved += 1
        return moved

    def _move(self, topic: str, partition: int, member: int) -> None:
        old = self.owners[topic][partition]
        if old != -1:
            self.target[old][topic].discard(partition)
            self.sizes[old] -= 1
        self.target[member].setdefault(topic, set()).add(partition)
        self.owners[topic][partition] = member
        self.sizes[member] += 1


class RangeAssignor(ServerAssignor):
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        members = sorted(spec.members, key=lambda m: _static_first(m, spec.members[m].instance_id))
        subscribers: dict[str, int] = {}
        for m in members:
            for t in spec.members[m].topics:
                spec.partition_count(t)
                subscribers[t] = subscribers.get(t, 0) + 1
        # per topic: the next partition to hand out and how many members still get one more than the quota
        cursor = {t: [0, spec.partitions[t] % n] for t, n in subscribers.items()}
        out: dict[str, Assignment] = {}
        for m in members:
            mine: dict[str, frozenset[int]] = {}
            for t in spec.members[m].topics:
                quota = spec.partitions[t] // subscribers[t]
                state = cursor[t]
                if state[1] > 0:
                    quota += 1
                    state[1] -= 1
                first, state[0] = state[0], min(state[0] + quota, spec.partitions[t])
                if first < state[0]:
                    mine[t] = frozenset(range(first, state[0]))
            out[m] = mine
        return out


def _static_first(member_id: str, instance_id: str | None) -> tuple:
    """Kafka's order of members for the range assignor: static members by instance id, then the others by member id
    (both as Java compares strings)."""
    return (0, java_order(instance_id), "") if instance_id is not None else (1, b"", java_order(member_id))


BUILT_IN = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def resolve(names: Iterable[str | ServerAssignor]) -> dict[str, ServerAssignor]:
    """The assignors a coordinator offers (`group.consumer.assignors`: names of the built-in ones or ServerAssignor
    instances; or one comma-separated string of names, as Kafka's setting), by name, the first the default."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out: dict[str, ServerAssignor] = {}
    for a in names:
        if isinstance(a, str):
            if a not in BUILT_IN:
                raise InvalidConfigurationError(f"group.consumer.assignors: no server assignor named {a!r} (built in: "
                                                f"{', '.join(BUILT_IN)})")
            a = BUILT_IN[a]
        elif not isinstance(a, ServerAssignor) or not a.name:
            raise InvalidConfigurationError(f"group.consumer.assignors: {a!r} is not a named ServerAssignor")
        out[a.name] = a
    if not out:
        raise InvalidConfigurationError("group.consumer.assignors: at least one assignor is needed")
    return out
