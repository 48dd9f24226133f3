"""Members of the classic protocol in a consumer group: Kafka's online migration between a classic group and a
consumer group (KIP-848), as Kafka 4's coordinator does it with its default policy (`bidirectional`).

- Upgrade: a ConsumerGroupHeartbeat for a classic group with members (of protocol type "consumer") turns the group
  into a consumer group (`upgrade`): the classic group's record becomes a tombstone, and each member becomes a member
  at the group's generation, Stable, holding the partitions of its last SyncGroup assignment, its subscription and
  protocols kept as its classic metadata; the group epoch and the target assignment's epoch are the generation. The
  heartbeat that asked then joins as any member does, so the group epoch moves and the server assignor runs.
- A classic member in a consumer group keeps speaking JoinGroup, SyncGroup, Heartbeat and LeaveGroup. Its JoinGroup
  is a heartbeat of the consumer group protocol made from its subscription (topics, rack, and the partitions a
  cooperative member still owns; an eager member owns none), answered at once with its member epoch as the
  generation and no leader, so it syncs as a follower; its SyncGroup returns the partitions it holds now, in the
  ConsumerProtocolAssignment its protocol speaks. Its Heartbeat answers REBALANCE_IN_PROGRESS (rejoin) when the group
  epoch moved past its epoch, when it must give up partitions, or when partitions it waits for were released; its
  session is its JoinGroup's session timeout. A member of the other protocol is UNKNOWN_MEMBER_ID to these requests.
- Downgrade: when the last member of the consumer group protocol leaves (or is removed) and members of the classic
  protocol remain, the group becomes a classic group again (`downgrade`): the consumer group's records become
  tombstones, the classic group holds every member with its target assignment at the group epoch as generation, and
  a rebalance starts.
Byte layout: the records of engine.groups.consumer_group_records (ClassicMemberMetadata in a member's metadata) and
of engine.groups.group_metadata. Crash policy: a conversion's tombstones and new records go in one batch with the
request's own. Thread-safety: guarded by the group coordinator's lock.
"""
from __future__ import annotations

from engine.common.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from engine.common.structs import TopicPartition
from engine.groups import consumer_group, consumer_group_records as rec, consumer_protocol
from engine.groups.consumer_group import Classic, ConsumerGroup, Heartbeat, Member, Parts, Result, Settings, \
    TopicsView
from engine.groups.group_metadata import STABLE, GroupMetadata, MemberMetadata
from engine.groups.consumer_group_records import Record

PROTOCOL_TYPE = consumer_protocol.PROTOCOL_TYPE


def subscription(protocols) -> consumer_protocol.Subscription:
    """The subscription a JoinGroup's protocols carry (all carry the same: the first is read), or
    InconsistentGroupProtocolError when it is not the consumer protocol's."""
    try:
        return consumer_protocol.decode_subscription(protocols[0][1])
    except (KafkaError, ValueError, IndexError) as exc:
        raise InconsistentGroupProtocolError(f"the member's protocol metadata is not a consumer subscription: "
                                             f"{exc}") from None


