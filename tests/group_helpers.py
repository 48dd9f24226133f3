"""Helpers of the consumer-group tests: short names for assignments and subscriptions, and independent readers of
Kafka's group schemas (`__consumer_offsets` records, the consumer protocol's subscription and assignment bytes)."""
from __future__ import annotations

import struct
import time

import pytest

import engine
from engine.clients.consumer_coordinator import ConsumerRebalanceListener
from engine.common.clock import ManualClock
from engine.groups import assignors as asg
from engine.groups import consumer_protocol as cp
from engine.groups import offsets


FAST = {"group_min_session_timeout_ms": 50}


def names(assignment: dict) -> dict[str, set[str]]:
    return {m: {f"{tp.topic}p{tp.partition}" for tp in tps} for m, tps in assignment.items()}


def sub(*topics, **kw) -> cp.Subscription:
    return cp.Subscription(list(topics), **kw)


class _Bytes:
    """An independent reader of Kafka's non-flexible message schemas, for the tests."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = bytes(data), 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return v

    def string(self):
        n = self.take("h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def blob(self):
        n = self.take("i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def array(self, item):
        return [item() for _ in range(self.take("i"))]


def _decode_topic_partitions(r: _Bytes) -> list[tuple[str, list[int]]]:
    return r.array(lambda: (r.string(), r.array(lambda: r.take("i"))))


def independent_group_value(data: bytes) -> dict:
    """GroupMetadataValue v3 (group-coordinator/src/main/resources/common/message/GroupMetadataValue.json)."""
    r = _Bytes(data)
    out = {"version": r.take("h"), "protocolType": r.string(), "generation": r.take("i"), "protocol": r.string(),
           "leader": r.string(), "currentStateTimestamp": r.take("q")}
    out["members"] = r.array(lambda: {"memberId": r.string(), "groupInstanceId": r.string(), "clientId": r.string(),
                                      "clientHost": r.string(), "rebalanceTimeout": r.take("i"),
                                      "sessionTimeout": r.take("i"), "subscription": r.blob(),
                                      "assignment": r.blob()})
    assert r.pos == len(r.data)
    return out


def independent_subscription(data: bytes) -> dict:
    r = _Bytes(data)
    out = {"version": r.take("h"), "topics": r.array(r.string), "userData": r.blob(),
           "ownedPartitions": _decode_topic_partitions(r), "generationId": r.take("i"), "rackId": r.string()}
    assert r.pos == len(r.data)
    return out


def independent_assignment(data: bytes) -> dict:
    r = _Bytes(data)
    out = {"version": r.take("h"), "assignedPartitions": _decode_topic_partitions(r), "userData": r.blob()}
    assert r.pos == len(r.data)
    return out


def independent_offset_record(key: bytes, value: bytes | None):
    r = _Bytes(key)
    version = r.take("h")
    if version == 2:
        return ("group", r.string(), None if value is None else independent_group_value(value))
    assert version == 1
    k = (r.string(), r.string(), r.take("i"))
    if value is None:
        return ("offset", k, None)
    v = _Bytes(value)
    val = {"version": v.take("h"), "offset": v.take("q"), "leaderEpoch": v.take("i"), "metadata": v.string(),
           "commitTimestamp": v.take("q")}
    assert v.pos == len(v.data)
    return ("offset", k, val)


def offsets_records(eng, group_id: str) -> list:
    part = eng.internal.internal_partition(offsets.TOPIC, offsets.partition(group_id))
    lg = part.log
    out = []
    for _, batch in lg.batches(lg.log_start_offset, lg.log_end_offset):
        if not batch.is_control:
            out += [independent_offset_record(bytes(r.key), None if r.value is None else bytes(r.value))
                    for r in batch.records()]
    return out



class Member:
    """A test double of a consumer talking to the coordinator directly (no threads)."""

    def __init__(self, coordinator, name: str, topics=("t",), instance: str | None = None, session: int = 10_000,
                 rebalance: int = 30_000, strategy: str = "range") -> None:
        self.c, self.name, self.topics, self.instance = coordinator, name, list(topics), instance
        self.session, self.rebalance, self.strategy = session, rebalance, strategy
        self.member_id, self.generation, self.assignment = "", -1, []
        self.pending = None

    def join(self):
        meta = cp.encode_subscription(cp.Subscription(self.topics))
        self.pending = self.c.join_group("g", self.member_id, self.name, "consumer", [(self.strategy, meta)],
                                         self.session, self.rebalance, self.instance)
        self.member_id = self.pending.member_id
        return self.pending

    def sync(self, partitions: dict[str, int]):
        result = self.pending.result()
        self.generation = result.generation_id
        given = None
        if result.members and not result.skip_assignment:
            subs = {m: cp.decode_subscription(meta)._replace(group_instance_id=i) for m, i, meta in result.members}
            plan = asg.resolve(result.protocol_name)[0].assign(partitions, subs)
            given = {m: cp.encode_assignment(cp.Assignment(tps)) for m, tps in plan.items()}
        return self.c.sync_group("g", self.generation, self.member_id, "consumer", result.protocol_name, given,
                                 self.instance)


def settle(members: list[Member], partitions: dict[str, int]) -> None:
    """Every member joins; once all joins complete, all sync (the leader last, as a slow leader would)."""
    pendings = [m.join() for m in members]
    assert all(p.done for p in pendings)
    syncs = [m.sync(partitions) for m in sorted(members, key=lambda m: m.pending.value.leader_id == m.member_id)]
    for m, s in zip(sorted(members, key=lambda m: m.pending.value.leader_id == m.member_id), syncs):
        m.assignment = cp.decode_assignment(s.result()).partitions if s.result() else []


@pytest.fixture
def coordinator(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=6)
        yield e.groups, clock, e


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set]] = []

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", set(lost)))


def produce(e, topic: str, n: int, start: int = 0) -> None:
    with e.producer() as p:
        for i in range(start, start + n):
            p.send(topic, key=b"%d" % i, value=b"%d" % i)


def poll_until(consumers, done, timeout_s: float = 20.0, poll_ms: int = 50):
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, "the group did not settle"
        for c in consumers:
            c.poll(poll_ms)
