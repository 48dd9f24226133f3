"""Consumer groups: the group coordinator's lifecycle on a manual clock, static membership, committed offsets in
`__consumer_offsets`, and consumers sharing a topic end to end."""
from __future__ import annotations

import os
import random
import struct
import threading
import time

import pytest

import engine
from engine.common.clock import ManualClock
from engine.common.errors import (
    KafkaError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from engine.common.structs import OffsetAndMetadata, topic_partitions
from engine.common.structs import TopicPartition as TP
from engine.groups import assignors as asg
from engine.groups import consumer_protocol as cp
from engine.groups import offsets
from engine.groups.group_coordinator import GroupCoordinator
from engine.groups.group_metadata import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, Pending
# (`coordinator` is a fixture)
from tests.group_helpers import FAST, Member, Recorder, coordinator, poll_until, produce, settle, sub


# --- the coordinator on a manual clock --------------------------------------------------------------------
def test_a_join_storm_makes_one_generation_with_every_member(coordinator):
    c, clock, _ = coordinator
    first = Member(c, "m0")
    settle([first], {"t": 6})
    assert c.groups["g"].state == STABLE and c.groups["g"].generation == 1 and first.assignment
    storm = [first] + [Member(c, f"m{i}") for i in range(1, 8)]
    pend = [m.join() for m in storm[1:]]  # the newcomers wait: the group is preparing a rebalance
    assert not any(p.done for p in pend) and c.groups["g"].state == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        c.heartbeat("g", first.member_id, 1)
    settle(storm, {"t": 6})
    g = c.groups["g"]
    assert g.state == STABLE and g.generation == 2 and g.leader == first.member_id  # the first joiner leads
    owned = [tp for m in storm for tp in m.assignment]
    assert sorted(owned) == [TP("t", p) for p in range(6)]
    assert all(m.member_id.startswith(m.name + "-") and len(m.member_id) == len(m.name) + 37 for m in storm)


def test_a_silent_member_is_evicted_after_its_session_timeout(coordinator):
    c, clock, _ = coordinator
    a, b = Member(c, "a", session=6000), Member(c, "b", session=6000)
    settle([a], {"t": 6})
    b.join()
    settle([a, b], {"t": 6})
    generation = c.groups["g"].generation
    clock.advance(5999)
    c.heartbeat("g", a.member_id, generation)
    c.tick()
    assert b.member_id in c.groups["g"].members  # exactly at its deadline minus one: still alive
    clock.advance(1)
    c.tick()
    g = c.groups["g"]
    assert b.member_id not in g.members and g.state == PREPARING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", b.member_id, generation)
    settle([a], {"t": 6})
    assert len(a.assignment) == 6 and c.groups["g"].generation == generation + 1


def test_the_leader_leaving_elects_another_and_a_rebalance_drops_members_that_do_not_rejoin(coordinator):
    c, clock, _ = coordinator
    a, b, d = (Member(c, n, session=30_000, rebalance=20_000) for n in "abd")
    settle([a], {"t": 6})
    b.join(), d.join()
    settle([a, b, d], {"t": 6})
    c.leave_group("g", a.member_id)
    g = c.groups["g"]
    assert g.leader == b.member_id and g.state == PREPARING_REBALANCE
    b.join()  # d never rejoins: the rebalance completes without it at the rebalance timeout
    clock.advance(19_999)
    c.tick()
    assert not b.pending.done
    clock.advance(1)
    c.tick()
    assert b.pending.done and d.member_id not in g.members and g.state == COMPLETING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        c.sync_group("g", g.generation, d.member_id, "consumer", "range")


def test_protocol_votes_and_errors(coordinator):
    c, clock, _ = coordinator
    meta = cp.encode_subscription(cp.Subscription(["t"]))
    j1 = c.join_group("g", "", "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    with pytest.raises(InconsistentGroupProtocolError):
        c.join_group("g", "", "x", "consumer", [("sticky", meta)], 10_000, 10_000)
    with pytest.raises(InconsistentGroupProtocolError):
        c.join_group("g", "", "x", "connect", [("range", meta)], 10_000, 10_000)
    with pytest.raises(InvalidSessionTimeoutError):
        c.join_group("g", "", "x", "consumer", [("range", meta)], 10, 10_000)
    assert j1.done
    j1b = c.join_group("g", j1.member_id, "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    j2 = c.join_group("g", "", "b", "consumer", [("range", meta), ("roundrobin", meta)], 10_000, 10_000)
    j3 = c.join_group("g", "", "c", "consumer", [("range", meta)], 10_000, 10_000)
    assert not j2.done
    c.join_group("g", j1.member_id, "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    assert j2.done and j3.done and j1b.done  # the replaced JoinGroup is answered too
    assert j2.result().protocol_name == "range"  # 2 votes to 1, and "range" is the only common one with c
    with pytest.raises(IllegalGenerationError):
        c.heartbeat("g", j2.member_id, 99)


# --- consumers, end to end ------------------------------------------------------------------------------
def test_cooperative_rebalance_revokes_only_what_moves(tmp_path):
    # consumer1 and consumer2 form the group together (an initial delay), so the seed's starting point follows
    with engine.open(tmp_path, group_config={**FAST, "group_initial_rebalance_delay_ms": 300}) as e:
        e.create_topic("T0", partitions=3)
        listeners = {n: Recorder() for n in ("consumer1", "consumer2", "consumer3")}
        cfg = dict(group_id="g", partition_assignment_strategy="cooperative-sticky", session_timeout_ms=3000,
                   heartbeat_interval_ms=100, auto_offset_reset="earliest")
        c1, c2 = (e.consumer(client_id=n, **cfg) for n in ("consumer1", "consumer2"))
        c1.subscribe(["T0"], listener=listeners["consumer1"])
        c2.subscribe(["T0"], listener=listeners["consumer2"])
        poll_until([c1, c2], lambda: c1.assignment() | c2.assignment() == {TP("T0", p) for p in range(3)}
                   and e.groups.describe_group("g").state == STABLE)
        assert c1.assignment() == {TP("T0", 0), TP("T0", 2)} and c2.assignment() == {TP("T0", 1)}
        produce(e, "T0", 30)
        seen2 = []
        c3 = e.consumer(client_id="consumer3", **cfg)
        c3.subscribe(["T0"], listener=listeners["consumer3"])
        before = len(listeners["consumer2"].events)
        end = time.monotonic() + 20
        while not c3.assignment():
            assert time.monotonic() < end
            for c in (c1, c2, c3):
                got = c.poll(50)
                if c is c2:
                    seen2 += [r.offset for rs in got.values() for r in rs]
            assert TP("T0", 1) in c2.assignment()  # consumer2 never stops owning (and reading) p1
        assert c3.assignment() == {TP("T0", 2)} and c1.assignment() == {TP("T0", 0)}
        assert ("revoked", {TP("T0", 2)}) in listeners["consumer1"].events  # the first round revokes only p2
        assert all(parts == set() for _, parts in listeners["consumer2"].events[before:])  # nothing moved for it
        assert seen2 == list(range(e.partition("T0", 1).high_watermark))  # p1's records, read during the rebalance
        for c in (c1, c2, c3):
            c.close()


def test_a_cooperative_member_revokes_a_dropped_topic_before_it_rejoins(tmp_path):
    """As Kafka's ConsumerCoordinator.onJoinPrepare: partitions of a topic no longer subscribed are revoked before the
    JoinGroup, so one round gives the member the rest (the assignor never sees them owned)."""
    with engine.open(tmp_path, group_config=FAST) as e:
        for t in ("A", "B"):
            e.create_topic(t, partitions=2)
        c = e.consumer(group_id="g", partition_assignment_strategy="cooperative-sticky", session_timeout_ms=3000,
                       heartbeat_interval_ms=100)
        c.subscribe(["A", "B"])
        poll_until([c], lambda: len(c.assignment()) == 4 and e.groups.describe_group("g").state == STABLE)
        generation, rec = c.group_metadata().generation_id, Recorder()
        c.subscribe(["A"], listener=rec)
        poll_until([c], lambda: c.group_metadata().generation_id > generation and not c.group._rejoin
                   and e.groups.describe_group("g").state == STABLE)
        assert c.assignment() == {TP("A", 0), TP("A", 1)}
        assert rec.events == [("revoked", {TP("B", 0), TP("B", 1)}), ("assigned", set())]
        assert c.group_metadata().generation_id == generation + 1
        c.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("during", ["after its JoinGroup", "before its SyncGroup"])
def test_a_heartbeat_while_the_member_is_between_rounds_neither_resets_it_nor_asks_for_another(tmp_path, during,
                                                                                                strategy):
    """The heartbeat thread may run while its member's JoinGroup is answered and before its SyncGroup is: the member
    still holds the old generation then. A heartbeat of it would be told the generation is stale (a reset: the
    member then stops heartbeating until it polls) or that the group rebalances (one more round). It sends nothing
    until the round completes, and the round makes one generation."""
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        for t in ("A", "B"):
            e.create_topic(t, partitions=2)
        c = e.consumer("A", group_id="g", partition_assignment_strategy=strategy, heartbeat_interval_ms=10_000,
                       session_timeout_ms=30_000, enable_auto_commit=False)
        poll_until([c], lambda: len(c.assignment()) == 2 and e.groups.describe_group("g").state == STABLE, poll_ms=0)
        generation, sent, joins = c.group_metadata().generation_id, [], []
        beat, join, sync = e.groups.heartbeat, e.groups.join_group, e.groups.sync_group
        e.groups.heartbeat = lambda *args: sent.append(args[2]) or beat(*args)

        def joining(*args, **kw):
            joins.append(args)
            answer = join(*args, **kw)
            if during == "after its JoinGroup" and len(joins) == 1:
                c.group.heartbeat()  # as the heartbeat thread would, with the join answered and not yet applied
            return answer

        def syncing(*args, **kw):
            if during == "before its SyncGroup" and len(joins) == 1:
                c.group.heartbeat()
            return sync(*args, **kw)

        e.groups.join_group, e.groups.sync_group = joining, syncing
        c.group.heartbeat()  # between rounds: sent
        c.subscribe(["A", "B"])
        poll_until([c], lambda: len(c.assignment()) == 4 and not c.group._rejoin, poll_ms=0)
        assert len(joins) == 1 and c.group_metadata().generation_id == generation + 1
        assert e.groups.describe_group("g").state == STABLE
        c.group.heartbeat()  # the round completed: sent, with the new generation
        assert sent == [generation, generation + 1]
        c.close()


def test_three_consumers_share_six_partitions_while_one_joins_and_one_leaves(tmp_path):
    total = 3000
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("events", partitions=6)
        produce(e, "events", total // 2)
        seen: list[bytes] = []
        lock = threading.Lock()
        stop = {}
        errors = []

        def run(name: str, gate: threading.Event | None = None):
            try:
                with e.consumer("events", group_id="billing", client_id=name, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=5000, heartbeat_interval_ms=100,
                                max_poll_records=50) as c:
                    while len(seen) < total and not stop.get(name):
                        got = c.poll(100)
                        with lock:
                            seen.extend(r.value for rs in got.values() for r in rs)
                        if got:
                            c.commit()
                        time.sleep(0.002)
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = {n: threading.Thread(target=run, args=(n,)) for n in ("c0", "c1", "c2")}
        for t in threads.values():
            t.start()
        while len(seen) < total // 4:
            time.sleep(0.01)
        threads["c3"] = threading.Thread(target=run, args=("c3",))
        threads["c3"].start()
        produce(e, "events", total // 2, start=total // 2)
        while len(seen) < (3 * total) // 4:
            time.sleep(0.01)
        stop["c1"] = True  # c1 leaves (close(): LeaveGroup)
        threads["c1"].join(30)
        for t in threads.values():
            t.join(60)
        assert not errors and not any(t.is_alive() for t in threads.values())
        assert sorted(seen) == sorted(b"%d" % i for i in range(total))  # every record exactly once
        committed = {p: e.committed("billing", TP("events", p)).offset for p in range(6)}
        assert committed == {p: e.partition("events", p).high_watermark for p in range(6)}
    with engine.open(tmp_path, group_config=FAST) as e:  # a restart resumes from the commits
        produce(e, "events", 60, start=total)
        later: list[bytes] = []
        with e.consumer("events", group_id="billing", auto_offset_reset="earliest", session_timeout_ms=5000,
                        heartbeat_interval_ms=100) as c:
            end = time.monotonic() + 20
            while len(later) < 60 and time.monotonic() < end:
                later += [r.value for rs in c.poll(100).values() for r in rs]
        assert sorted(later) == sorted(b"%d" % i for i in range(total, total + 60))


def test_static_membership_restart_fencing_and_no_leave_on_close(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=4)
        cfg = dict(group_id="g", session_timeout_ms=2000, heartbeat_interval_ms=100, auto_offset_reset="earliest")
        other_listener = Recorder()
        a = e.consumer(group_instance_id="host-a", client_id="a", **cfg)
        b = e.consumer(group_instance_id="host-b", client_id="b", **cfg)
        a.subscribe(["t"])
        b.subscribe(["t"], listener=other_listener)
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
                   and e.groups.describe_group("g").state == STABLE)
        generation, mine = e.groups.describe_group("g").generation, a.assignment()
        events = len(other_listener.events)
        a.close()  # a static member sends no LeaveGroup
        assert {m["group_instance_id"] for m in e.groups.describe_group("g").members} == {"host-a", "host-b"}
        a2 = e.consumer(group_instance_id="host-a", client_id="a", **cfg)
        a2.subscribe(["t"])
        poll_until([a2, b], lambda: a2.assignment() == mine)
        for _ in range(5):
            b.poll(20)
        assert e.groups.describe_group("g").generation == generation  # no rebalance
        assert len(other_listener.events) == events and b.assignment() and e.groups.describe_group("g").state == STABLE
        a3 = e.consumer(group_instance_id="host-a", client_id="a", **cfg)  # a second live "host-a"
        a3.subscribe(["t"])
        poll_until([a3], lambda: a3.assignment() == mine)
        with pytest.raises(FencedInstanceIdError):
            for _ in range(100):
                a2.poll(20)
                a2.commit()
        for c in (a3, b):
            c.close()


def test_a_consumer_that_stops_polling_leaves_after_max_poll_interval(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        slow = e.consumer("t", group_id="g", session_timeout_ms=60_000, heartbeat_interval_ms=1000,
                          max_poll_interval_ms=5000)
        slow.poll(0)
        assert slow.assignment() and e.groups.describe_group("g").state == STABLE
        member = slow.group_metadata().member_id
        clock.advance(4000)
        slow.group.heartbeat()
        assert member in {m["member_id"] for m in e.groups.describe_group("g").members}
        clock.advance(1001)  # the heartbeat thread notices: no poll() for max_poll_interval_ms
        end = time.monotonic() + 10
        while member in {m["member_id"] for m in e.groups.describe_group("g").members}:
            assert time.monotonic() < end
            time.sleep(0.01)
        assert e.groups.describe_group("g").state == EMPTY
        slow.poll(0)  # the next poll rejoins, as a new member
        assert slow.assignment() and slow.group_metadata().member_id != member
        slow.close()


def test_random_joins_leaves_and_crashes_never_share_a_partition(tmp_path):
    runs = int(os.environ.get("KAFKALOG_GROUP_MODEL_RUNS", "6"))
    for seed in range(runs):
        rng = random.Random(seed)
        clock = ManualClock()
        path = tmp_path / str(seed)
        with engine.open(path, clock=clock, background=False, group_config=FAST) as e:
            e.create_topic("t", partitions=rng.randint(1, 9))
            e.create_topic("u", partitions=rng.randint(1, 4))
            strategy = rng.choice(["range", "roundrobin", "sticky", "cooperative-sticky"])
            live, crashed = [], []
            everything = {TP(t, p) for t in ("t", "u") for p in range(e.partitions_for(t))}
            for step in range(12):
                action = rng.choice(["join", "join", "leave", "crash"]) if live else "join"
                if action == "join":
                    c = e.consumer(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=1000,
                                   partition_assignment_strategy=strategy, enable_auto_commit=False)
                    c.subscribe(["t", "u"])
                    live.append(c)
                elif action == "leave":
                    live.pop(rng.randrange(len(live))).close()
                else:
                    c = live.pop(rng.randrange(len(live)))
                    c.group._stop.set()  # a crash: no more heartbeats, polls or LeaveGroup
                    crashed.append(c)
                for _ in range(rng.randint(0, 3)):  # some partial progress
                    for c in live:
                        c.poll(0)
                    check_no_sharing(e, live)
                for _ in range(200):  # then settle
                    g = e.groups.groups.get("g")
                    stable = g is not None and g.state == STABLE and all(
                        c.group_metadata().generation_id == g.generation and not c.group._rejoin for c in live)
                    if (stable and len(g.members) == len(live)) or (not live and (g is None or g.state == EMPTY)):
                        break
                    for c in live:  # the heartbeat threads' work, in step with the manual clock
                        c.group.heartbeat()
                    clock.advance(500)
                    e.groups.tick()
                    for c in live:
                        c.poll(0)
                    check_no_sharing(e, live)
                else:
                    raise AssertionError(f"seed {seed} step {step}: the group did not settle: {g.state} "
                                         f"{g.generation} {len(g.members)} members, clients at "
                                         f"{[(c.group_metadata().generation_id, c.group._rejoin) for c in live]}")
                owned = [tp for c in live for tp in c.assignment()]
                assert len(owned) == len(set(owned)) and (set(owned) == everything or not live), (seed, step)
            for c in live + crashed:
                c.close()


def check_no_sharing(e, live) -> None:
    by_generation: dict[int, list] = {}
    for c in live:
        by_generation.setdefault(c.group_metadata().generation_id, []).extend(c.assignment())
    for generation, owned in by_generation.items():
        if generation >= 0:
            assert len(owned) == len(set(owned)), f"a partition owned twice in generation {generation}"
    g = e.groups.groups.get("g")
    if g is not None and g.state == STABLE:
        stored = [tp for m in g.members.values() if m.assignment
                  for tp in cp.decode_assignment(m.assignment).partitions]
        assert len(stored) == len(set(stored))


def test_custom_assignors_from_the_seed(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=7)
        cfg = dict(group_id="bc", session_timeout_ms=3000, heartbeat_interval_ms=100)
        cs = [e.consumer(partition_assignment_strategy=asg.BroadcastAssignor, **cfg) for _ in range(3)]
        for c in cs:
            c.subscribe(["t"])
        everything = {TP("t", p) for p in range(7)}
        poll_until(cs, lambda: all(c.assignment() == everything for c in cs))  # every member reads every partition
        for c in cs:
            c.close()
        cfg["group_id"] = "rnd"
        cs = [e.consumer(partition_assignment_strategy=[asg.RandomAssignor(random.Random(3))], **cfg)
              for _ in range(3)]
        for c in cs:
            c.subscribe(["t"])
        poll_until(cs, lambda: sorted(tp for c in cs for tp in c.assignment()) == sorted(everything)
                   and e.groups.describe_group("rnd").state == STABLE)
        for c in cs:
            c.close()


def test_a_cooperative_assignor_that_moves_an_owned_partition_at_once_is_refused(tmp_path):
    """Under the cooperative protocol a partition changes owner only after its owner revoked it: an assignor that
    hands it straight to another member fails the leader's rebalance with IllegalStateError naming it."""
    class Hasty(asg.ConsumerPartitionAssignor):
        name = "hasty"

        def supported_protocols(self):
            return [asg.COOPERATIVE]

        def assign(self, partitions_per_topic, subscriptions):  # everything to a member that owns nothing
            taker = min(subscriptions, key=lambda m: (bool(subscriptions[m].owned_partitions), m))
            return {m: topic_partitions("t", range(partitions_per_topic["t"])) if m == taker else []
                    for m in subscriptions}
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=40)
        cfg = dict(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=100,
                   partition_assignment_strategy=Hasty)
        first = e.consumer("t", **cfg)
        poll_until([first], lambda: len(first.assignment()) == 40)
        second = e.consumer("t", **cfg)
        with pytest.raises(IllegalStateError, match=r"gave TopicPartition\(topic='t', partition=0\) to .* while "
                                                    r".* still owns it"):
            for _ in range(100):
                for c in (first, second):
                    c.poll(0)


def test_the_cooperative_check_refuses_exactly_the_partitions_another_member_owns():
    """The leader's check of a cooperative assignment, against a model of Kafka's rule (no partition both added to
    a member and revoked from one): a member may keep any of what it owns (in any order) and take what nobody owns
    or what its owners keep; a partition taken from an owner who does not keep it is refused, named with its owner.
    Partition 4 is owned twice."""
    from engine.clients.consumer_coordinator import ConsumerCoordinator
    tps = topic_partitions("t", range(12))
    owned = {"a": tps[0:5], "b": tps[4:8], "c": []}
    subs = {m: sub("t", owned_partitions=list(o)) for m, o in owned.items()}
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        assignment = {m: [tp for tp in tps if rng.random() < 0.3] for m in subs}
        if rng.random() < 0.5:  # most rounds of a sticky assignor: owners keep a prefix of what they own
            assignment = {"a": tps[0:rng.randint(0, 5)], "b": tps[4:rng.randint(4, 8)], "c": tps[8:12]}
        rng.shuffle(assignment["a"])
        wrong = [(tp, m, o) for m, got in assignment.items() for tp in got if tp not in owned[m]
                 for o, mine in owned.items() if o != m and tp in mine and tp not in assignment[o]]
        outcomes.add(bool(wrong))
        if wrong:
            with pytest.raises(IllegalStateError, match="while . still owns it") as info:
                ConsumerCoordinator._check_cooperative("x", subs, assignment)
            assert any(f"gave {tp} to {m} while {o} still owns it" in str(info.value) for tp, m, o in wrong)
        else:
            ConsumerCoordinator._check_cooperative("x", subs, assignment)
    assert outcomes == {True, False}




def _committed_epoch_in_log(e, group: str, topic: str) -> list[tuple[int, int]]:
    """(offset, leaderEpoch) of each OffsetCommitValue for `topic`-0 in the group's `__consumer_offsets` partition,
    decoded with struct from Kafka's published schema (OffsetCommitValue v3: version int16, offset int64, leaderEpoch
    int32, metadata string, commitTimestamp int64)."""
    part = e.internal.internal_partition("__consumer_offsets", offsets.partition(group))
    out = []
    for batch in part.log.read(0, 1 << 30).batches():
        for r in batch.records():
            key_version, = struct.unpack_from(">h", r.key)
            if key_version > 1 or r.value is None:
                continue  # a group metadata record, or a tombstone
            version, offset, epoch = struct.unpack_from(">hqi", r.value)
            assert version == 3
            out.append((offset, epoch))
    return out


def test_a_commit_of_consumed_positions_stores_the_last_records_leader_epoch(tmp_path):
    """Kafka's consumer commits OffsetAndMetadata(position.offset, position.offsetEpoch), the epoch being the leader
    epoch of the last record it consumed (SubscriptionState.allConsumed, Fetcher's lastEpoch). Offsets given
    explicitly without an epoch, and positions set by a seek, stay -1."""
    with engine.open(tmp_path, brokers=2, background=False) as e:
        e.create_topic("t", replication_factor=2)
        p = e.producer()
        p.send("t", b"epoch 0", partition=0).get()
        e.replicate()
        failed = e.partition("t", 0).broker_id
        e.fail_broker(failed)  # the next leader writes in epoch 1
        p.send("t", b"epoch 1", partition=0).get()
        e.restart_broker(failed)  # back as a follower (the offsets topic wants both brokers)
        e.replicate()
        c = e.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
        got = []
        while polled := c.poll(timeout_ms=100):
            got += [r.value for rs in polled.values() for r in rs]
        assert got == [b"epoch 0", b"epoch 1"]
        c.commit()
        c.commit({TP("t", 0): OffsetAndMetadata(1)})
        c.seek(TP("t", 0), 0)
        c.commit()
        c.close()
        assert e.partition("t", 0).leader_epoch == 1
        assert _committed_epoch_in_log(e, "g", "t") == [(2, 1), (1, -1), (0, -1)]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_rebalance_needs_no_heartbeat_to_start(tmp_path, strategy):
    """The clock never moves and no heartbeat reaches the coordinator: the members hear of each rebalance from the
    coordinator itself. One member waits in poll() for records the whole time (woken to rejoin, twice); the others
    are polled with no wait."""
    clock = ManualClock()
    start = clock.time_ms()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=6)
        heartbeats = []
        beat = e.groups.heartbeat
        e.groups.heartbeat = lambda *args: heartbeats.append(args) or beat(*args)
        cfg = dict(group_id="g", partition_assignment_strategy=strategy, heartbeat_interval_ms=10_000,
                   session_timeout_ms=30_000, enable_auto_commit=False, auto_offset_reset="earliest")
        first, second = e.consumer("t", **cfg), e.consumer("t", **cfg)
        first.poll(0)
        got = []
        waiting = threading.Thread(target=lambda: got.append(first.poll(3_600_000)))
        waiting.start()  # holds generation 1; waits for records, and rejoins from inside the wait when woken
        third = None
        end = time.monotonic() + 30
        while True:
            group = e.groups.describe_group("g")
            members = [c for c in (first, second, third) if c is not None]
            if group.state == STABLE and len(group.members) == len(members) and \
                    sorted(len(c.assignment()) for c in members) == [6 // len(members)] * len(members):
                if third is not None:
                    break
                third = e.consumer("t", **cfg)  # a second rebalance, with `first` still waiting
            assert time.monotonic() < end, f"the group did not settle without heartbeats: {group}"
            for c in (second, third):
                if c is not None:
                    c.poll(0)
            time.sleep(0.001)
        assert set().union(*(c.assignment() for c in members)) == {TP("t", p) for p in range(6)}
        assert waiting.is_alive() and not heartbeats and clock.time_ms() == start
        produce(e, "t", 12)  # records end the wait
        waiting.join(30)
        assert got and got[0]
        for c in members:
            c.close()


def _coordinator_outcome(call):
    """A request's answer: a Pending, or the error raised (type and message)."""
    try:
        return call()
    except KafkaError as exc:
        return "raised", type(exc).__name__, str(exc)


def _answer_view(answer, ids: dict[str, int]):
    """An answer (a Pending's state, an error raised, None), member ids replaced by the order the test made them in."""
    def named(text: str) -> str:
        for member_id, j in ids.items():
            text = text.replace(member_id, f"<member {j}>")
        return text

    if not isinstance(answer, Pending):
        return answer and (*answer[:2], named(answer[2]))
    value = answer.value
    if hasattr(value, "generation_id"):  # a JoinResult
        value = (ids.get(value.member_id), value.generation_id, ids.get(value.leader_id), len(value.members))
    return answer.done, value, answer.error and named(str(answer.error))


def _group_view(coordinator, ids: dict[str, int]) -> tuple:
    """What a group's deadlines decide, member ids replaced by the order the test made them in."""
    g = coordinator.groups.get("g")
    if g is None:
        return ()
    members = sorted((ids[m.member_id], m.awaiting_join is not None, m.awaiting_sync is not None, m.is_new,
                      m.last_heartbeat, m.session_timeout_ms, m.assignment) for m in g.members.values())
    return (g.state, g.generation, ids.get(g.leader), g.join_deadline, g.sync_deadline,
            sorted(map(ids.get, g.pending_sync)), members)


@pytest.mark.parametrize("seed", range(int(os.environ.get("KAFKALOG_GROUP_MODEL_RUNS", "6")) * 4))
def test_deadlines_apply_as_a_coordinator_that_looks_at_every_group_on_every_request(tmp_path, seed):
    """The coordinator skips its scan of members and groups until the earliest deadline; the model is the same
    coordinator made to scan on every request. Members join, rejoin with other session timeouts, sync, heartbeat,
    leave and go silent while time moves on: every answer, held or not, and the group's state stay the same."""
    rng = random.Random(seed)
    clock = ManualClock()
    cfg = {"group_min_session_timeout_ms": 50, "group_initial_rebalance_delay_ms": rng.choice([0, 300])}
    with engine.open(tmp_path / "a", clock=clock, background=False, group_config=cfg) as a, \
            engine.open(tmp_path / "b", clock=clock, background=False, group_config=cfg) as b:
        model = b.groups  # the model: it forgets the earliest deadline before every tick
        model.tick = lambda: (model._wake(), GroupCoordinator.tick(model))[1]
        coordinators = (a.groups, b.groups)
        members: list[list[str]] = [[], []]  # each coordinator's member ids, in the order they were made
        answers: list[list] = [[], []]  # every answer each coordinator gave, held ones included
        for step in range(150):
            clock.advance(rng.choice([0, 1, 5, 20, 60, 90, 150, 400, 2_000]))
            action = rng.choice(["join", "rejoin", "rejoin", "sync", "heartbeat", "heartbeat", "leave", "tick"])
            who = rng.randrange(max(1, len(members[0])))
            session = rng.choice([60, 100, 500, 3_000])
            views = []
            for i, co in enumerate(coordinators):
                known = members[i][who] if who < len(members[i]) else ""
                ids = {m: j for j, m in enumerate(members[i])}
                joined = [v for p in answers[i] if isinstance(p, Pending) and p.done
                          and getattr(v := p.value, "member_id", None) == known]
                gen = joined[-1].generation_id if joined else -1  # what its last join answer said
                if action == "join" or (action == "rejoin" and not known):
                    got = _coordinator_outcome(lambda: co.join_group("g", "", "c", "consumer", [("range", b"")],
                                                                     session, 1_000))
                    if isinstance(got, Pending):
                        members[i].append(got.member_id)
                elif action == "rejoin":
                    got = _coordinator_outcome(lambda: co.join_group("g", known, "c", "consumer", [("range", b"")],
                                                                     session, 1_000))
                elif action == "sync" and known:
                    given = {m: b"x%d" % j for j, m in enumerate(members[i])}
                    got = _coordinator_outcome(lambda: co.sync_group("g", gen, known, "consumer", "range", given))
                elif action == "heartbeat" and known:
                    got = _coordinator_outcome(lambda: co.heartbeat("g", known, gen))
                elif action == "leave" and known:
                    got = _coordinator_outcome(lambda: co.leave_group("g", known))
                else:
                    got = co.tick() and None
                answers[i].append(got)
                ids = {m: j for j, m in enumerate(members[i])}
                views.append(([_answer_view(p, ids) for p in answers[i]], _group_view(co, ids)))
            assert views[0] == views[1], (seed, step, action)
            soon, truth = (co.next_deadline() for co in coordinators)  # a deadline may be told early, never late
            assert (soon is None) == (truth is None) and (soon is None or soon <= truth), (seed, step, soon, truth)


def test_a_member_rejoining_with_other_protocols_changes_what_the_group_accepts(tmp_path):
    """The group's candidate protocols are kept between joins: a rejoin that drops one must drop it for the next
    member too, and a rejoin that only changes its metadata (each assignment does) changes nothing."""
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        co = e.groups
        first = co.join_group("g", "", "c", "consumer", [("range", b"a"), ("roundrobin", b"a")], 3000, 1000)
        second = co.join_group("g", "", "c", "consumer", [("range", b"b"), ("roundrobin", b"b")], 3000, 1000)
        assert co.groups["g"].state == PREPARING_REBALANCE  # the initial delay: both may rejoin meanwhile
        co.join_group("g", first.member_id, "c", "consumer", [("range", b"a2"), ("roundrobin", b"a2")], 3000, 1000)
        assert co.groups["g"].candidate_protocols() == {"range", "roundrobin"}
        co.join_group("g", second.member_id, "c", "consumer", [("roundrobin", b"b2")], 3000, 1000)
        assert co.groups["g"].candidate_protocols() == {"roundrobin"}
        with pytest.raises(InconsistentGroupProtocolError):
            co.join_group("g", "", "c", "consumer", [("range", b"c")], 3000, 1000)
        co.join_group("g", "", "c", "consumer", [("roundrobin", b"c")], 3000, 1000)
