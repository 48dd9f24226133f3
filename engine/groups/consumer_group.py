"""Consumer groups of the consumer group protocol (KIP-848): the coordinator's side of ConsumerGroupHeartbeat.

No member leads. A member subscribes with topic names, a regular expression (SubscribedTopicRegex), or both: the
expression is RE2's syntax (Kafka's RE2/J), matched against the whole name of every topic a client may use (not the
internal ones) at every heartbeat, so a matching topic created joins the subscription at the next heartbeat of any
member. (Kafka resolves expressions in the background, on a refresh schedule of its own; here the match is made
again from the topics themselves at every heartbeat. What it matched is written as Kafka 4.1 writes it, a
ConsumerGroupRegularExpression record per expression, when the match changes, and a tombstone once no member uses
the expression.)
A group has an epoch, bumped whenever a member joins or leaves or the subscribed topics change (names, the expression,
the topics it matches, or the partitions or id of a subscribed topic: Kafka 4.1's metadata hash of them, which the
epoch record carries, moved); when the group epoch is past the target assignment's
epoch the coordinator runs a server assignor (engine.groups.server_assignors) for a new target assignment. Each
member then moves towards its target in its own heartbeats, with its own member epoch (Kafka's
CurrentAssignmentBuilder):
- partitions it holds but its target does not are revoked first: the member stays at its epoch (UNREVOKED_PARTITIONS)
  until a heartbeat shows it no longer owns them, or is fenced at its rebalance timeout;
- a partition its target adds is handed over only once no other member holds it at any epoch (until then the member
  is UNRELEASED_PARTITIONS, at the target epoch);
- then it is STABLE at the target epoch.
A member that sends an epoch it does not have is fenced (FENCED_MEMBER_EPOCH: a greater one, or a smaller one but its
previous epoch while owning only what it is assigned) and joins again with epoch 0 under the same id (accepted, as
KIP-848 says and Kafka since KAFKA-19233 does; the 4.0 code kafkalog otherwise follows fenced it again); one that misses heartbeats for the session timeout is removed,
and the group epoch moves. Static members (group.instance.id) leave with epoch -2, keep their assignment and come
back under a new member id; a member id that is empty on a join is made here (heartbeat v0), one the member made
itself is taken (Kafka 4's clients make their own).
States: Empty (no members), Assigning (group epoch past the assignment epoch), Reconciling (a member not yet at the
assignment epoch), Stable.
Every change is a engine.groups.consumer_group_records Record. A heartbeat works out its records from the group as it
stands, then the coordinator appends them in one batch and replays them into the group (as Kafka's coordinator
does): `replay` is the only code that changes a group, on load and live alike.
Byte layout: the records' (engine.groups.consumer_group_records). Crash policy: a group is what its records say; the
deadlines (sessions, rebalance timeouts) are memory only and start again when the log is loaded.
Thread-safety: guarded by the group coordinator's lock.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, NamedTuple

import re2

from engine.common.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from engine.groups import consumer_group_records as rec
from engine.groups.consumer_group_records import Record
from engine.groups.server_assignors import GroupSpec, MemberSpec, PartitionAssignorError, ServerAssignor
from engine.segments.partition_metadata import new_topic_id as new_member_id  # (Kafka's member ids: a random Uuid)

Parts = dict[str, frozenset[int]]  # topic id -> partitions
# topic names -> {name: (topic id, partitions)} of those that exist; None: of every topic a client may use
TopicsView = Callable[[list[str] | None], dict[str, tuple[str, int]]]
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, UNKNOWN = 0, 1, 2, 127
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
EMPTY, ASSIGNING, RECONCILING, GROUP_STABLE = "Empty", "Assigning", "Reconciling", "Stable"
MEMBER_STATES = {STABLE: "Stable", UNREVOKED_PARTITIONS: "UnrevokedPartitions",
                 UNRELEASED_PARTITIONS: "UnreleasedPartitions", UNKNOWN: "Unknown"}


class Classic(NamedTuple):
    """What a member of the classic protocol joined with (Kafka's ClassicMemberMetadata): its session timeout and
    the protocols it offered, each (name, its ConsumerProtocolSubscription bytes)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Member:
    """One member: what it subscribes with (its metadata record) and where it stands (its assignment record)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topic_names: tuple[str, ...] = ()
    topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = 0
    state: int = STABLE
    assigned: Parts = field(default_factory=dict)
    pending_revocation: Parts = field(default_factory=dict)
    classic: Classic | None = None  # a member of the classic protocol (online migration): its JoinGroup's settings

    def metadata_value(self) -> dict:
        classic = None if self.classic is None else {
            "session_timeout_ms": self.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": m} for n, m in self.classic.protocols]}
        return {"instance_id": self.instance_id, "rack_id": self.rack_id, "client_id": self.client_id,
                "client_host": self.client_host, "subscribed_topic_names": list(self.topic_names),
                "subscribed_topic_regex": self.topic_regex, "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "server_assignor": self.server_assignor, "classic_member_metadata": classic}

    def assignment_value(self) -> dict:
        return {"member_epoch": self.epoch, "previous_member_epoch": self.previous_epoch, "state": self.state,
                "assigned_partitions": rec.partitions_out(self.assigned),
                "partitions_pending_revocation": rec.partitions_out(self.pending_revocation)}

    def same_metadata(self, other: "Member") -> bool:
        return self.metadata_value() == other.metadata_value()

    def same_assignment(self, other: "Member") -> bool:
        return (self.epoch, self.previous_epoch, self.state, self.assigned, self.pending_revocation) == \
            (other.epoch, other.previous_epoch, other.state, other.assigned, other.pending_revocation)


class HeartbeatAnswer(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Parts | None  # None: unchanged since the last answer


class Heartbeat(NamedTuple):
    """A ConsumerGroupHeartbeat request's fields (None and -1 mean "unchanged since the last heartbeat")."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topic_names: list[str] | None = None
    topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Parts | None = None
    client_id: str = ""
    client_host: str = "/127.0.0.1"  # (as the classic coordinator names members in this process)


class ConsumerGroup:
    """A consumer group's state, changed only by `replay`."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.targets: dict[str, Parts] = {}
        self.metadata_hash = 0  # Kafka 4.1's hash of the subscribed topics (consumer_group_records.metadata_hash)
        self.partition_metadata_record = False  # a ConsumerGroupPartitionMetadata record (Kafka 4.0's) is live
        self.resolved: dict[str, frozenset[str]] = {}  # expression -> the topics its last record says it matched
        self.static: dict[str, str] = {}  # instance id -> member id
        self.partition_epochs: dict[tuple[str, int], int] = {}  # (topic id, partition) -> its holder's epoch
        self.session_deadlines: dict[str, int] = {}
        self.rebalance_deadlines: dict[str, tuple[int, int]] = {}  # member -> (epoch it must leave, deadline)
        self.created = False  # a record of it has been replayed

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.epoch != self.assignment_epoch:
            return ASSIGNING
        if any(m.state != STABLE or m.epoch != self.assignment_epoch for m in self.members.values()):
            return RECONCILING
        return GROUP_STABLE

    def topic_names(self, topics: "TopicsView") -> dict[str, str]:
        """Topic id -> name, of the topics the group subscribes to."""
        return {tid: name for name, (tid, _) in resolve(self.members.values(), topics)[0].items()}

    def partition_epoch(self, topic_id: str, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def target_of(self, member_id: str, instance_id: str | None) -> Parts:
        if member_id in self.targets:
            return self.targets[member_id]
        previous = self.static.get(instance_id) if instance_id is not None else None
        return self.targets.get(previous, {}) if previous is not None else {}

    # --- replay -----------------------------------------------------------------------------------
    def replay(self, r: Record) -> None:
        self.created = True
        v = r.value
        if r.kind == rec.GROUP_EPOCH:
            self.epoch, self.metadata_hash = (v["epoch"], v["metadata_hash"]) if v is not None else (0, 0)
        elif r.kind == rec.PARTITION_METADATA:  # (Kafka 4.1 keeps only whether one is there: the hash replaced it)
            self.partition_metadata_record = v is not None
        elif r.kind == rec.REGULAR_EXPRESSION:
            if v is None:
                self.resolved.pop(r.member_id, None)
            else:
                self.resolved[r.member_id] = frozenset(v["topics"])
        elif r.kind == rec.TARGET_EPOCH:
            self.assignment_epoch = v["assignment_epoch"] if v is not None else 0
        elif r.kind == rec.TARGET_MEMBER:
            if v is None:
                self.targets.pop(r.member_id, None)
            else:
                self.targets[r.member_id] = rec.partitions_in(v["topic_partitions"])
        elif r.kind == rec.MEMBER_METADATA:
            old = self.members.get(r.member_id)
            if v is None:
                if old is not None:
                    self._drop_epochs(old)
                    del self.members[r.member_id]
                    if old.instance_id is not None and self.static.get(old.instance_id) == r.member_id:
                        del self.static[old.instance_id]
                self.session_deadlines.pop(r.member_id, None)
                self.rebalance_deadlines.pop(r.member_id, None)
                return
            classic = v.get("classic_member_metadata")
            m = replace(old or Member(r.member_id), instance_id=v["instance_id"], rack_id=v["rack_id"],
                        client_id=v["client_id"], client_host=v["client_host"],
                        topic_names=tuple(v["subscribed_topic_names"]), topic_regex=v["subscribed_topic_regex"],
                        rebalance_timeout_ms=v["rebalance_timeout_ms"], server_assignor=v["server_assignor"],
                        classic=None if classic is None else Classic(classic["session_timeout_ms"], tuple(
                            (p["name"], bytes(p["metadata"])) for p in classic["supported_protocols"])))
            self.members[r.member_id] = m
            if m.instance_id is not None:
                self.static[m.instance_id] = r.member_id
        elif r.kind == rec.CURRENT_ASSIGNMENT:
            old = self.members.get(r.member_id)
            if old is None:
                if v is None:
                    return
                old = Member(r.member_id)  # (its metadata record may come later in a log that was compacted)
            else:
                self._drop_epochs(old)
            if v is None:
                self.members[r.member_id] = replace(old, epoch=0, previous_epoch=0, state=STABLE, assigned={},
                                                    pending_revocation={})
                return
            m = replace(old, epoch=v["member_epoch"], previous_epoch=v["previous_member_epoch"], state=v["state"],
                        assigned=rec.partitions_in(v["assigned_partitions"]),
                        pending_revocation=rec.partitions_in(v["partitions_pending_revocation"]))
            self.members[r.member_id] = m
            for parts in (m.assigned, m.pending_revocation):
                for t, ps in parts.items():
                    for p in ps:
                        self.partition_epochs[(t, p)] = m.epoch

    def _drop_epochs(self, m: Member) -> None:
        for parts in (m.assigned, m.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    if self.partition_epochs.get((t, p)) == m.epoch:
                        del self.partition_epochs[(t, p)]


def reconcile(m: Member, target_epoch: int, target: Parts, partition_epoch: Callable[[str, int], int],
              owned: Parts | None) -> Member:
    """The member's next assignment state on the way to `target` (Kafka's CurrentAssignmentBuilder)."""
    if m.state == STABLE:
        if m.epoch == target_epoch:
            return m
        return _next(m, m.epoch, target_epoch, target, partition_epoch, owned)
    if m.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, m.pending_revocation):
            return m
        return _next(m, m.epoch + 1, target_epoch, target, partition_epoch, owned)
    if m.state == UNRELEASED_PARTITIONS:
        return _next(m, m.epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise FencedMemberEpochError(f"member {m.member_id} is in an unknown state: it must give up its partitions "
                                     f"and join again")
    return _next(m, target_epoch, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: Parts | None, parts: Parts) -> bool:
    """Whether the member still owns any of `parts` (not knowing what it owns counts as owning them)."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in parts.items())


