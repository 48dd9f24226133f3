"""Share groups (KIP-932) in process: a share-partition's delivery state against an independent model of KIP-932's
rules, its persisted form, and the share group coordinator over an engine on an injected clock (acquisition,
acknowledgement, lock timeouts, sessions, restart)."""
from __future__ import annotations

import contextlib
import random

import pytest

import engine
from engine.common.clock import ManualClock
from engine.common.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalStateError,
    NonEmptyGroupError,
    InvalidConfigurationError,
    InvalidShareSessionEpochError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from engine.groups import share_state_records as records
from engine.groups.share_group import ShareHeartbeat, simple_assignment
from engine.groups.share_state_records import updated as _updated
from engine.groups.share_partition import ACCEPT, GAP, REJECT, RELEASE, RENEW, SharePartition, StateBatch

LIMIT = 3  # delivery count limit of the model runs


class Model:
    """KIP-932's rules, written per offset and independently of SharePartition: each offset of the log is new,
    available, acquired (by whom, until when), acknowledged or archived, with its delivery count."""

    def __init__(self, start: int, max_in_flight: int) -> None:
        self.start, self.max_in_flight = start, max_in_flight
        self.state: dict[int, list] = {}  # offset -> [state, count, owner, deadline]

    def spso(self) -> int:
        o = self.start
        while o in self.state and self.state[o][0] in ("acked", "archived"):
            o += 1
        return o

    def acquire(self, member: str, log: list[tuple[int, int]], max_records: int, now: int, lock: int,
                strict: bool = False) -> list[int]:
        """Batch by batch of the log (KIP-932's default acquire mode): no batch is begun once `max_records` were
        acquired, nor a batch with new offsets once `max_in_flight` offsets are in flight; a batch begun is taken
        whole (its available offsets). `strict` (KIP-1206's record_limit mode): not one offset past `max_records`,
        whole batch or not."""
        got = []
        for base, last in log:
            if last < self.spso():
                continue
            if len(got) >= max_records:
                break
            full = any(o not in self.state for o in range(base, last + 1)) and \
                max(self.state, default=self.spso() - 1) + 1 - self.spso() >= self.max_in_flight
            for o in range(max(base, self.spso()), last + 1):
                if strict and len(got) >= max_records:
                    break
                if o not in self.state:
                    if full:  # (only what is in flight already)
                        continue
                    self.state[o] = ["available", 0, None, 0]
                s = self.state[o]
                if s[0] == "available":
                    s[:] = ["acquired", s[1] + 1, member, now + lock]
                    got.append(o)
            if full:
                break
        return got

    def release(self, o: int) -> None:
        s = self.state[o]
        s[:] = ["archived" if s[1] >= LIMIT else "available", s[1], None, 0]

    def ack(self, member: str, first: int, last: int, kind: int, renewed: int = 0) -> bool:
        if any(self.state.get(o, [None, 0, None])[0] != "acquired" or self.state[o][2] != member
               for o in range(first, last + 1)):
            return False
        for o in range(first, last + 1):
            if kind == RENEW:  # (KIP-1222: the lock starts again, nothing else changes)
                self.state[o][3] = renewed
            elif kind == RELEASE:
                self.release(o)
            else:
                self.state[o][:] = ["acked" if kind == ACCEPT else "archived", self.state[o][1], None, 0]
        return True

    def expire(self, now: int) -> None:
        for o, s in self.state.items():
            if s[0] == "acquired" and s[3] <= now:
                self.release(o)


def test_a_share_partition_follows_kip_932s_rules_in_a_random_history():
    """Batches of one to five records, several members, random acquisitions (of whole batches up to a random number
    of records, or of exactly that number: Kafka 4.2's record_limit mode), acknowledgements of every type (RENEW
    among them), lock timeouts and members that vanish: the share-partition agrees with the model at every step on
    who holds what, the delivery counts, the start offset, and what a member may acknowledge; no offset is ever held
    by two members."""
    rng = random.Random(932)
    for trial in range(30):
        max_in_flight = rng.choice([5, 20, 1000])
        sp, model = SharePartition(0, LIMIT, max_in_flight), Model(0, max_in_flight)
        log, now, members = [], 0, ["a", "b", "c"]  # the log's batches: (base offset, last offset)
        for _ in range(300):
            step = rng.random()
            log_end = log[-1][1] + 1 if log else 0
            if step < 0.2:
                log.append((log_end, log_end + rng.randint(0, 4)))
            elif step < 0.5:
                m, n, strict = rng.choice(members), rng.randint(1, 6), rng.random() < 0.5
                batches = [(b, last, True) for b, last in log if last >= sp.fetch_offset()]
                got = sp.acquire(m, batches, n, now, 100, strict)
                want = model.acquire(m, log, n, now, 100, strict)
                assert [o for a in got for o in range(a.first_offset, a.last_offset + 1)] == want, trial
                assert all(a.delivery_count == model.state[a.first_offset][1] for a in got)
            elif step < 0.85:
                m = rng.choice(members)
                held = [o for o, s in model.state.items() if s[0] == "acquired" and (s[2] == m or rng.random() < .2)]
                if not held:
                    continue
                first = rng.choice(held)
                last = first + rng.randint(0, 2)
                kind = rng.choice([GAP, ACCEPT, RELEASE, REJECT, RENEW])
                ok = model.ack(m, first, last, kind, now + 100)
                assert (sp.acknowledge(m, [(first, last, [kind])], now + 100) is None) == ok, (trial, first, last)
            elif step < 0.95:
                now += rng.randint(10, 120)
                sp.release(now=now)
                model.expire(now)
            else:
                m = rng.choice(members)
                sp.release(m)
                for o, s in model.state.items():
                    if s[0] == "acquired" and s[2] == m:
                        model.release(o)
            assert sp.start == model.spso()
            names = {"available": 0, "acquired": 1, "acked": 2, "archived": 4}
            want = [(o, names[s[0]], s[1], s[2]) for o, s in sorted(model.state.items()) if o >= sp.start]
            assert sp.states() == want, trial


