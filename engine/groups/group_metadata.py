"""A group's membership, as the coordinator holds it and as `__consumer_offsets` stores it (Kafka's
GroupMetadata and its GroupMetadataKey/GroupMetadataValue records).

Byte layout (engine.record.schema encodings): key = `int16 2 | group string`; value = `int16 version |
protocolType string | generation int32 | protocol nullable string | leader nullable string | currentStateTimestamp
int64 (v2+) | members [memberId string | groupInstanceId nullable string (v3+) | clientId string | clientHost
string | rebalanceTimeout int32 (v1+) | sessionTimeout int32 | subscription bytes | assignment bytes]`; version 4
is flexible (compact strings, bytes and arrays, tagged fields). kafkalog writes version 3 and reads 0-4. A null
value (tombstone) means the group is gone. The group record sits in the group's `__consumer_offsets` partition
beside its offset commits.
Crash policy: written when a generation's assignment is complete, when the group empties, when a static member
is replaced, and (a tombstone) when an empty group's last offset expires; the last record wins on load.
Thread-safety: GroupMetadata is guarded by the coordinator's lock.
"""
from __future__ import annotations

import functools
import operator
import struct
import threading
from typing import Callable, NamedTuple

from engine.common.errors import KafkaError
from engine.record.schema import Reader, Writer, encoded_bytes, encoded_string

KEY_VERSION, VALUE_VERSION = 2, 3
EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class Pending:
    """A response the coordinator completes later (a JoinGroup or SyncGroup held until the rebalance moves on).
    Its event is made on first use: most answers are collected by a poll that does not wait for them."""

    __slots__ = ("member_id", "sync", "value", "error", "done", "_event", "_watchers")  # (two per member a rebalance)

    def __init__(self, member_id: str = "") -> None:
        self.member_id = member_id  # a JoinGroup's member id, known before the join completes (as KIP-394)
        self.sync: Pending | None = None  # a follower's SyncGroup, sent with its JoinGroup's answer
        self.value = None
        self.error: KafkaError | None = None
        self.done = False
        self._event: threading.Event | None = None
        self._watchers: list | None = None

    def complete(self, value=None, error: KafkaError | None = None) -> None:
        with _EVENTS:
            if self.done:
                return
            self.value, self.error, self.done = value, error, True
            event, watchers = self._event, self._watchers
        if event is not None:
            event.set()
        for watcher in watchers or ():
            watcher.set()

    def watch(self, watcher) -> None:
        """Call `watcher.set()` once the answer is in (at once if it is): a waiter that cannot block on the event."""
        with _EVENTS:
            if not self.done:
                if watcher not in (self._watchers or ()):  # (a waiter looks again while the answer is out)
                    self._watchers = (self._watchers or []) + [watcher]
                return
        watcher.set()

    @property
    def event(self) -> threading.Event:
        """Set once the answer is in (for a caller that waits for it)."""
        with _EVENTS:
            if self._event is None:
                self._event = threading.Event()
                if self.done:
                    self._event.set()
            return self._event

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


_TIMEOUTS = struct.Struct(">ii")  # a member's rebalance and session timeouts
_EVENTS = threading.Lock()  # orders a completion against the first use of an event
_AWAITING_JOIN = operator.attrgetter("awaiting_join")  # a member's held JoinGroup (None: it has not joined)


class JoinResult(NamedTuple):
    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: list[tuple[str, str | None, bytes]]  # (member id, group instance id, metadata): the leader's only
    skip_assignment: bool = False  # a static leader rejoining a stable group keeps the current assignment


class GroupDescription(NamedTuple):
    """DescribeGroups' view of a group (a classic group, or a consumer group described the classic way)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str | None
    members: list[dict]  # member_id, group_instance_id, client_id, client_host, assignment [TopicPartition],
    # metadata and assignment_bytes (the member's subscription and assignment as DescribeGroups sends them)


class MemberRecord(NamedTuple):
    """One member as the group record stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupRecord(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord]


class MemberMetadata:
    """A member: its identity, timeouts, the protocols it supports, its assignment, and any held response."""

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], now: int) -> None:
        self.member_id, self.group_instance_id = member_id, group_instance_id
        self.client_id, self.client_host = client_id, client_host
        self.rebalance_timeout_ms, self.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        self.protocol_type, self.protocols = protocol_type, protocols
        self.assignment = b""
        self.awaiting_join: Pending | None = None
        self.awaiting_sync: Pending | None = None
        self.is_new = False
        self.last_heartbeat = now
        self.notify: Callable[[], None] | None = None  # tells an in-process member at once that a rebalance began

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def vote(self, candidates: set[str]) -> str:
        """This member's first preference among `candidates`."""
        return next(name for name, _ in self.protocols if name in candidates)