def _next(m: Member, epoch: int, target_epoch: int, target: Parts, partition_epoch, owned: Parts | None) -> Member:
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    unreleased = False
    for t in set(target) | set(m.assigned):
        want, have = target.get(t, frozenset()), m.assigned.get(t, frozenset())
        keep = have & want
        free = frozenset(p for p in want - keep if partition_epoch(t, p) == -1)
        unreleased = unreleased or len(free) < len(want - keep)
        for parts, value in ((assigned, keep), (revoking, have - keep), (adding, free)):
            if value:
                parts[t] = value
    if revoking and _owns_any(owned, revoking):
        return replace(m, state=UNREVOKED_PARTITIONS, epoch=epoch, previous_epoch=_previous(m, epoch),
                       assigned=assigned, pending_revocation=revoking)
    for t, ps in adding.items():
        assigned[t] = assigned.get(t, frozenset()) | ps
    return replace(m, state=UNRELEASED_PARTITIONS if unreleased else STABLE, epoch=target_epoch,
                   previous_epoch=_previous(m, target_epoch), assigned=assigned, pending_revocation={})


def _previous(m: Member, epoch: int) -> int:
    """Kafka's Builder.updateMemberEpoch: the previous epoch becomes the current one when the epoch moves."""
    return m.epoch if epoch != m.epoch else m.previous_epoch