def test_a_record_is_archived_at_the_delivery_count_limit_and_batches_are_acquired_whole():
    sp = SharePartition(10, 2, 100)
    got = sp.acquire("m", [(10, 14, True), (17, 19, True)], 3, 0, 50)  # (a batch begun is taken whole)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(10, 14, 1)]
    assert sp.fetch_offset() == 15
    got = sp.acquire("m", [(17, 19, True)], 100, 0, 50)
    assert [(a.first_offset, a.last_offset) for a in got] == [(17, 19)]
    assert [s[1] for s in sp.states() if s[0] in (15, 16)] == [4, 4]  # no record between the batches: archived
    assert sp.acknowledge("m", [(10, 14, [RELEASE])]) is None
    assert sp.acquire("x", [(10, 14, True)], 100, 0, 50)[0].delivery_count == 2
    assert sp.acknowledge("m", [(10, 10, [ACCEPT])]) is not None  # ("x" holds it now)
    assert sp.acknowledge("x", [(10, 14, [RELEASE, RELEASE, ACCEPT, REJECT, GAP])]) is None
    assert sp.start == 17  # the two released at the limit were archived, not made available
    assert sp.acknowledge("m", [(17, 19, [1, 5, 1])]) is not None  # (5 is no acknowledge type)


def test_a_control_batch_and_an_aborted_batch_are_archived_not_delivered():
    sp = SharePartition(0, 5, 100)
    got = sp.acquire("m", [(0, 2, True), (3, 3, False), (4, 6, False), (7, 7, True)], 100, 0, 50)
    assert [(a.first_offset, a.last_offset) for a in got] == [(0, 2), (7, 7)]
    assert [s[1] for s in sp.states()] == [1, 1, 1, 4, 4, 4, 4, 1]


def test_the_persisted_state_restores_what_was_delivered_and_what_was_not():
    sp = SharePartition(0, 5, 100)
    sp.acquire("m", [(0, 9, True)], 100, 0, 50)
    assert sp.acknowledge("m", [(0, 2, [ACCEPT])]) is None
    assert sp.acknowledge("m", [(5, 5, [REJECT])]) is None
    assert sp.acknowledge("m", [(6, 6, [RELEASE])]) is None
    batches = sp.state_batches()
    assert batches == [StateBatch(3, 4, 0, 1), StateBatch(5, 5, 4, 1), StateBatch(6, 9, 0, 1)]
    back = SharePartition.restore(sp.start, batches, 5, 100)
    assert back.start == 3 and back.fetch_offset() == 3
    assert [(o, s, c) for o, s, c, _ in back.states()] == [(3, 0, 1), (4, 0, 1), (5, 4, 1), (6, 0, 1), (7, 0, 1),
                                                          (8, 0, 1), (9, 0, 1)]
    state = records.ShareState(records.SNAPSHOT, "g", "AAAAAAAAAAAAAAAAAAAAAQ", 7, 3, 0, back.start,
                               tuple(batches))
    assert records.decode(*records.encode(state)) == state
    tomb = records.ShareState(records.SNAPSHOT, "g", "AAAAAAAAAAAAAAAAAAAAAQ", 7, tombstone=True)
    assert records.decode(*records.encode(tomb)) == tomb
    update = records.ShareState(records.UPDATE, "g", "AAAAAAAAAAAAAAAAAAAAAQ", 7, 4, 0, 4,
                                (StateBatch(4, 6, 2, 2),))
    assert records.decode(*records.encode(update)) == update
    assert _updated(state, update).batches == (StateBatch(4, 6, 2, 2), StateBatch(7, 9, 0, 1))
    with pytest.raises(Exception, match="does not parse"):
        records.decode(b"\x00\x07garbage", b"")


