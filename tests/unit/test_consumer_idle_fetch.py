"""A consumer that found nothing new skips its next look until something moved (engine.common.changes): checked
against the same consumer looking every time, over random runs of everything that moves what a fetch can find
(appends, replication raising the high watermark, transactions and their markers moving the LSO, failover and
truncation, the log start, seek, pause and resume, a topic deleted and created again)."""
from __future__ import annotations

import contextlib
import random

import pytest

import engine
from engine import TopicPartition
from engine.common.changes import LOGS, BumpingDict
from engine.common.errors import KafkaError

TOPICS = {"rf3": 3, "rf1": 1, "tx": 1}  # name: replication factor; 2 partitions each. rf1 is deleted and created
# again, tx takes the transactions, and broker 0 (every RF=1 partition's) never fails: a producer's retries would wait
# on the manual clock


class Looking:
    """Counts the polls of `consumer` that looked at its partitions (the rest took the idle note)."""

    def __init__(self, consumer, every_time: bool) -> None:
        self.consumer, self.every_time, self.looked = consumer, every_time, 0
        inner = consumer._readable

        def readable(order, partitions):
            self.looked += 1
            return inner(order, partitions)
        consumer._readable = readable

    def poll(self) -> list:
        if self.every_time:
            self.consumer._idle = None
        got = self.consumer.poll(max_records=10_000)  # (every record: the partitions' rotation differs)
        return sorted((tp.topic, tp.partition, r.offset, r.value) for tp, rs in got.items() for r in rs)


def _pair(e, isolation: str):
    tps = [TopicPartition(t, p) for t in TOPICS for p in range(2)]
    out = []
    for every_time in (False, True):
        c = e.consumer(auto_offset_reset="earliest", isolation_level=isolation)
        c.assign(tps)
        out.append(Looking(c, every_time))
    return out, tps


def _create(e) -> None:
    for name, rf in TOPICS.items():
        e.create_topic(name, partitions=2, replication_factor=rf, config={"min.insync.replicas": 1})


def _step(e, rng: random.Random, op: str, pairs, tps, txn, dead: list) -> None:
    tp = rng.choice(tps)
    if op == "append":
        e.append(tp.topic, tp.partition, engine.encode_batch([(None, b"v%d" % rng.randrange(1000), None, 1)] * 3),
                 acks=1)
    elif op == "replicate":
        e.replicate()
    elif op in ("txn send", "commit", "abort") and dead:
        return  # (the transaction log's min.insync.replicas would hold a transaction until the broker is back)
    elif op == "txn send":
        txn.send("tx", b"t%d" % rng.randrange(1000), partition=tp.partition)
        txn.flush()
    elif op in ("commit", "abort"):
        (txn.commit_transaction if op == "commit" else txn.abort_transaction)()
        txn.begin_transaction()
    elif op == "seek":
        offset = rng.randrange(e.partition(tp.topic, tp.partition).log_end_offset + 1)
        for looking in pairs:
            looking.consumer.seek(tp, offset)
    elif op in ("pause", "resume"):
        for looking in pairs:
            getattr(looking.consumer, op)(tp)
    elif op == "fail":
        if not dead:
            dead.append(rng.choice([1, 2]))  # the leader of some rf3 partitions, a follower of the others
            e.fail_broker(dead[0])
        else:
            e.restart_broker(dead.pop())
    elif op == "delete records":
        part = e.partition(tp.topic, tp.partition)
        part.delete_records(rng.randrange(part.log_start_offset, part.high_watermark + 1))
    elif op == "recreate":
        e.delete_topic("rf1")
        e.create_topic("rf1", partitions=2, config={"min.insync.replicas": 1})


OPS = ["append"] * 6 + ["replicate"] * 3 + ["txn send", "commit", "abort", "seek", "pause", "resume", "fail",
                                               "delete records", "recreate"] + ["poll"] * 10


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_consumer_that_skips_idle_looks_returns_what_one_looking_every_time_returns(tmp_path, seed, isolation):
    rng = random.Random(seed)
    with engine.open(str(tmp_path / "d"), brokers=3, background=False) as e:
        _create(e)
        (noting, reference), tps = _pair(e, isolation)
        txn = e.producer(transactional_id="tx", max_block_ms=2000)
        txn.init_transactions()
        txn.begin_transaction()
        dead: list = []
        idle_polls = 0
        for _ in range(400):
            op = rng.choice(OPS)
            if op != "poll":
                # an operation may fail (no leader for now, an append below min.insync.replicas): both consumers
                # see the same state either way
                with contextlib.suppress(KafkaError):
                    _step(e, rng, op, (noting, reference), tps, txn, dead)
                continue
            before = noting.looked
            for _ in range(2):  # the second poll of two in a row is the one an idle note can skip
                try:
                    got = noting.poll()
                except KafkaError as exc:
                    with pytest.raises(type(exc)):
                        reference.poll()
                    continue
                assert got == reference.poll()
            idle_polls += 2 - (noting.looked - before)
        assert idle_polls > 0  # the note was used: this run checked it, not only the looking path
        txn.close()