class Settings(NamedTuple):
    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignors: dict[str, ServerAssignor]  # the first is the default


class Result(NamedTuple):
    records: list[Record]
    answer: HeartbeatAnswer
    member: Member | None  # the member as it stands after the records (None once it left)


_RE2 = re2.Options()
_RE2.log_errors = False  # (a client's bad expression is its error, answered; not a line on the server's stderr)


@functools.lru_cache(maxsize=256)
def pattern(regex: str):
    """`regex` compiled with RE2 (the C++ library RE2/J, Kafka's, was ported from: one syntax);
    InvalidRegularExpressionError when it is not an expression."""
    try:
        return re2.compile(regex, options=_RE2)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidRegularExpressionError(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: "
                                            f"{why}") from None


def subscribed(m: Member, matched: dict[str, frozenset[str]]) -> frozenset[str]:
    """The topic names `m` subscribes to: its names and what its expression matched (`matched`: `resolve`'s)."""
    names = frozenset(m.topic_names)
    return names | matched[m.topic_regex] if m.topic_regex else names


def resolve(members: Iterable[Member], topics: TopicsView) -> tuple[dict[str, tuple[str, int]],
                                                                    dict[str, frozenset[str]]]:
    """The metadata of the topics that `members` subscribe to ({name: (topic id, partitions)}, of those that exist),
    and what each of their expressions matches."""
    members = list(members)
    names = {t for m in members for t in m.topic_names}
    regexes = {m.topic_regex for m in members if m.topic_regex}
    if not regexes:
        return topics(sorted(names)), {}
    every = topics(None)
    matched = {}
    for r in regexes:
        fullmatch = pattern(r).fullmatch
        matched[r] = frozenset(t for t in every if fullmatch(t) is not None)
    wanted = names.union(*matched.values())
    return {t: every[t] for t in sorted(wanted) if t in every}, matched