def test_the_simple_assignor_spreads_partitions_and_shares_them_only_when_members_outnumber_them():
    """Random groups (topics of 1 to 4 partitions, 1 to 9 members with random subscriptions), checked against the
    assignor's contract: every partition of a subscribed topic has a member subscribed to it; a member subscribed to
    something has a partition; a partition has several members only when some member would otherwise have none;
    with one subscription for all, partitions are spread within one of each other; a member joining moves at most
    what its share needs."""
    rng = random.Random(41)
    for _ in range(300):
        # (the initialized partitions of each topic: the assignor is given only those)
        topics = {f"t{i}": (f"id{i}", tuple(sorted(rng.sample(range(5), rng.randint(1, 4)))))
                  for i in range(rng.randint(1, 3))}
        homogeneous = rng.random() < 0.5
        subs = {f"m{j}": tuple(sorted(topics)) if homogeneous else
                tuple(sorted(rng.sample(sorted(topics), rng.randint(1, len(topics)))))
                for j in range(rng.randint(1, 9))}
        got = simple_assignment(subs, topics, {})
        held: dict[tuple[str, int], list[str]] = {}
        for mid, parts in got.items():
            assert parts, mid
            for tid, ps in parts.items():
                name = next(n for n, (t, _) in topics.items() if t == tid)
                assert name in subs[mid] and ps <= set(topics[name][1])
                for p in ps:
                    held.setdefault((tid, p), []).append(mid)
        everything = {(tid, p) for name, (tid, ps) in topics.items() if any(name in t for t in subs.values())
                      for p in ps}
        assert set(held) == everything
        for key, mids in held.items():
            if len(mids) > 1:  # shared only with members that hold nothing else
                assert all(sum(map(len, got[m].values())) == 1 for m in mids[1:]), (key, mids)
        if homogeneous:
            sizes = [sum(map(len, parts.values())) for parts in got.values()]
            assert max(sizes) - min(sizes) <= 1
            total = sum(len(ps) for _, ps in topics.values())
            if len(subs) < total:
                grown = simple_assignment({**subs, "new": subs["m0"]}, topics, got)
                moved = sum(len(ps - grown[m].get(t, frozenset())) for m in got for t, ps in got[m].items())
                assert moved <= -(-total // (len(subs) + 1)), (total, len(subs), moved)


def _engine(tmp_path, clock):
    e = engine.open(tmp_path / "d", clock=clock)
    e.create_topic("t", partitions=2)
    return e


def _produce(e, n: int, partition: int = 0) -> None:
    with e.producer(linger_ms=0) as p:
        for i in range(n):
            p.send("t", f"v{i}".encode(), partition=partition).get()


def _offsets(got) -> list[int]:
    return [o for f in got.values() for a in f.acquired for o in range(a.first_offset, a.last_offset + 1)]


def test_the_coordinator_delivers_each_record_to_one_member_until_it_is_acknowledged(tmp_path):
    clock = ManualClock()
    with _engine(tmp_path, clock) as e:
        _produce(e, 10)
        sg = e.share_groups
        e.alter_group_configs("g", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "1000"})
        a = sg.heartbeat(ShareHeartbeat("g", "m1", 0, topic_names=["t"]))
        assert a.assignment == {}  # (this heartbeat initializes the share-partitions; the next assigns them)
        a = sg.heartbeat(ShareHeartbeat("g", "m1", a.member_epoch))
        tid = next(iter(a.assignment))
        assert a.assignment == {tid: frozenset({0, 1})} and a.member_epoch > 0
        b = sg.heartbeat(ShareHeartbeat("g", "m2", 0, topic_names=["t"]))
        assert b.assignment == {tid: frozenset({1})}  # (the simple assignor: one partition each now)
        assert sg.heartbeat(ShareHeartbeat("g", "m1", a.member_epoch)).assignment == {tid: frozenset({0})}
        # a share-partition is not owned: a member may fetch one it is not assigned (as Kafka's brokers allow)
        keys = sg.session("g", "m1", 0, [(tid, 0), (tid, 1)], [])
        first = _offsets(sg.acquire("g", "m1", keys, 4, 1 << 20))
        sg.session("g", "m2", 0, [(tid, 0)], [])
        second = _offsets(sg.acquire("g", "m2", [(tid, 0)], 100, 1 << 20))
        assert first == [0, 1, 2, 3] and second == [4, 5, 6, 7, 8, 9]  # (one record per batch here)
        assert sg.acknowledge("g", "m2", {(tid, 0): [(0, 0, [ACCEPT])]})[(tid, 0)] is not None
        assert sg.acknowledge("g", "m1", {(tid, 0): [(0, 1, [ACCEPT]), (2, 3, [RELEASE])]}) == {(tid, 0): None}
        assert _offsets(sg.acquire("g", "m2", [(tid, 0)], 100, 1 << 20)) == [2, 3]
        clock.advance(1000)  # m2's locks on 2..9 time out
        sg.heartbeat(ShareHeartbeat("g", "m1", a.member_epoch))
        assert _offsets(sg.acquire("g", "m1", keys, 100, 1 << 20)) == list(range(2, 10))
        assert [c for _, _, c, _ in sg.partitions[("g", tid, 0)].states()] == [3, 3, 2, 2, 2, 2, 2, 2]
        assert sg.start_offsets("g")[(tid, 0)] == 2
    with engine.open(tmp_path / "d", clock=clock) as e:  # a restart: what was acknowledged stays acknowledged
        sg = e.share_groups
        assert sg.start_offsets("g") == {(tid, 0): 2, (tid, 1): 0}
        a = sg.heartbeat(ShareHeartbeat("g", "m3", 0, topic_names=["t"]))
        sg.session("g", "m3", 0, [(tid, 0)], [])
        got = sg.acquire("g", "m3", [(tid, 0)], 100, 1 << 20)
        assert _offsets(got) == list(range(2, 10))
        # m1's last acquisition was not persisted (as in Kafka): the counts are those last written, plus this one
        assert [(a.first_offset, a.delivery_count) for a in got[(tid, 0)].acquired] == [(2, 3), (4, 2)]