def _assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a classic member's last assignment, or InconsistentGroupProtocolError when the bytes are not
    a consumer assignment."""
    try:
        return consumer_protocol.decode_assignment(data).partitions
    except (KafkaError, ValueError, IndexError) as exc:
        raise InconsistentGroupProtocolError(f"the member's assignment is not a consumer assignment: {exc}") from None


def _ids(partitions, topics: TopicsView) -> Parts:
    """{topic id: partitions} of `partitions` (TopicPartitions by name); topics that do not exist are left out."""
    names = sorted({tp.topic for tp in partitions})
    known = topics(names) if names else {}
    out: dict[str, frozenset[int]] = {}
    for tp in partitions:
        if tp.topic in known:
            tid = known[tp.topic][0]
            out[tid] = out.get(tid, frozenset()) | {tp.partition}
    return out


def assignment_bytes(parts: Parts, names: dict[str, str]) -> bytes:
    """`parts` as a ConsumerProtocolAssignment (`names`: topic id -> name; ids without a name are left out)."""
    return consumer_protocol.encode_assignment(consumer_protocol.Assignment(sorted(
        TopicPartition(names[t], p) for t, ps in parts.items() if t in names for p in ps)))


# --- upgrade --------------------------------------------------------------------------------------------
def upgrade(classic: GroupMetadata, topics: TopicsView) -> list[Record]:
    """The records that make the classic group `classic` a consumer group (after the tombstone of its own record)."""
    gid, epoch = classic.group_id, classic.generation
    members = []
    for m in classic.members.values():  # (the subscription of the group's protocol; all a member offers carry one)
        chosen = [(n, d) for n, d in m.protocols if n == classic.protocol]
        sub = subscription(chosen or m.protocols)
        assigned = _ids(_assignment(m.assignment), topics) if m.assignment else {}
        members.append(Member(m.member_id, m.group_instance_id, sub.rack_id, m.client_id, m.client_host,
                              tuple(sub.topics), None, m.rebalance_timeout_ms, None, epoch, epoch,
                              consumer_group.STABLE, assigned, {},
                              Classic(m.session_timeout_ms, tuple((n, bytes(d)) for n, d in m.protocols))))
    records = [Record(rec.MEMBER_METADATA, gid, m.member_id, m.metadata_value()) for m in members]
    metadata, _ = consumer_group.resolve(members, topics)
    records.append(Record(rec.GROUP_EPOCH, gid, "", {"epoch": epoch, "metadata_hash": rec.metadata_hash(metadata)}))
    records += [Record(rec.TARGET_MEMBER, gid, m.member_id, {"topic_partitions": rec.partitions_out(m.assigned)})
                for m in members]
    records.append(Record(rec.TARGET_EPOCH, gid, "", {"assignment_epoch": epoch}))
    records += [Record(rec.CURRENT_ASSIGNMENT, gid, m.member_id, m.assignment_value()) for m in members]
    return records


# --- the classic requests -------------------------------------------------------------------------------
def _classic_member(g: ConsumerGroup, member_id: str, instance_id: str | None) -> Member:
    """The member a classic request names (Kafka's validateConsumerGroupMember and its classic-protocol check)."""
    if instance_id is None:
        m = g.members.get(member_id)
        if m is None:
            raise UnknownMemberIdError(f"member {member_id} is not a member of group {g.group_id!r}")
    else:
        m = g.members.get(g.static.get(instance_id, ""))
        if m is None:
            raise UnknownMemberIdError(f"member with instance id {instance_id} is not a member of group "
                                       f"{g.group_id!r}")
        if member_id and m.member_id != member_id:
            raise FencedInstanceIdError(f"static member {member_id} with instance id {instance_id} was fenced by "
                                        f"member {m.member_id}")
    if m.classic is None:
        raise UnknownMemberIdError(f"member {m.member_id} does not use the classic protocol")
    return m


def _check_protocols(g: ConsumerGroup, member_id: str, protocol_type: str, protocols) -> None:
    """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every classic member offers."""
    if protocol_type != PROTOCOL_TYPE or not protocols:
        raise InconsistentGroupProtocolError(f"member {member_id}'s protocols are not supported: group "
                                             f"{g.group_id!r} is a consumer group (protocol type {PROTOCOL_TYPE!r})")
    common = {n for n, _ in protocols}
    for m in g.members.values():
        if m.classic is not None and m.member_id != member_id:
            common &= {n for n, _ in m.classic.protocols}
    if not common:
        raise InconsistentGroupProtocolError(f"member {member_id}'s protocols are not supported: no protocol is "
                                             f"common to every classic member of group {g.group_id!r}")


def join(g: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str, client_host: str,
         protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
         topics: TopicsView, s: Settings, now: int) -> Result:
    """A classic member's JoinGroup to the consumer group `g`: the records, and the member after them (its epoch is
    the generation its answer carries)."""
    _check_protocols(g, member_id, protocol_type, protocols)
    sub = subscription(protocols)
    m = g.members.get(member_id) if member_id else None
    if m is not None and m.classic is None:
        raise UnknownMemberIdError(f"member {member_id} uses the consumer group protocol, not the classic one")
    epoch = m.epoch if m is not None else 0
    hb = Heartbeat(g.group_id, member_id or consumer_group.new_member_id(), epoch, instance_id, sub.rack_id,
                   rebalance_timeout_ms, list(sub.topics), None, None, _ids(sub.owned_partitions, topics), client_id,
                   client_host)
    return consumer_group.heartbeat(g, hb, topics, s, now=now, classic=Classic(
        session_timeout_ms, tuple((n, bytes(d)) for n, d in protocols)))


def sync(g: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int, protocol_type: str | None,
         protocol_name: str | None, topics: TopicsView) -> bytes:
    """A classic member's SyncGroup: the partitions it holds now, as its protocol's assignment bytes."""
    m = _classic_member(g, member_id, instance_id)
    if generation_id != m.epoch:
        raise IllegalGenerationError(f"member {m.member_id} synced generation {generation_id}; its epoch is {m.epoch}")
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or \
            (protocol_name is not None and protocol_name != protocol_of(m)):
        raise InconsistentGroupProtocolError(f"member {m.member_id} joined with {PROTOCOL_TYPE}/{protocol_of(m)}")
    if g.epoch > m.epoch and m.state != consumer_group.UNREVOKED_PARTITIONS:
        raise RebalanceInProgressError(f"a new rebalance began in group {g.group_id!r}: member {m.member_id} must "
                                       f"rejoin")
    return assignment_bytes(m.assigned, g.topic_names(topics))


def protocol_of(m: Member) -> str:
    """The protocol a classic member's answers name: the first it offered."""
    return m.classic.protocols[0][0]


def must_rejoin(g: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> bool:
    """A classic member's Heartbeat: whether it must rejoin (REBALANCE_IN_PROGRESS): the group epoch moved past its
    epoch, it must give up partitions, or partitions it waits for were released."""
    m = _classic_member(g, member_id, instance_id)
    if generation_id != m.epoch:
        raise IllegalGenerationError(f"member {m.member_id} heartbeat at generation {generation_id}; its epoch is "
                                     f"{m.epoch}")
    if m.epoch < g.epoch or m.state == consumer_group.UNREVOKED_PARTITIONS:
        return True
    if m.state == consumer_group.UNRELEASED_PARTITIONS:
        target = g.targets.get(m.member_id, {})
        return not any(g.partition_epoch(t, p) != -1 for t, ps in target.items()
                       for p in ps - m.assigned.get(t, frozenset()))
    return False


def leave(g: ConsumerGroup, member_id: str, instance_id: str | None, topics: TopicsView) -> tuple[str, list[Record]]:
    """A classic member's LeaveGroup: its member id and the records of its leaving."""
    m = _classic_member(g, member_id, instance_id)
    return m.member_id, consumer_group.fence(g, m.member_id, topics)


# --- downgrade ----------------------------------------------------------------------------------------------
def downgrade_due(g: ConsumerGroup, leaving: str) -> bool:
    """Whether `leaving`'s departure leaves only members of the classic protocol (at least one): the group then
    becomes a classic group (Kafka's validateOnlineDowngradeWithFencedMember)."""
    rest = [m for mid, m in g.members.items() if mid != leaving]
    return bool(rest) and g.members.get(leaving) is not None and g.members[leaving].classic is None and \
        all(m.classic is not None for m in rest)


def tombstones(g: ConsumerGroup) -> list[Record]:
    """Every record of the consumer group `g` made a tombstone."""
    return [r for mid in g.members for r in consumer_group.remove_records(g, mid)] + consumer_group.group_tombstones(g)


def downgrade(g: ConsumerGroup, leaving: str | None, now: int, topics: TopicsView, generation: int) -> GroupMetadata:
    """The classic group `g` becomes without `leaving` (Kafka's ClassicGroup.fromConsumerGroup): Stable at
    `generation` (the group epoch it converts), each member with its target assignment (a static member's, under
    the id it has now); the caller stores it and starts a rebalance when one is due."""
    classic = GroupMetadata(g.group_id, now, STABLE)
    classic.protocol_type, classic.generation = PROTOCOL_TYPE, generation
    names = g.topic_names(topics)
    for m in g.members.values():
        if m.member_id == leaving:
            continue
        member = MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                m.classic.session_timeout_ms, PROTOCOL_TYPE, list(m.classic.protocols), now)
        member.assignment = assignment_bytes(g.target_of(m.member_id, m.instance_id), names)
        classic.add(member)
    classic.protocol = classic.select_protocol()
    return classic