def check_request(hb: Heartbeat, assignors: dict) -> None:
    """The request checks Kafka makes before anything else (InvalidRequestError, InvalidRegularExpressionError,
    UnsupportedAssignorError)."""
    def not_empty(value, what):
        if value is not None and value == "":
            raise InvalidRequestError(f"{what} can't be empty")
    not_empty(hb.group_id, "GroupId")
    not_empty(hb.instance_id, "InstanceId")
    not_empty(hb.rack_id, "RackId")
    if hb.member_epoch > 0 or hb.member_epoch == LEAVE_EPOCH:
        not_empty(hb.member_id, "MemberId")
    elif hb.member_epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request")
        if hb.owned is None or hb.owned:
            raise InvalidRequestError("TopicPartitions must be empty when (re-)joining")
        if hb.topic_names is None and hb.topic_regex is None:  # (an empty list or "": a member of no topic)
            raise InvalidRequestError("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                                      "(re-)joining")
    elif hb.member_epoch == STATIC_LEAVE_EPOCH:
        not_empty(hb.member_id, "MemberId")
        if hb.instance_id is None:
            raise InvalidRequestError("InstanceId can't be null")
    else:
        raise InvalidRequestError(f"MemberEpoch {hb.member_epoch} is invalid")
    if hb.topic_regex:
        pattern(hb.topic_regex)
    if hb.server_assignor is not None and hb.server_assignor not in assignors:
        raise UnsupportedAssignorError(f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: "
                                       f"{', '.join(assignors)}.")


def _check_epoch(m: Member, received: int, owned: Parts | None) -> None:
    if received == 0:
        return  # a fenced member joining again under its id, as KIP-848 says (Kafka's KAFKA-19233 fix)
    if received > m.epoch:
        raise FencedMemberEpochError(f"member {m.member_id} sent epoch {received}, greater than its epoch {m.epoch}: "
                                     f"it must give up its partitions and join again")
    if received < m.epoch:
        subset = owned is not None and all(ps <= m.assigned.get(t, frozenset()) for t, ps in owned.items())
        if received != m.previous_epoch or not subset:
            raise FencedMemberEpochError(f"member {m.member_id} sent epoch {received}, smaller than its epoch "
                                         f"{m.epoch}: it must give up its partitions and join again")


def heartbeat(g: ConsumerGroup, hb: Heartbeat, topics: TopicsView, s: Settings,
              classic: Classic | None = None, now: int = 0) -> Result:
    """The records and answer of one heartbeat at `now` (the group is left as it is: the caller replays the
    records). With `classic`, a classic member's JoinGroup made a heartbeat (engine.groups.classic_members): the
    member's epoch is taken as it stands, and a static member joining under a new id replaces the one holding its
    instance id."""
    if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        return _leave(g, hb, topics)
    joining = hb.member_epoch == 0
    if not joining and not g.created:
        raise GroupIdNotFoundError(f"consumer group {hb.group_id!r} does not exist")
    records: list[Record] = []
    member_id = hb.member_id or new_member_id()
    new = joining and member_id not in g.members and g.static.get(hb.instance_id) is None  # (not a static return)
    if hb.instance_id is None:
        m = g.members.get(member_id)
        if m is None:
            if not joining:
                raise UnknownMemberIdError(f"member {member_id} is not a member of group {g.group_id!r}")
            m = Member(member_id)
        else:
            _check_epoch(m, hb.member_epoch, hb.owned)
    else:
        holder = g.members.get(g.static.get(hb.instance_id, ""))
        if joining:
            if holder is None:
                m = g.members.get(member_id) or Member(member_id)
            else:
                if holder.epoch != STATIC_LEAVE_EPOCH and classic is None:
                    raise UnreleasedInstanceIdError(f"static member {member_id} cannot join group {g.group_id!r}: "
                                                    f"instance id {hb.instance_id} is owned by {holder.member_id}")
                m = replace(holder, member_id=member_id, epoch=0, previous_epoch=0)
                records += remove_records(g, holder.member_id)
                records.append(Record(rec.MEMBER_METADATA, g.group_id, member_id, m.metadata_value()))
                records.append(Record(rec.TARGET_MEMBER, g.group_id, member_id,
                                      {"topic_partitions": rec.partitions_out(g.targets.get(holder.member_id, {}))}))
                records.append(Record(rec.CURRENT_ASSIGNMENT, g.group_id, member_id, m.assignment_value()))
        else:
            if holder is None:
                raise UnknownMemberIdError(f"instance id {hb.instance_id} is unknown")
            if holder.member_id != member_id:
                raise FencedInstanceIdError(f"static member {member_id} with instance id {hb.instance_id} was fenced "
                                            f"by member {holder.member_id}")
            _check_epoch(holder, hb.member_epoch, hb.owned)
            m = holder
    updated = replace(
        m, instance_id=hb.instance_id if hb.instance_id is not None else m.instance_id,
        rack_id=hb.rack_id if hb.rack_id is not None else m.rack_id,
        rebalance_timeout_ms=hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else m.rebalance_timeout_ms,
        server_assignor=hb.server_assignor if hb.server_assignor is not None else m.server_assignor,
        topic_names=tuple(hb.topic_names) if hb.topic_names is not None else m.topic_names,
        topic_regex=(hb.topic_regex or None) if hb.topic_regex is not None else m.topic_regex,  # ("": none)
        client_id=hb.client_id, client_host=hb.client_host, classic=classic)
    bump = False
    if not updated.same_metadata(m):  # (a new member's client id and host always differ from none)
        records.append(Record(rec.MEMBER_METADATA, g.group_id, member_id, updated.metadata_value()))
        # (a new member subscribed to nothing moves the epoch too: its first answer must carry an epoch above 0)
        bump = updated.topic_names != m.topic_names or updated.topic_regex != m.topic_regex or new
    members = {k: v for k, v in g.members.items() if k != member_id}
    previous = g.static.get(updated.instance_id) if updated.instance_id is not None else None
    if previous is not None and previous != member_id:
        members.pop(previous, None)
    members[member_id] = updated
    metadata, matched = resolve(members.values(), topics)
    records += _resolved_records(g, matched, now)
    digest = rec.metadata_hash(metadata)
    bump = bump or digest != g.metadata_hash  # (a subscribed topic created, deleted or grown)
    epoch = g.epoch
    if bump:
        epoch += 1
        records.append(Record(rec.GROUP_EPOCH, g.group_id, "", {"epoch": epoch, "metadata_hash": digest}))
    records += _without_partition_metadata(g)
    if epoch > g.assignment_epoch:
        targets = _assign(g, members, metadata, matched, s)
        for mid in members:
            if mid not in g.targets or targets.get(mid, {}) != g.targets[mid]:
                records.append(Record(rec.TARGET_MEMBER, g.group_id, mid,
                                      {"topic_partitions": rec.partitions_out(targets.get(mid, {}))}))
        records.append(Record(rec.TARGET_EPOCH, g.group_id, "", {"assignment_epoch": epoch}))
        target_epoch, target = epoch, targets.get(member_id, {})
    else:
        target_epoch, target = g.assignment_epoch, g.target_of(member_id, updated.instance_id)
    after = reconcile(updated, target_epoch, target, g.partition_epoch, hb.owned)
    if not after.same_assignment(updated):
        records.append(Record(rec.CURRENT_ASSIGNMENT, g.group_id, member_id, after.assignment_value()))
    full = joining or (hb.rebalance_timeout_ms != -1 and (hb.topic_names is not None or hb.topic_regex is not None)
                       and hb.owned is not None)
    changed = after.assigned != m.assigned
    return Result(records, HeartbeatAnswer(member_id, after.epoch, s.heartbeat_interval_ms,
                                           after.assigned if full or changed else None), after)


def _assign(g: ConsumerGroup, members: dict[str, Member], metadata: dict[str, tuple[str, int]],
            matched: dict[str, frozenset[str]], s: Settings) -> dict[str, Parts]:
    """The new target assignment of every member (Kafka's TargetAssignmentBuilder)."""
    name = preferred_assignor(members.values(), s.assignors)
    subscriptions = {mid: subscribed(m, matched) for mid, m in members.items()}
    counts: dict[str, int] = {}
    for names in subscriptions.values():
        for t in names:
            counts[t] = counts.get(t, 0) + 1
    homogeneous = all(c == len(members) for c in counts.values())
    specs = {}
    for mid, m in members.items():  # (a static member back under a new id starts from its old target)
        specs[mid] = MemberSpec(frozenset(metadata[t][0] for t in subscriptions[mid] if t in metadata),
                                g.target_of(mid, m.instance_id), m.instance_id, m.rack_id)
    spec = GroupSpec(specs, {tid: n for tid, n in metadata.values()}, homogeneous)
    try:
        return s.assignors[name].assign(spec)
    except PartitionAssignorError as exc:
        raise PartitionAssignorError(f"failed to compute a new target assignment for group {g.group_id!r}: "
                                     f"{exc.message}") from None


def _resolved_records(g: ConsumerGroup, matched: dict[str, frozenset[str]], now: int) -> list[Record]:
    """Kafka 4.1's records of what each subscribed expression matched (`matched`: the expressions the members use
    now): one for an expression whose match changed, a tombstone for one no member uses any more."""
    out = [Record(rec.REGULAR_EXPRESSION, g.group_id, r, {"topics": sorted(ts), "version": 0, "timestamp": now})
           for r, ts in sorted(matched.items()) if g.resolved.get(r) != ts]
    return out + _unused_expressions(g, matched)


def _unused_expressions(g: ConsumerGroup, matched: dict[str, frozenset[str]]) -> list[Record]:
    """Tombstones of the expressions the group has records of that no member uses now (not in `matched`)."""
    return [Record(rec.REGULAR_EXPRESSION, g.group_id, r, None) for r in sorted(g.resolved) if r not in matched]


def _without_partition_metadata(g: ConsumerGroup) -> list[Record]:
    """The tombstone of a Kafka 4.0 partition metadata record the group still has (Kafka 4.1 writes it with the
    subscriptions it computes: the metadata hash replaced the record)."""
    return [Record(rec.PARTITION_METADATA, g.group_id, "", None)] if g.partition_metadata_record else []


def preferred_assignor(members: Iterable[Member], assignors: dict[str, ServerAssignor]) -> str:
    """The server assignor most members ask for (ties: the last name in order), else the coordinator's default."""
    votes: dict[str, int] = {}
    for m in members:
        if m.server_assignor is not None:
            votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
    return max(votes, key=lambda a: (votes[a], a)) if votes else next(iter(assignors))


def remove_records(g: ConsumerGroup, member_id: str) -> list[Record]:
    """The tombstones that take a member out of the group."""
    return [Record(rec.CURRENT_ASSIGNMENT, g.group_id, member_id, None),
            Record(rec.TARGET_MEMBER, g.group_id, member_id, None),
            Record(rec.MEMBER_METADATA, g.group_id, member_id, None)]


def group_tombstones(g: ConsumerGroup) -> list[Record]:
    """The tombstones of the group's own records (its expressions', its target epoch, its partition metadata, its
    epoch), written after its members' when the group goes."""
    return _unused_expressions(g, {}) + [Record(kind, g.group_id, "", None)
                                         for kind in (rec.TARGET_EPOCH, rec.PARTITION_METADATA, rec.GROUP_EPOCH)]


def fence(g: ConsumerGroup, member_id: str, topics: TopicsView) -> list[Record]:
    """The records of a member leaving (or being removed): its tombstones, the subscriptions without it, a new epoch."""
    records = remove_records(g, member_id)
    metadata, matched = resolve((x for mid, x in g.members.items() if mid != member_id), topics)
    records += _unused_expressions(g, matched)
    records.append(Record(rec.GROUP_EPOCH, g.group_id, "", {"epoch": g.epoch + 1,
                                                           "metadata_hash": rec.metadata_hash(metadata)}))
    return records


def _leave(g: ConsumerGroup, hb: Heartbeat, topics: TopicsView) -> Result:
    if not g.created:
        raise GroupIdNotFoundError(f"consumer group {hb.group_id!r} does not exist")
    if hb.instance_id is None:
        m = g.members.get(hb.member_id)
        if m is None:
            raise UnknownMemberIdError(f"member {hb.member_id} is not a member of group {g.group_id!r}")
    else:
        m = g.members.get(g.static.get(hb.instance_id, ""))
        if m is None:
            raise UnknownMemberIdError(f"instance id {hb.instance_id} is unknown")
        if m.member_id != hb.member_id:
            raise FencedInstanceIdError(f"static member {hb.member_id} with instance id {hb.instance_id} was fenced "
                                        f"by member {m.member_id}")
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            gone = replace(m, epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
            return Result([Record(rec.CURRENT_ASSIGNMENT, g.group_id, m.member_id, gone.assignment_value())],
                          HeartbeatAnswer(m.member_id, STATIC_LEAVE_EPOCH, 0, None), gone)
    return Result(fence(g, m.member_id, topics), HeartbeatAnswer(hb.member_id, hb.member_epoch, 0, None), None)