def test_latest_starts_at_the_log_end_and_sessions_keep_their_epochs(tmp_path):
    clock = ManualClock()
    with _engine(tmp_path, clock) as e:
        _produce(e, 3)
        sg = e.share_groups
        a = sg.heartbeat(ShareHeartbeat("g", "m1", 0, topic_names=["t"]))
        a = sg.heartbeat(ShareHeartbeat("g", "m1", a.member_epoch))
        tid = next(iter(a.assignment))
        with pytest.raises(ShareSessionNotFoundError):
            sg.session("g", "m1", 1, [], [])
        with pytest.raises(UnknownMemberIdError):
            sg.session("g", "nobody", 0, [(tid, 0)], [])
        sg.session("g", "m1", 0, [(tid, 0)], [])
        assert sg.acquire("g", "m1", [(tid, 0)], 100, 1 << 20) == {}  # latest: the three before are not delivered
        _produce(e, 2)
        with pytest.raises(InvalidShareSessionEpochError):
            sg.session("g", "m1", 2, [], [])
        assert sg.session("g", "m1", 1, [], []) == [(tid, 0)]
        assert _offsets(sg.acquire("g", "m1", [(tid, 0)], 100, 1 << 20)) == [3, 4]
        with pytest.raises(InvalidShareSessionEpochError):
            sg.session("g", "m1", 1, [], [], acknowledging_only=True)
        with pytest.raises(InvalidShareSessionEpochError):
            sg.session("g", "m1", 0, [], [], acknowledging_only=True)
        sg.session("g", "m1", -1, [], [])
        sg.close_session("g", "m1")  # (epoch -1: what m1 held is released)
        assert [s for _, s, _, _ in sg.partitions[("g", tid, 0)].states()] == [0, 0]
        with pytest.raises(FencedMemberEpochError):
            sg.heartbeat(ShareHeartbeat("g", "m1", a.member_epoch + 5))
        clock.advance(45_000)  # the member's session times out
        assert sg.tick() == 1 and sg.describe("g").state == "Empty"


def test_group_configs_and_group_ids_are_checked_as_kafka_checks_them(tmp_path):
    clock = ManualClock()
    with _engine(tmp_path, clock) as e:
        with pytest.raises(InvalidConfigurationError):
            e.alter_group_configs("g", {"share.auto.offset.reset": "middle"})
        with pytest.raises(InvalidConfigurationError):
            e.alter_group_configs("g", {"share.record.lock.duration.ms": "0"})
        with pytest.raises(InvalidConfigurationError):
            e.alter_group_configs("g", {"no.such.config": "1"})
        for bad in ("by_duration:", "by_duration:-PT1H", "by_duration:1h", "by_duration"):
            with pytest.raises(InvalidConfigurationError, match="by_duration:<PnDTnHnMn.nS>"):
                e.alter_group_configs("g", {"share.auto.offset.reset": bad})
        with pytest.raises(UnsupportedVersionError, match="not supported yet"):
            e.alter_group_configs("g", {"consumer.session.timeout.ms": "50000"})
        assert e.group_configs("g") == {}
        e.alter_group_configs("g", {"share.isolation.level": "read_committed"})
        e.alter_group_configs("g", {"share.isolation.level": None, "share.heartbeat.interval.ms": "700"})
        assert e.group_configs("g") == {"share.heartbeat.interval.ms": "700"}
        assert e.share_groups.heartbeat(ShareHeartbeat("g", "m", 0, topic_names=["t"])).heartbeat_interval_ms == 700
        with e.consumer("t", group_id="classic") as c:
            c.poll(0)
        with pytest.raises(GroupIdNotFoundError):
            e.share_groups.heartbeat(ShareHeartbeat("classic", "m", 0, topic_names=["t"]))
    with engine.open(tmp_path / "d", clock=clock) as e:
        assert e.group_configs("g") == {"share.heartbeat.interval.ms": "700"}


