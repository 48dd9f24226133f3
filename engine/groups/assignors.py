"""Partition assignors: the leader consumer's half of a rebalance (Kafka's ConsumerPartitionAssignor).

An assignor has a `name` (the protocol name members vote on), `supported_protocols()` ("eager", and
"cooperative" for incremental rebalancing), `subscription_user_data(topics)` (bytes a member sends with its
subscription), `assign(partitions_per_topic, subscriptions) -> {member_id: [TopicPartition]}` (run on the
leader; `subscriptions` maps member ids to consumer_protocol.Subscription) and `on_assignment(assignment,
metadata)` (run on every member once its assignment arrives). Built in, with Kafka's names and algorithms:
range, roundrobin, sticky (its previous assignment travels in user data, StickyAssignorUserData v1) and
cooperative-sticky (owned partitions travel in the subscription; a partition that changes owner is left out of
the first assignment, so its owner revokes it and a second rebalance hands it over).
Members are ordered as Kafka orders them: by group.instance.id for static members (who come first), then by
member id. Where Kafka iterates a hash map the sticky assignors iterate in sorted order (deterministic, and the
same outcome for every example in Kafka's documentation).
Assignors are not thread-safe: one per consumer, used from its thread.
"""
from __future__ import annotations

import abc
import inspect
import itertools
import operator
import random
import struct
from collections import defaultdict
from typing import Iterable, NamedTuple

from engine.common.errors import CorruptRecordError, InvalidConfigurationError
from engine.common.structs import PARTITION_OF, TOPIC_OF, ConsumerGroupMetadata, TopicPartition, topic_partitions
from engine.groups.consumer_protocol import Assignment, Subscription, read_partitions, write_partitions
from engine.record.schema import Reader, Writer

EAGER, COOPERATIVE = "eager", "cooperative"
DEFAULT_GENERATION = -1


class ConsumerPartitionAssignor(abc.ABC):
    """The interface a custom assignor implements (subclass it, set `name` and implement `assign`)."""

    name = ""

    def supported_protocols(self) -> list[str]:
        return [EAGER]

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return None

    @abc.abstractmethod
    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """{member id: its partitions}, run on the leader."""

    def on_assignment(self, assignment: Assignment, metadata: ConsumerGroupMetadata) -> None:
        """Called on every member with its own assignment."""


def java_order(s: str) -> bytes:
    """A sort key that orders strings as Java's String.compareTo does: by UTF-16 code unit (Python compares code
    points, which differs once a string holds characters outside the Basic Multilingual Plane)."""
    return s.encode("utf-16-be", "surrogatepass")


def java_sorted(strings: Iterable[str]) -> list[str]:
    """`strings` in Java's String.compareTo order (ASCII, the common case, sorts alike in Python: a plain sort)."""
    strings = list(strings)
    return sorted(strings) if "".join(strings).isascii() else sorted(strings, key=java_order)


def member_order(subscriptions: dict[str, Subscription]) -> list[str]:
    """Member ids in Kafka's MemberInfo order: static members by group.instance.id first, then by member id (both
    compared as Java compares strings)."""
    static = {m: s.group_instance_id for m, s in subscriptions.items() if s.group_instance_id is not None}
    if "".join((*subscriptions, *static.values())).isascii():  # (the common case: Python orders ASCII as Java does)
        return sorted(subscriptions, key=lambda m: (m not in static, static.get(m, ""), m)) if static else \
            sorted(subscriptions)
    return sorted(subscriptions, key=lambda m: (m not in static, java_order(static.get(m, "")), java_order(m)))