class GroupMetadata:
    """A group: state, generation, protocol, leader and members (in join order)."""

    def __init__(self, group_id: str, now: int, state: str = EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.generation = 0
        self.leader: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_sync: set[str] = set()
        self.state_timestamp = now
        self.join_deadline: int | None = None
        self.initial_deadline: int | None = None  # the cap of the initial rebalance delay
        self.sync_deadline: int | None = None
        self._candidates: frozenset[str] | None = None  # candidate_protocols, until the members or theirs change

    def transition(self, state: str, now: int) -> None:
        self.state, self.state_timestamp = state, now

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._candidates = None
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> MemberMetadata:
        member = self.members.pop(member_id)
        self._candidates = None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def set_protocols(self, member: MemberMetadata, protocols: list[tuple[str, bytes]]) -> None:
        """A member's protocols as its latest JoinGroup offers them (their metadata changes with each assignment;
        the candidates only when the names do)."""
        if [name for name, _ in member.protocols] != [name for name, _ in protocols]:
            self._candidates = None
        member.protocols = protocols

    def candidate_protocols(self) -> frozenset[str]:
        """Protocols every member supports (kept until a member joins, leaves or offers others: a rebalance of M
        members asks M times)."""
        if self._candidates is None:
            sets = [{name for name, _ in m.protocols} for m in self.members.values()]
            self._candidates = frozenset(set.intersection(*sets) if sets else ())
        return self._candidates

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and bool({n for n, _ in protocols} & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The candidate with most first-preference votes (ties: the earliest in the first member's preference)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = [name for name, _ in next(iter(self.members.values())).protocols]
        return max(votes, key=lambda name: (votes[name], -order.index(name)))

    def all_joined(self) -> bool:
        return None not in map(_AWAITING_JOIN, self.members.values())  # (at C speed: asked at each of M joins)

    def record(self) -> GroupRecord:
        return GroupRecord(self.protocol_type or "", self.generation, self.protocol, self.leader,
                           self.state_timestamp, [
                               MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                            m.rebalance_timeout_ms, m.session_timeout_ms,
                                            m.metadata(self.protocol) if self.protocol else b"", m.assignment)
                               for m in self.members.values()])


def encode_key(group_id: str) -> bytes:
    return Writer().int(16, KEY_VERSION).string(group_id).done()


def decode_key(data) -> str | None:
    """The group of a group-metadata key; None for other record kinds."""
    r = Reader(data, "group metadata key")
    if r.int(16, "key version") != KEY_VERSION:
        return None
    group = r.string("group")
    r.end()
    return group


def encode_value(g: GroupRecord) -> bytes:
    parts = [Writer().int(16, VALUE_VERSION).string(g.protocol_type).int(32, g.generation).string(g.protocol)
             .string(g.leader).int(64, g.current_state_timestamp).count(len(g.members)).done()]
    for m in g.members:  # (a group of hundreds is stored on every rebalance: one lookup for what stays the same)
        parts += (_member_identity(*m[:6]), encoded_bytes(m.subscription), encoded_bytes(m.assignment))
    return b"".join(parts)


@functools.lru_cache(maxsize=4096)
def _member_identity(member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                     rebalance_timeout_ms: int, session_timeout_ms: int) -> bytes:
    """A member's fields before its subscription, encoded (the same at each generation the member stays)."""
    return b"".join((encoded_string(member_id), encoded_string(group_instance_id), encoded_string(client_id),
                     encoded_string(client_host), _TIMEOUTS.pack(rebalance_timeout_ms, session_timeout_ms)))


def decode_value(data) -> GroupRecord:
    r = Reader(data, "group metadata value")
    version = r.version(4, "value version")
    flex = version >= 4
    protocol_type = r.string("protocolType", flex)
    generation = r.int(32, "generation")
    protocol = r.string("protocol", flex, nullable=True)
    leader = r.string("leader", flex, nullable=True)
    timestamp = r.int(64, "currentStateTimestamp") if version >= 2 else -1
    members = []
    for _ in range(r.count("members", flex) or 0):
        member_id = r.string("memberId", flex)
        instance = r.string("groupInstanceId", flex, nullable=True) if version >= 3 else None
        client_id, host = r.string("clientId", flex), r.string("clientHost", flex)
        rebalance = r.int(32, "rebalanceTimeout") if version >= 1 else -1
        session = r.int(32, "sessionTimeout")
        subscription, assignment = r.bytes("subscription", flex), r.bytes("assignment", flex)
        if flex:
            r.tagged()
        members.append(MemberRecord(member_id, instance, client_id, host, rebalance, session, subscription,
                                    assignment))
    if flex:
        r.tagged()
    r.end()
    return GroupRecord(protocol_type, generation, protocol, leader, timestamp, members)