def _keyed(e, topic: str, n: int, start: int = 0) -> None:
    with e.producer(linger_ms=5) as p:
        for i in range(start, start + n):
            p.send(topic, b"v", key=b"%d" % i)


def test_in_process_share_consumers_split_a_queue_with_both_acknowledgement_modes(tmp_path):
    """Two in-process members, one explicit (releasing some records once, rejecting others), one implicit: every
    record is accepted once or rejected, a released record comes back with its delivery count raised, and the
    share-partitions end past every record once both close."""
    from engine.clients.share_consumer import AcknowledgeType

    with engine.open(tmp_path / "d") as e:
        e.create_topic("jobs", partitions=3)
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
        _keyed(e, "jobs", 300)
        explicit = e.share_consumer("w", ["jobs"], acknowledgement_mode="explicit", max_poll_records=40)
        implicit = e.share_consumer("w", ["jobs"], max_poll_records=40)
        seen: dict[int, list[int]] = {}
        done: set[int] = set()
        for _ in range(200):
            if len(done) == 300:
                break
            for r in explicit.poll(20):
                n = int(r.key)
                seen.setdefault(n, []).append(r.delivery_count)
                kind = AcknowledgeType.REJECT if n % 11 == 0 else \
                    AcknowledgeType.RELEASE if n % 5 == 0 and r.delivery_count == 1 else AcknowledgeType.ACCEPT
                explicit.acknowledge(r, kind)
                if kind != AcknowledgeType.RELEASE:
                    assert n not in done
                    done.add(n)
            for r in implicit.poll(20):
                n = int(r.key)
                seen.setdefault(n, []).append(r.delivery_count)
                assert n not in done
                done.add(n)
        with pytest.raises(IllegalStateError, match="not a record of the last poll"):
            explicit.acknowledge(_fake("jobs"), AcknowledgeType.ACCEPT)
        explicit.close()
        implicit.close()
        assert done == set(range(300))
        assert {n: c for n, c in seen.items() if len(c) > 1} and all(c == [1, 2] for c in seen.values() if len(c) > 1)
        assert all(c == [1] for n, c in seen.items() if n % 11 == 0)
        assert sorted(e.share_groups.start_offsets("w").values()) == \
            sorted(e.partition("jobs", p).high_watermark for p in range(3))


def _fake(topic: str):
    from engine.clients.share_consumer import ShareRecord
    return ShareRecord(topic, 0, 10**9, 0, None, None, [], 1)


def test_a_share_consumer_refuses_what_is_not_a_list_of_topic_names(tmp_path):
    with engine.open(tmp_path / "d") as e:
        for bad in ("jobs", [""], [3]):
            with pytest.raises(InvalidConfigurationError, match="a list of topic names"):
                e.share_consumer("w", bad)
        with e.share_consumer("w") as member:  # (no topic yet: fine, until it polls)
            with pytest.raises(IllegalStateError, match="before subscribe"):
                member.poll(0)
            with pytest.raises(UnsupportedVersionError, match="not supported yet"):
                member.subscribe([])
        with pytest.raises(InvalidConfigurationError, match="implicit or explicit"):
            e.share_consumer("w", ["jobs"], acknowledgement_mode="auto")


@contextlib.contextmanager
def _queue_and_explicit_member(tmp_path, clock, records: int):
    """An engine on `clock` with `records` keyed records in topic jobs, read by share group w from the earliest with
    5 s locks, and one explicit member of it."""
    with engine.open(tmp_path / "d", clock=clock) as e:
        e.create_topic("jobs", partitions=1)
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"})
        _keyed(e, "jobs", records)
        yield e, e.share_consumer("w", ["jobs"], acknowledgement_mode="explicit")


def test_an_explicit_member_must_acknowledge_before_it_polls_again_and_a_lock_times_out(tmp_path):
    clock = ManualClock()
    with _queue_and_explicit_member(tmp_path, clock, 10) as (e, slow):
        first = slow.poll(0)
        assert [int(r.key) for r in first] == list(range(10))
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            slow.poll(0)
        other = e.share_consumer("w", ["jobs"])
        assert other.poll(0) == []  # all ten are locked by the slow member
        clock.advance(5000)  # its lock times out
        again = other.poll(0)
        assert [(int(r.key), r.delivery_count) for r in again] == [(i, 2) for i in range(10)]
        slow.acknowledge(first[0])  # too late: the slow member no longer holds it
        assert list(slow.commit_sync().values())[0] is not None
        other.close()
        slow.close()