def test_an_idle_poll_looks_at_no_partition_until_a_bound_moves(tmp_path):
    with engine.open(str(tmp_path / "d"), background=False, clock=engine.ManualClock()) as e:
        e.create_topic("t", partitions=20)
        c = e.consumer(auto_offset_reset="earliest")
        c.assign([TopicPartition("t", p) for p in range(20)])
        looking = Looking(c, every_time=False)
        assert looking.poll() == []
        assert looking.poll() == [] and looking.poll() == []
        assert looking.looked == 1  # two polls answered by the note
        e.append("t", 7, engine.encode_batch([(None, b"x", None, 1)]))
        assert looking.poll() == [("t", 7, 0, b"x")] and looking.looked == 2
        before = LOGS.value
        assert looking.poll() == [] and looking.looked == 3  # the fetch above moved a position: it looks once more
        assert looking.poll() == [] and looking.looked == 3
        assert LOGS.value == before


def test_a_groups_commits_and_rebalances_leave_an_idle_consumer_idle(tmp_path):
    """No consumer reads an internal topic: the HW a group's commits and rebalances move in `__consumer_offsets`
    leaves the count alone, and an idle consumer of another topic does not look again."""
    with engine.open(str(tmp_path / "d"), background=False, clock=engine.ManualClock()) as e:
        e.create_topic("t", partitions=4)
        e.create_topic("u", partitions=2)

        def offsets_hw() -> int:
            return sum(slot.load().high_watermark for (topic, _), slot in e._brokers[0].logs.slots().items()
                       if topic == "__consumer_offsets")
        members = [e.consumer("u", group_id="g", enable_auto_commit=False)]
        while not members[0].assignment():  # (the group's first use makes the internal topic: its leaders count)
            members[0].poll(0)
        c = e.consumer(auto_offset_reset="earliest")
        c.assign([TopicPartition("t", p) for p in range(4)])
        looking = Looking(c, every_time=False)
        assert looking.poll() == [] and looking.poll() == [] and looking.looked == 1
        hw_before, before = offsets_hw(), LOGS.value
        members[0].commit({TopicPartition("u", 0): 1})
        members.append(e.consumer("u", group_id="g", enable_auto_commit=False))
        while not all(m.assignment() for m in members):  # a rebalance: the group's metadata record again
            for m in members:
                m.poll(0)
        assert offsets_hw() >= hw_before + 2  # (the commit and the rebalance each moved the HW)
        assert LOGS.value == before
        assert looking.poll() == [] and looking.looked == 1
        e.append("u", 1, engine.encode_batch([(None, b"x", None, 1)]))  # a readable topic's HW still counts
        assert LOGS.value > before
        for m in members:
            m.close()


def _idle_pair(e, tp: TopicPartition, isolation: str = "read_uncommitted"):
    """Two consumers of `tp` at its end that both found nothing: one notes it, the other looks every time."""
    pair = []
    for every_time in (False, True):
        c = e.consumer(auto_offset_reset="earliest", isolation_level=isolation)
        c.assign([tp])
        looking = Looking(c, every_time)
        looking.poll()  # (every record: Looking.poll takes up to 10,000)
        assert looking.consumer.position(tp) == e.partition(tp.topic, tp.partition).fetch_upper_bound(isolation)
        assert looking.poll() == []
        pair.append(looking)
    return pair


def test_a_truncation_under_an_idle_consumer_is_seen(tmp_path):
    """The leader's log cut below an idle consumer's position: the next poll resets it, the one after reads."""
    with engine.open(str(tmp_path / "d"), background=False, clock=engine.ManualClock()) as e:
        e.create_topic("t")
        tp = TopicPartition("t", 0)
        for i in range(10):
            e.append("t", 0, engine.encode_batch([(None, b"%d" % i, None, 1)]))
        noting, reference = _idle_pair(e, tp)
        e.partition("t", 0).log.truncate_to(5)
        for looking in (noting, reference):  # past the log end: reset to the earliest, then read from it
            assert looking.poll() == [] and looking.consumer.position(tp) == 0
            assert looking.poll() == [("t", 0, i, b"%d" % i) for i in range(5)]


def test_the_log_start_passing_an_idle_read_committed_position_is_seen(tmp_path):
    """An open transaction holds the LSO; deleting records up to the HW lifts the LSO to the new log start, and an
    idle read_committed consumer's next poll moves there."""
    with engine.open(str(tmp_path / "d"), background=False, clock=engine.ManualClock()) as e:
        e.create_topic("t")
        tp = TopicPartition("t", 0)
        txn = e.producer(transactional_id="tx")
        txn.init_transactions()
        txn.begin_transaction()
        txn.send("t", b"open", partition=0)
        txn.flush()
        for i in range(4):
            e.append("t", 0, engine.encode_batch([(None, b"%d" % i, None, 1)]))
        noting, reference = _idle_pair(e, tp, "read_committed")
        assert noting.consumer.position(tp) == 0
        e.partition("t", 0).delete_records(-1)
        for looking in (noting, reference):
            assert looking.poll() == [] and looking.consumer.position(tp) == 5
        txn.close()


@pytest.mark.parametrize("change", [
    lambda d: d.__setitem__("b", 2), lambda d: d.__delitem__("a"), lambda d: d.pop("a"), lambda d: d.popitem(),
    lambda d: d.setdefault("b", 2), lambda d: d.update(b=2), lambda d: d.__ior__({"b": 2}), lambda d: d.clear()])
def test_every_change_to_an_engines_leaders_map_bumps_the_count(tmp_path, change):
    """Which partition leads a topic-partition is a bound a consumer read: any change to the engine's map of them
    moves LOGS, whatever else does."""
    with engine.open(str(tmp_path / "d"), background=False) as e:
        assert isinstance(e._partitions, BumpingDict)
    leaders = BumpingDict(a=1)
    before = LOGS.value
    change(leaders)
    assert LOGS.value > before