def consumers_per_topic(subscriptions: dict[str, Subscription]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for member in member_order(subscriptions):
        for topic in subscriptions[member].topics:
            out[topic].append(member)
    return out


def subscribed_topics(subscriptions: dict[str, Subscription]) -> set[str]:
    """Every topic some member subscribes to."""
    return set().union(*(s.topics for s in subscriptions.values()))


def sorted_partitions(partitions_per_topic: dict[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of the known `topics`, by topic name then partition."""
    return [tp for t in sorted(set(topics)) if t in partitions_per_topic
            for tp in topic_partitions(t, range(partitions_per_topic[t]))]


class RangeAssignor(ConsumerPartitionAssignor):
    """Per topic, consecutive ranges: the first (partitions % members) members get one extra partition."""

    name = "range"

    def assign(self, partitions_per_topic, subscriptions):
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic, members in consumers_per_topic(subscriptions).items():
            n = partitions_per_topic.get(topic)
            if n is None:
                continue
            per, extra = divmod(n, len(members))
            for i, member in enumerate(members):
                start = per * i + min(i, extra)
                out[member] += topic_partitions(topic, range(start, start + per + (i < extra)))
        return out


class RoundRobinAssignor(ConsumerPartitionAssignor):
    """All partitions in order dealt to the members in turn, skipping members not subscribed to the topic."""

    name = "roundrobin"

    def assign(self, partitions_per_topic, subscriptions):
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = member_order(subscriptions)
        topics = subscribed_topics(subscriptions)
        i = 0
        for tp in sorted_partitions(partitions_per_topic, topics):
            while tp.topic not in subscriptions[members[i % len(members)]].topics:
                i += 1
            out[members[i % len(members)]].append(tp)
            i += 1
        return out


class MemberData(NamedTuple):
    partitions: list[TopicPartition]
    generation: int | None  # None: the member sent none


class AbstractStickyAssignor(ConsumerPartitionAssignor):
    """Balanced first, then as close to the previous assignment as balance allows (Kafka 2.8+'s algorithm)."""

    def __init__(self) -> None:
        self.partitions_transferring_ownership: dict[TopicPartition, str] | None = None

    @abc.abstractmethod
    def member_data(self, subscription: Subscription) -> MemberData:
        """What a member owned, and in which generation (where each sticky assignor keeps it)."""

    def assign(self, partitions_per_topic, subscriptions):
        wanted = subscribed_topics(subscriptions)
        partitions_per_topic = {t: n for t, n in partitions_per_topic.items() if t in wanted}
        owned: dict[str, list[TopicPartition]] = {}
        doubly_claimed: set[TopicPartition] = set()
        equal, max_generation = self._owned(partitions_per_topic, subscriptions, owned, doubly_claimed)
        if equal:
            self.partitions_transferring_ownership = {}
            return _Constrained(partitions_per_topic, owned, doubly_claimed,
                                self.partitions_transferring_ownership).build()
        self.partitions_transferring_ownership = None
        return _General(partitions_per_topic, owned, subscriptions, self, max_generation).build()

    def _owned(self, partitions_per_topic, subscriptions, owned, doubly_claimed) -> tuple[bool, int]:
        """Fill `owned` with each member's valid claims (the higher generation wins a partition claimed twice;
        the same generation voids it); whether every member subscribes to the same topics, and the highest
        generation. Kafka's rules, made total where Kafka's are not: a claim on a partition that does not exist (its
        topic was recreated smaller) is dropped, and a claim that loses to a newer generation after an earlier tie
        takes nothing away twice (Kafka's List.remove of an absent element)."""
        topic_sets = {frozenset(s.topics) for s in subscriptions.values()}
        members = java_sorted(subscriptions)
        datas = [self.member_data(subscriptions[member]) for member in members]
        max_generation = max([DEFAULT_GENERATION, *(d.generation for d in datas if d.generation is not None)])
        claims = list(itertools.chain.from_iterable(d.partitions for d in datas))
        if _distinct_and_existing(claims, partitions_per_topic):  # (the usual case)
            owned.update((member, list(data.partitions)) for member, data in zip(members, datas))
            return len(topic_sets) <= 1, max_generation
        owner_of: dict[TopicPartition, str] = {}
        generations: dict[str, int] = {}
        held: dict[str, dict[TopicPartition, None]] = {}  # each member's claims so far, in order (a list's order,
        # a set's membership test: a member's claims are looked up once per claim, which a list makes quadratic)
        for member, data in zip(members, datas):
            generation = DEFAULT_GENERATION if data.generation is None else data.generation
            generations[member] = generation
            mine = held[member] = {}
            for tp in data.partitions:
                if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0) or tp in mine:
                    continue
                other = owner_of.get(tp)
                if other is None:
                    mine[tp] = None
                    owner_of[tp] = member
                elif generation == generations[other]:
                    doubly_claimed.add(tp)
                    held[other].pop(tp, None)
                    owner_of[tp] = member
                elif generation > generations[other]:
                    mine[tp] = None
                    held[other].pop(tp, None)
                    owner_of[tp] = member
        owned.update((member, list(claims)) for member, claims in held.items())
        return len(topic_sets) <= 1, max_generation


def _distinct_and_existing(claims: list[TopicPartition], partitions_per_topic: dict[str, int]) -> bool:
    """Whether no partition is claimed twice and each exists (at C speed: a group's thousands, twice a rebalance)."""
    if len(set(claims)) != len(claims):
        return False
    numbers = list(map(PARTITION_OF, claims))
    topics = set(map(TOPIC_OF, claims))
    if len(topics) == 1:  # (the usual case: the count of one topic to check against)
        return min(numbers) >= 0 and max(numbers) < partitions_per_topic.get(topics.pop(), 0)
    return min(numbers, default=0) >= 0 and all(map(operator.lt, numbers, map(partitions_per_topic.get,
                                                                              map(TOPIC_OF, claims),
                                                                              itertools.repeat(0))))


_BY_PARTITION_THEN_TOPIC = operator.itemgetter(1, 0)  # a TopicPartition's (partition, topic): Kafka's order here
_GENERATION = struct.Struct(">i")  # CooperativeStickyAssignor's user data: the generation, an int32


class _Constrained:
    """Every member subscribes to the same topics: quotas of floor/ceil(partitions / members)."""

    def __init__(self, partitions_per_topic, owned, doubly_claimed, transferring) -> None:
        self.ppt, self.owned, self.doubly_claimed, self.transferring = partitions_per_topic, owned, doubly_claimed, \
            transferring
        total = sum(partitions_per_topic.values())
        members = len(owned)
        self.min_quota, self.max_quota = total // members, -(-total // members)
        self.expected_over = total % members
        self.over = 0
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in owned}

    def build(self) -> dict[str, list[TopicPartition]]:
        assigned = self._assign_owned()
        unassigned = list(itertools.filterfalse(assigned.__contains__, sorted_partitions(self.ppt, self.ppt)))
        self.under_min, self.exactly_min = java_sorted(self.under_min), java_sorted(self.exactly_min)
        self._round_robin(unassigned)
        return self.assignment

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member in java_sorted(self.owned):
            claims = self.owned[member]
            if self.doubly_claimed:
                claims = [tp for tp in claims if tp not in self.doubly_claimed]
            mine = sorted(claims, key=PARTITION_OF if len(self.ppt) == 1 else _BY_PARTITION_THEN_TOPIC)
            if len(mine) < self.min_quota:
                keep = mine
                self.under_min.append(member)
            elif len(mine) >= self.max_quota and self.over < self.expected_over:
                self.over += 1
                if self.over == self.expected_over:
                    self.exactly_min.clear()
                keep = mine[:self.max_quota]
            else:
                keep = mine[:self.min_quota]
                if self.over < self.expected_over:
                    self.exactly_min.append(member)
            for tp in mine[len(keep):]:
                self.maybe_revoked[tp] = member
            self.assignment[member] += keep
            assigned.update(keep)
        return assigned

    def _round_robin(self, unassigned: list[TopicPartition]) -> None:
        i = 0
        for tp in unassigned:
            if i < len(self.under_min):
                member = self.under_min[i]
            elif not self.under_min and not self.exactly_min:
                raise AssertionError(f"no member left for {tp}: the sticky quotas are inconsistent")
            elif not self.under_min:
                member = self.exactly_min.pop(0)
                i = 0
            else:
                i = 0
                member = self.under_min[0]
            count = self._give(tp, member)
            if count == self.min_quota and member in self.under_min:
                self.under_min.remove(member)
                self.exactly_min.append(member)
            else:
                if count == self.max_quota:
                    self.over += 1
                if member in self.under_min:
                    i += 1

    def _give(self, tp: TopicPartition, member: str) -> int:
        self.assignment[member].append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.doubly_claimed:
            self.transferring[tp] = member
        return len(self.assignment[member])


class _Movements:
    """Where partitions moved during one balance, per topic, so a move back undoes a move instead of adding one."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], set[TopicPartition]]] = {}
        self.moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        pairs = self.by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            src, _ = self._remove(tp)
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def actual_partition(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """The partition to move from `old` to `new`: one that earlier moved from `new` to `old`, if any."""
        pairs = self.by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = pairs.get((new, old))
        return min(reverse) if reverse else tp


class _General:
    """Members subscribe to different topics: greedy placement on the least loaded member, then moves that
    improve balance, preferring each partition's previous owner."""

    def __init__(self, partitions_per_topic, owned, subscriptions, assignor, max_generation) -> None:
        self.ppt, self.current, self.subscriptions = partitions_per_topic, owned, subscriptions
        self.assignor, self.max_generation = assignor, max_generation
        self.topic_members: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        self.member_topics: dict[str, list[str]] = {}
        for member in java_sorted(subscriptions):
            topics = [t for t in subscriptions[member].topics if t in partitions_per_topic]
            self.member_topics[member] = topics
            for t in topics:
                self.topic_members[t].append(member)
            self.current.setdefault(member, [])
        self.owner = {tp: m for m, tps in self.current.items() for tp in tps}
        topics = sorted(self.topic_members, key=lambda t: (len(self.topic_members[t]), t))
        self.all_partitions = [tp for t in topics for tp in topic_partitions(t, range(partitions_per_topic[t]))]
        self.revocation_required = False
        self.movements = _Movements()

    def _members(self) -> list[str]:
        """Members taking part, by (assignment size, member id)."""
        return sorted(self.current, key=lambda m: (len(self.current[m]), java_order(m)))

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous()
        assigned = set()
        for member in java_sorted(self.current):
            kept = []
            for tp in self.current[member]:
                if tp.topic not in self.topic_members:
                    self.owner.pop(tp, None)
                elif tp.topic not in self.subscriptions[member].topics:
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.add(tp)
            self.current[member] = kept
        unassigned = [tp for tp in self.all_partitions if tp not in assigned]
        self._balance(previous, unassigned)
        return self.current

    def _previous(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partitions owned in an older generation, with that owner (the fallback when balance allows)."""
        out: dict[TopicPartition, tuple[str, int]] = {}
        for member in java_sorted(self.subscriptions):
            data = self.assignor.member_data(self.subscriptions[member])
            if data.generation is not None and data.generation < self.max_generation:
                generation = data.generation
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in data.partitions:
                if tp not in out or generation > out[tp][1]:
                    out[tp] = (member, generation)
        return out

    def _max_size(self, member: str) -> int:
        return sum(self.ppt[t] for t in self.member_topics[member])

    def _balanced(self) -> bool:
        members = self._members()
        if len(self.current[members[0]]) >= len(self.current[members[-1]]) - 1:
            return True
        owner = {tp: m for m, tps in self.current.items() for tp in tps}
        for member in members:
            count = len(self.current[member])
            if count == self._max_size(member):
                continue
            mine = set(self.current[member])
            for topic in self.member_topics[member]:
                for p in range(self.ppt[topic]):
                    tp = TopicPartition(topic, p)
                    other = owner.get(tp)
                    if tp not in mine and other is not None and count + 1 < len(self.current[other]):
                        return False
        return True

    def _score(self, assignment: dict[str, list]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])

    def _place(self, unassigned: list[TopicPartition]) -> None:
        for tp in unassigned:
            for member in self._members():
                if tp.topic in self.member_topics[member]:
                    self.current[member].append(tp)
                    self.owner[tp] = member
                    break

    def _can_move(self, member: str) -> bool:
        mine = self.current[member]
        return len(mine) < self._max_size(member) or any(len(self.topic_members[tp.topic]) >= 2 for tp in mine)

    def _balance(self, previous, unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self._members()[-1]] if self.current else True
        self._place(unassigned)
        fixed_topics = {t for t, ms in self.topic_members.items() if len(ms) < 2}
        self.all_partitions = [tp for tp in self.all_partitions if tp.topic not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp.topic not in fixed_topics]
        fixed = {m: self.current.pop(m) for m in java_sorted(self.member_topics) if not self._can_move(m)}
        before = {m: list(tps) for m, tps in self.current.items()}
        owners_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(self.all_partitions, previous)
        if not initializing and moved and self._score(self.current) >= self._score(before):
            self.current.clear()
            self.current.update(before)
            self.owner = owners_before
        self.current.update(fixed)

    def _reassign(self, partitions: list[TopicPartition], previous) -> bool:
        moved = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._balanced():
                    break
                member = self.owner[tp]
                prev = previous.get(tp)  # back to its previous owner only while that one still subscribes to it
                if prev is not None and prev[0] in self.current and tp.topic in self.member_topics[prev[0]] and \
                        len(self.current[member]) > len(self.current[prev[0]]) + 1:
                    self._move(tp, prev[0])
                    moved = modified = True
                    continue
                if any(len(self.current[member]) > len(self.current[other]) + 1
                       for other in self.topic_members[tp.topic] if other in self.current):
                    target = next(m for m in self._members() if tp.topic in self.member_topics[m])
                    self._move(tp, target)
                    moved = modified = True
        return moved

    def _move(self, tp: TopicPartition, new: str) -> None:
        tp = self.movements.actual_partition(tp, self.owner[tp], new)
        old = self.owner[tp]
        self.movements.move(tp, old, new)
        self.current[old].remove(tp)
        self.current[new].append(tp)
        self.owner[tp] = new


class StickyAssignor(AbstractStickyAssignor):
    """Eager sticky: the previous assignment and its generation travel in the subscription's user data."""

    name = "sticky"

    def __init__(self) -> None:
        super().__init__()
        self._assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment, metadata) -> None:
        self._assignment = list(assignment.partitions)
        self._generation = metadata.generation_id

    def subscription_user_data(self, topics):
        if self._assignment is None:
            return None
        w = Writer()
        write_partitions(w, self._assignment)
        return w.int(32, self._generation).done()

    def member_data(self, subscription):
        data = subscription.user_data
        if not data:
            return MemberData([], None)
        try:  # StickyAssignorUserData v1 (previous_assignment, generation), else v0 (no generation)
            r = Reader(data, "sticky assignor user data")
            partitions = read_partitions(r, "previous_assignment")
            generation = None if r.at_end() else r.int(32, "generation")
            return MemberData(partitions, generation)
        except CorruptRecordError:
            return MemberData([], DEFAULT_GENERATION)  # unreadable: ignore the previous assignment, as Kafka does


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """Sticky with incremental rebalancing: partitions moving between members are assigned a rebalance later."""

    name = "cooperative-sticky"

    def __init__(self) -> None:
        super().__init__()
        self._generation = DEFAULT_GENERATION

    def supported_protocols(self):
        return [COOPERATIVE, EAGER]

    def on_assignment(self, assignment, metadata) -> None:
        self._generation = metadata.generation_id

    def subscription_user_data(self, topics):
        return _GENERATION.pack(self._generation)

    def member_data(self, subscription):
        if subscription.generation_id != DEFAULT_GENERATION or subscription.owned_partitions:
            return MemberData(list(subscription.owned_partitions), subscription.generation_id)
        generation = None
        if subscription.user_data is not None:
            try:
                generation = Reader(subscription.user_data, "cooperative-sticky user data").int(32, "generation")
            except CorruptRecordError:
                generation = DEFAULT_GENERATION
        return MemberData(list(subscription.owned_partitions), generation)

    def assign(self, partitions_per_topic, subscriptions):
        out = super().assign(partitions_per_topic, subscriptions)
        moving = self.partitions_transferring_ownership
        if moving is None:  # the general algorithm: any partition changing owner moves a rebalance later
            added = {tp: m for m, tps in out.items() for tp in tps if tp not in subscriptions[m].owned_partitions}
            revoked = {tp for m, tps in out.items() for tp in subscriptions[m].owned_partitions if tp not in tps}
            moving = {tp: m for tp, m in added.items() if tp in revoked}
        for tp, member in moving.items():
            out[member].remove(tp)
        return out


class RandomAssignor(ConsumerPartitionAssignor):
    """The seed's example of a custom assignor: each partition to a random subscribed member."""

    name = "random"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()

    def assign(self, partitions_per_topic, subscriptions):
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic, members in consumers_per_topic(subscriptions).items():
            for p in range(partitions_per_topic.get(topic, 0)):
                out[self.rng.choice(members)].append(TopicPartition(topic, p))
        return out


class BroadcastAssignor(ConsumerPartitionAssignor):
    """The seed's other example: every member gets every partition of its topics (a broadcast inside a group;
    the members' committed offsets then overwrite each other's, as the seed warns)."""

    name = "broadcast"

    def assign(self, partitions_per_topic, subscriptions):
        return {m: sorted_partitions(partitions_per_topic, s.topics) for m, s in subscriptions.items()}


BUILT_IN = {cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)}
_JAVA = {f"org.apache.kafka.clients.consumer.{cls.__name__}": cls for cls in BUILT_IN.values()}
DEFAULT_STRATEGY = ("range", "cooperative-sticky")  # the Java consumer's default since Kafka 3.0


def resolve(strategy) -> list[ConsumerPartitionAssignor]:
    """`partition_assignment_strategy` (a name, class or instance, or a list of them in preference order) as
    assignor instances; a typed error naming the bad entry."""
    items = [strategy] if isinstance(strategy, (str, type, ConsumerPartitionAssignor)) else list(strategy)
    if not items:
        raise InvalidConfigurationError("partition_assignment_strategy must name at least one assignor")
    out: list[ConsumerPartitionAssignor] = []
    for item in items:
        if isinstance(item, str):
            cls = BUILT_IN.get(item) or _JAVA.get(item)
            if cls is None:
                raise InvalidConfigurationError(f"partition_assignment_strategy: unknown assignor {item!r} (built in: "
                                                f"{', '.join(BUILT_IN)}; or pass a ConsumerPartitionAssignor class)")
            item = cls()
        elif isinstance(item, type) and issubclass(item, ConsumerPartitionAssignor):
            if inspect.isabstract(item):
                raise InvalidConfigurationError(f"partition_assignment_strategy: {item.__name__} does not implement "
                                                f"{', '.join(sorted(item.__abstractmethods__))}")
            item = item()
        if not isinstance(item, ConsumerPartitionAssignor) or not isinstance(item.name, str) or not item.name:
            raise InvalidConfigurationError(f"partition_assignment_strategy: {item!r} is not a "
                                            f"ConsumerPartitionAssignor with a name")
        if any(a.name == item.name for a in out):
            raise InvalidConfigurationError(f"partition_assignment_strategy names {item.name!r} twice")
        out.append(item)
    return out


def rebalance_protocol(assignors: list[ConsumerPartitionAssignor]) -> str:
    """The protocol every configured assignor supports: cooperative only if all of them do (as Kafka)."""
    common = set.intersection(*(set(a.supported_protocols()) for a in assignors))
    if not common:
        raise InvalidConfigurationError("the configured assignors support no common rebalance protocol")
    return COOPERATIVE if COOPERATIVE in common else EAGER