def test_the_asyncio_share_consumer_waits_for_records_and_acknowledges_them(tmp_path):
    import asyncio

    from engine.aio import AIOShareConsumer

    async def main(e) -> list[int]:
        async with AIOShareConsumer("jobs", engine=e, group_id="w", acknowledgement_mode="explicit") as c:
            empty = await c.getmany(timeout_ms=10)
            assert empty == []
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, _keyed, e, "jobs", 5)
            got = []
            while len(got) < 5:
                batch = await c.getmany(timeout_ms=5000)
                for r in batch:
                    c.acknowledge(r)
                got += [int(r.key) for r in batch]
            assert list((await c.commit()).values()) == [None]
            return got

    with engine.open(tmp_path / "d") as e:
        e.create_topic("jobs", partitions=1)
        assert asyncio.run(main(e)) == list(range(5))
        assert list(e.share_groups.start_offsets("w").values()) == [5]


def test_kafkalog_share_groups_lists_describes_resets_and_deletes(tmp_path):
    """The command's numbers are the coordinator's: the lag counts what is neither acknowledged nor archived; a reset
    starts a share-partition afresh (what was acknowledged below is delivered again); --delete-offsets forgets a
    topic's state (the group starts it again from share.auto.offset.reset); a non-empty group is refused."""
    import json

    from tests.unit.test_cli import run

    d = tmp_path / "d"
    with engine.open(d) as e:
        e.create_topic("jobs", partitions=2)
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
        with e.producer(linger_ms=0) as p:
            for i in range(20):
                p.send("jobs", b"x", partition=i % 2).get()
        c = e.share_consumer("w", ["jobs"], acknowledgement_mode="explicit", max_poll_records=4)
        got = c.poll(0)
        for r in got:
            c.acknowledge(r)
        c.close()
        tid = e.admin.topic_id_of("jobs")
        first = {(r.partition, r.offset) for r in got}
    assert run("share-groups", "--data", d, "--list").stdout.split() == ["w"]
    described = json.loads(run("share-groups", "--data", d, "--describe", "--group", "w", "--json").stdout)
    lag = {r["partition"]: (r["startOffset"], r["lag"]) for r in described["partitions"]}
    acked = {p: len([o for q, o in first if q == p]) for p in (0, 1)}
    assert lag == {p: (acked[p], 10 - acked[p]) for p in (0, 1)}
    plan = json.loads(run("share-groups", "--data", d, "--reset-offsets", "--group", "w", "--topic", "jobs",
                          "--to-earliest", "--json").stdout)
    assert not plan["executed"] and [r["newStartOffset"] for r in plan["partitions"]] == [0, 0]
    run("share-groups", "--data", d, "--reset-offsets", "--group", "w", "--topic", "jobs:1", "--to-offset", "7",
        "--execute")
    with engine.open(d) as e:
        assert e.share_groups.start_offsets("w") == {(tid, 0): acked[0], (tid, 1): 7}
        member = e.share_consumer("w", ["jobs"])
        assert sorted((r.partition, r.offset) for r in member.poll(0)) == \
            [(0, o) for o in range(acked[0], 10)] + [(1, 7), (1, 8), (1, 9)]
        with pytest.raises(NonEmptyGroupError, match="must be empty"):
            e.share_groups.delete_group("w")
        member.close()
    forgotten = json.loads(run("share-groups", "--data", d, "--delete-offsets", "--group", "w", "--topic", "jobs",
                               "--topic", "nope", "--json").stdout)
    assert [(r["topic"], r["error"] is None) for r in forgotten["topics"]] == [("jobs", True), ("nope", False)]
    with engine.open(d) as e:
        assert e.share_groups.start_offsets("w") == {}
        e.alter_group_configs("w", {"share.auto.offset.reset": "latest"})
        with e.share_consumer("w", ["jobs"]) as member:  # started afresh, from the log end now
            assert member.poll(0) == []
            assert e.share_groups.start_offsets("w") == {(tid, 0): 10, (tid, 1): 10}
    run("share-groups", "--data", d, "--delete", "--group", "w")
    assert json.loads(run("share-groups", "--data", d, "--list", "--json").stdout) == []
    with engine.open(d) as e:
        assert e.share_groups.start_offsets("w") == {}


def test_a_deleted_topic_fails_its_acknowledgements_and_its_share_state_goes(tmp_path):
    clock = ManualClock()
    with _engine(tmp_path, clock) as e:
        e.create_topic("u", partitions=1)
        _produce(e, 3)
        e.alter_group_configs("g", {"share.auto.offset.reset": "earliest"})
        sg = e.share_groups
        a = sg.heartbeat(ShareHeartbeat("g", "m", 0, topic_names=["t", "u"]))
        a = sg.heartbeat(ShareHeartbeat("g", "m", a.member_epoch))
        tid = e.admin.topic_id_of("t")
        sg.session("g", "m", 0, [(tid, 0)], [])
        assert _offsets(sg.acquire("g", "m", [(tid, 0)], 100, 1 << 20)) == [0, 1, 2]
        e.delete_topic("t")
        out = sg.acknowledge("g", "m", {(tid, 0): [(0, 2, [ACCEPT])]})
        assert type(out[(tid, 0)]).__name__ == "UnknownTopicIdError"
        assert (tid, 0) not in sg.start_offsets("g") and (tid, 1) not in sg.start_offsets("g")
    with engine.open(tmp_path / "d", clock=clock) as e:  # (tombstones: not back after a restart)
        assert [k for k in e.share_groups.start_offsets("g") if k[0] == tid] == []


def test_a_request_that_forgets_a_partition_still_acknowledges_what_it_read_of_it(tmp_path):
    """A member whose assignment moved forgets the partition in the same request that acknowledges its records: the
    acknowledgements are applied first, then what it still holds there is released (not the other way round, which
    would refuse the acknowledgements and deliver the records again)."""
    clock = ManualClock()
    with _engine(tmp_path, clock) as e:
        _produce(e, 4)
        e.alter_group_configs("g", {"share.auto.offset.reset": "earliest"})
        sg = e.share_groups
        a = sg.heartbeat(ShareHeartbeat("g", "m", 0, topic_names=["t"]))
        sg.heartbeat(ShareHeartbeat("g", "m", a.member_epoch))
        tid = e.admin.topic_id_of("t")
        sg.session("g", "m", 0, [(tid, 0)], [])
        assert _offsets(sg.acquire("g", "m", [(tid, 0)], 100, 1 << 20)) == [0, 1, 2, 3]
        assert sg.session("g", "m", 1, [], [(tid, 0)]) == []
        assert sg.acknowledge("g", "m", {(tid, 0): [(0, 1, [ACCEPT])]}) == {(tid, 0): None}
        sg.release_partitions("g", "m", [(tid, 0)])
        assert [(o, s, c) for o, s, c, _ in sg.partitions[("g", tid, 0)].states()] == [(2, 0, 1), (3, 0, 1)]


def test_a_share_partitions_acknowledgement_batches_apply_all_together_or_not_at_all():
    sp = SharePartition(0, 5, 100)
    sp.acquire("m", [(0, 9, True)], 100, 0, 50)
    before = sp.states()
    assert sp.acknowledge("m", [(0, 3, [ACCEPT]), (20, 21, [ACCEPT])]) is not None  # the second is not in flight
    assert sp.acknowledge("m", [(0, 3, [ACCEPT]), (3, 4, [RELEASE])]) is not None  # overlapping
    assert sp.acknowledge("m", [(5, 6, [ACCEPT]), (0, 3, [ACCEPT])]) is not None  # out of order
    assert sp.states() == before and sp.start == 0
    assert sp.acknowledge("m", [(0, 3, [ACCEPT]), (4, 4, [RELEASE]), (5, 9, [REJECT])]) is None
    assert sp.start == 4 and [s for _, s, _, _ in sp.states()] == [0, 4, 4, 4, 4, 4]


def test_an_in_process_member_removed_by_its_session_timeout_joins_again_and_goes_on(tmp_path):
    """Its heartbeats stop (as a paused process's would), its session times out, its records go to no one in the
    meantime but come back: its next poll finds its share session gone, joins again, and reads them again."""
    clock = ManualClock()
    with engine.open(tmp_path / "d", clock=clock) as e:
        e.create_topic("jobs", partitions=1)
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
        _keyed(e, "jobs", 5)
        member = e.share_consumer("w", ["jobs"], acknowledgement_mode="explicit")
        first = member.poll(0)
        assert [r.delivery_count for r in first] == [1] * 5
        e.heartbeats.remove(member)  # (no heartbeat from now on)
        clock.advance(45_000)
        assert e.share_groups.tick() == 1  # removed: its share session closed, its records released
        for r in first:
            member.acknowledge(r)
        outcome = member.commit_sync()  # too late: not applied, and said so
        assert [type(x).__name__ for x in outcome.values()] == ["ShareSessionNotFoundError"]
        again = member.poll(0)
        assert [(r.offset, r.delivery_count) for r in again] == [(o, 2) for o in range(5)]
        member.close()


def test_read_committed_share_groups_never_deliver_an_aborted_transaction_or_a_marker(tmp_path):
    """Records of an aborted transaction are archived, not delivered, under share.isolation.level=read_committed
    (delivered under read_uncommitted); a committed transaction's are delivered once its marker is written; control
    batches never are; and nothing past the last stable offset is acquired while a transaction is open."""
    with engine.open(tmp_path / "d") as e:
        e.create_topic("tx", partitions=1)
        for group, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
            e.alter_group_configs(group, {"share.auto.offset.reset": "earliest", "share.isolation.level": level})
        with e.producer(linger_ms=0) as plain:
            plain.send("tx", b"plain-1").get()
        txn = e.producer(transactional_id="t1")
        txn.init_transactions()
        for n in (1, 2):  # (two aborted transactions of one producer in one fetch: both skipped)
            txn.begin_transaction()
            txn.send("tx", b"aborted-%d" % n)
            txn.flush()
            txn.abort_transaction()
            txn.begin_transaction()
            txn.send("tx", b"kept-%d" % n)
            txn.flush()
            txn.commit_transaction()
        txn.begin_transaction()
        txn.send("tx", b"committed-1")
        txn.flush()
        rc = e.share_consumer("rc", ["tx"])
        assert [r.value for r in rc.poll(0)] == [b"plain-1", b"kept-1", b"kept-2"]  # (the open one waits)
        txn.commit_transaction()
        txn.close()
        assert [r.value for r in rc.poll(0)] == [b"committed-1"]
        ru = e.share_consumer("ru", ["tx"])
        assert sorted(r.value for r in ru.poll(0)) == [b"aborted-1", b"aborted-2", b"committed-1", b"kept-1",
                                                        b"kept-2", b"plain-1"]
        rc.poll(0)
        ru.poll(0)
        tid = e.admin.topic_id_of("tx")
        end = e.partition("tx", 0).high_watermark
        assert e.share_groups.start_offsets("rc") == e.share_groups.start_offsets("ru") == {(tid, 0): end}
        rc.close()
        ru.close()


def test_record_limit_acquires_at_most_max_poll_records_within_a_batch_and_batch_optimized_whole_batches(tmp_path):
    """Kafka 4.2's two acquire modes on one batch of ten records: record_limit (KIP-1206) polls 3, 3, 3, 1 of it,
    each once; batch_optimized takes the batch whole whatever max_poll_records says."""
    with engine.open(tmp_path / "d") as e:
        e.create_topic("jobs", partitions=1)
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
        with e.producer(linger_ms=60_000) as p:  # (one batch: sent at close)
            for i in range(10):
                p.send("jobs", b"v", key=b"%d" % i)
        with e.share_consumer("w", ["jobs"], share_acquire_mode="record_limit", max_poll_records=3) as strict:
            polls = [[r.offset for r in strict.poll(0)] for _ in range(5)]
        assert polls == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], []]
        e.share_groups.reset_offsets("w", {(e.admin.topic_id_of("jobs"), 0): 0})
        with e.share_consumer("w", ["jobs"], max_poll_records=3) as whole:
            assert [r.offset for r in whole.poll(0)] == list(range(10))
        with pytest.raises(InvalidConfigurationError, match="batch_optimized or record_limit"):
            e.share_consumer("w", ["jobs"], share_acquire_mode="strict")


def test_renew_keeps_a_record_acquired_past_its_first_lock_until_it_is_acknowledged(tmp_path):
    """KIP-1222's RENEW on an injected clock: a record renewed at 4 s of a 5 s lock is still held at 6 s (another
    member gets nothing), its holder's ACCEPT at 8 s applies, and it is never delivered again; one renewed and then
    left alone comes to the other member when the renewed lock ends, with its delivery count raised. A renewed
    record still needs an acknowledgement before the next poll."""
    from engine.clients.share_consumer import AcknowledgeType

    clock = ManualClock()
    with _queue_and_explicit_member(tmp_path, clock, 2) as (e, slow):
        first, second = slow.poll(0)
        clock.advance(4000)
        slow.acknowledge(first, AcknowledgeType.RENEW)
        slow.acknowledge(second, AcknowledgeType.RENEW)
        assert list(slow.commit_sync().values()) == [None]
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            slow.poll(0)
        other = e.share_consumer("w", ["jobs"])
        clock.advance(2000)  # 6 s: past the first lock, within the renewed one
        assert other.poll(0) == []
        clock.advance(2000)  # 8 s
        slow.acknowledge(first, AcknowledgeType.ACCEPT)
        assert list(slow.commit_sync().values()) == [None]
        clock.advance(1000)  # 9 s: the renewed lock of the one left alone ends
        assert [(r.offset, r.delivery_count) for r in other.poll(0)] == [(second.offset, 2)]
        other.close()
        slow.close()


def test_an_explicit_member_acknowledges_a_compacted_batch_whose_gaps_lie_between_its_records(tmp_path):
    """A compacted batch keeps its offsets' range (Kafka's v2 cleaner keeps the base offset): offsets with no record
    left are acquired too, and the member marks them as gaps; its own acknowledgements of records before and after
    them are sent with them in ascending order, and all are applied."""
    from engine.clients.share_consumer import AcknowledgeType

    with engine.open(tmp_path / "d") as e:
        e.create_topic("jobs", partitions=1, config={"cleanup.policy": "compact"})
        with e.producer(linger_ms=60_000) as p:  # (one batch)
            for key in (b"a", b"b", b"c", b"c", b"c", b"c"):
                p.send("jobs", b"v", key=key)
        e.log("jobs", 0).roll()
        e.compact("jobs")
        e.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
        with e.share_consumer("w", ["jobs"], acknowledgement_mode="explicit") as member:
            got = member.poll(0)
            assert [r.offset for r in got] == [0, 1, 5]
            for r in got:
                member.acknowledge(r, AcknowledgeType.ACCEPT)
            assert list(member.commit_sync().values()) == [None]
        assert list(e.share_groups.start_offsets("w").values()) == [6]
