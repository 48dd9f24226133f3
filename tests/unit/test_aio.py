"""engine.aio used the way an aiokafka user writes code, on asyncio's loop and on uvloop's: send and its futures,
getmany/getone/async for woken by the append they wait for (no test sleeps for a record: each wait is bounded by a
timeout far above what a wake-up takes, and a missed wake-up fails it), cancellation at each await, groups with
async rebalance callbacks, transactions and read_committed, and an exactly-once consume-transform-produce loop
cancelled at random points. Expected values come from what was sent and from the synchronous clients' reads."""
from __future__ import annotations

import asyncio
import random
import threading

import pytest

import engine
from engine import OffsetAndMetadata, TopicPartition
from engine.aio import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from engine.clients import accumulator
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)

LONG_MS = 60_000  # a wait that a missed wake-up would exhaust: the test then fails on WAKE_S below
WAKE_S = 30


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    """Run a coroutine to its end on a fresh loop of one kind (and check it is that kind)."""
    if request.param == "uvloop":
        import uvloop

        def on_uvloop(coro):
            async def checked():
                assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
                return await coro
            return uvloop.run(checked())
        return on_uvloop
    return asyncio.run


@pytest.fixture
def eng(tmp_path):
    e = engine.open(str(tmp_path / "data"))
    e.create_topic("events", partitions=3)
    yield e
    e.close()


def sync_read(e, topic="events", isolation="read_uncommitted"):
    """(partition, offset, key, value) of every record, read by the synchronous consumer."""
    with e.consumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=0, isolation_level=isolation) as c:
        return sorted((r.partition, r.offset, r.key, r.value) for r in c)


async def _await(awaitable):
    return await awaitable


async def within(awaitable):
    return await asyncio.wait_for(awaitable, WAKE_S)


# --- producer ---------------------------------------------------------------------------------------
def test_send_futures_metadata_and_what_the_sync_consumer_reads(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng) as p:
            fut = await p.send("events", b"hello", key=b"car-42", headers=[("src", b"can")], timestamp_ms=1234)
            md = await within(fut)
            assert (md.topic, md.offset, md.timestamp) == ("events", 0, 1234)
            assert md.partition == (accumulator.selected.murmur2(b"car-42") & 0x7FFFFFFF) % 3
            assert (md.serialized_key_size, md.serialized_value_size, md.serialized_header_size) == (6, 5, 6)
            futures = [await p.send("events", b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(300)]
            got = await within(asyncio.gather(*futures))
            md2 = await within(p.send_and_wait("events", b"last", partition=1))
            return md, got, md2
    md, got, md2 = run(main())
    read = sync_read(eng)
    assert len(read) == 302
    by_offset = {(p, o): (k, v) for p, o, k, v in read}
    for i, m in enumerate(got):
        assert by_offset[(m.partition, m.offset)] == (b"k%d" % (i % 5), b"v%d" % i)
        assert m.partition == (accumulator.selected.murmur2(b"k%d" % (i % 5)) & 0x7FFFFFFF) % 3
    assert by_offset[(1, md2.offset)] == (None, b"last")


def test_future_protocol_callbacks_cancel_and_wait_for(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng, linger_ms=LONG_MS) as p:
            fut = await p.send("events", b"a", partition=0)
            assert asyncio.isfuture(fut) and not fut.done()
            seen = []
            fut.add_done_callback(lambda f: seen.append(f.result().offset))
            other = await p.send("events", b"b", partition=0)
            assert other.cancel() and other.cancelled()  # only the waiting stops: the record is still sent
            with pytest.raises(asyncio.CancelledError):
                other.result()
            with pytest.raises(asyncio.TimeoutError):  # held by linger_ms: not appended yet
                await asyncio.wait_for(asyncio.shield(fut), 0.01)
            await within(p.flush())
            await asyncio.sleep(0)  # (callbacks run on the loop's next turn, as asyncio's own futures')
            return seen, fut.result().offset
    seen, offset = run(main())
    assert seen == [offset] == [0]
    assert [v for _p, _o, _k, v in sync_read(eng)] == [b"a", b"b"]


def test_create_batch_send_batch_and_typed_errors(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng, max_batch_size=1000) as p:
            batch = p.create_batch()
            n = 0
            while batch.append(key=b"k", value=b"x" * 50, timestamp=None) is not None:
                n += 1
            fut = await p.send_batch(batch, "events", partition=2)
            md = await within(fut)
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send("nope", b"x")
            with pytest.raises(RecordTooLargeError):
                await p.send("events", b"x" * 2_000_000)
            return n, md
    n, md = run(main())
    assert 1 < n < 20 and (md.partition, md.offset) == (2, 0)
    assert sync_read(eng) == [(2, i, b"k", b"x" * 50) for i in range(n)]


def test_serializers_partitions_for_and_a_serializing_transactional_producer(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng, key_serializer=str.encode,
                                    value_serializer=lambda v: repr(v).encode()) as p:
            assert await p.partitions_for("events") == {0, 1, 2}
            md = await within(p.send_and_wait("events", {"n": 1}, key="car-1"))
            assert md.partition == (accumulator.selected.murmur2(b"car-1") & 0x7FFFFFFF) % 3
        async with AIOKafkaProducer(engine=eng, transactional_id="ser", value_serializer=str.encode) as p:
            async with p.transaction():
                await p.send("events", "in a transaction", partition=0)
    run(main())
    assert sorted(v for _p, _o, _k, v in sync_read(eng, isolation="read_committed")) == \
        [b"in a transaction", b"{'n': 1}"]


def test_stop_from_any_point_ends_every_wait_and_leaves_nothing_running(eng, run):
    async def main():
        c = AIOKafkaConsumer("events", engine=eng, group_id="stopper")
        p = AIOKafkaProducer(engine=eng, linger_ms=LONG_MS)
        await c.start()
        await p.start()
        many = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
        one = asyncio.ensure_future(c.getone())
        await asyncio.sleep(0)
        fut = await p.send("events", b"pending", partition=0)  # held by linger_ms
        await within(asyncio.gather(c.stop(), p.stop()))
        assert await within(many) == {}
        with pytest.raises(IllegalStateError):
            await within(one)
        return fut.done() and (await fut).offset
    assert run(main()) == 0  # stop() flushed the pending record
    assert not [t for t in threading.enumerate() if t.name == "kafkalog-producer-sender"]
    assert eng.groups.describe_group("stopper").state.lower() in ("empty", "dead")


def test_configs_are_aiokafkas_and_network_only_ones_are_refused(eng):
    p = AIOKafkaProducer(engine=eng)
    assert (p._producer.acks, p._producer.idempotent, p._producer.request_timeout_ms) == (1, False, 40000)
    q = AIOKafkaProducer(engine=eng, enable_idempotence=True, max_batch_size=999)
    assert (q._producer.acks, q._producer.idempotent, q._producer.batch_size) == (-1, True, 999)
    for bad in ({"bootstrap_servers": "localhost:9092"}, {"security_protocol": "SSL"}, {"batch_size": 10},
                {"no_such_config": 1}, {"acks": 2}):
        with pytest.raises(InvalidConfigurationError):
            AIOKafkaProducer(engine=eng, **bad)
    c = AIOKafkaConsumer(engine=eng)
    assert (c._consumer.max_poll_records, [a.name for a in c._consumer.assignors]) == \
        (2**31 - 1, ["roundrobin"])
    for bad in ({"bootstrap_servers": "x"}, {"fetch_max_wait_ms": 10}, {"check_crcs": False},
                {"max_poll_records": 0}, {"isolation_level": "x"}):
        with pytest.raises(InvalidConfigurationError):
            AIOKafkaConsumer(engine=eng, **bad)


def test_subscribe_and_assign_before_start_are_made_by_start(eng, run):
    eng.producer().send("events", b"early", partition=1).get()

    async def main():
        subscribed = AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest")
        subscribed.subscribe(["events"])
        assigned = AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest")
        assigned.assign([TopicPartition("events", 1)])
        async with subscribed, assigned:
            return [(await within(c.getone())).value for c in (subscribed, assigned)], assigned.assignment()
    values, assignment = run(main())
    assert values == [b"early", b"early"] and assignment == {TopicPartition("events", 1)}


def test_calls_before_start_and_after_stop_raise(eng, run):
    async def main():
        p, c = AIOKafkaProducer(engine=eng), AIOKafkaConsumer("events", engine=eng)
        with pytest.raises(IllegalStateError):
            await p.send("events", b"x")
        with pytest.raises(IllegalStateError):
            await c.getmany()
        await p.start()
        await c.start()
        await p.stop()
        await c.stop()
        with pytest.raises(IllegalStateError):
            await p.send("events", b"x")
        with pytest.raises(IllegalStateError):
            await c.getone()
    run(main())
    assert not [t for t in threading.enumerate() if t.name == "kafkalog-producer-sender"]


# --- consumer ---------------------------------------------------------------------------------------
def test_a_waiting_getmany_is_woken_by_an_append_from_the_loop_and_from_another_thread(eng, run):
    async def main():
        async with AIOKafkaConsumer("events", engine=eng, auto_offset_reset="earliest") as c, \
                AIOKafkaProducer(engine=eng) as p:
            assert await c.getmany(timeout_ms=0) == {}
            waiting = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
            await asyncio.sleep(0)
            assert not waiting.done()
            await p.send("events", b"from the loop", partition=1)  # sealed by the sender thread (linger 0)
            first = await within(waiting)
            waiting = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
            await asyncio.sleep(0)
            t = threading.Thread(target=lambda: eng.producer().send("events", b"from a thread", partition=2).get())
            t.start()
            second = await within(waiting)
            t.join()
            return first, second
    first, second = run(main())
    assert [r.value for r in first[TopicPartition("events", 1)]] == [b"from the loop"]
    assert [r.value for r in second[TopicPartition("events", 2)]] == [b"from a thread"]


def test_getone_async_for_and_commit_count_only_the_records_returned(eng, run):
    with eng.producer() as sp:
        for i in range(30):
            sp.send("events", b"%d" % i, partition=i % 3)
    tp0 = TopicPartition("events", 0)

    async def main():
        async with AIOKafkaConsumer(engine=eng, group_id="g", auto_offset_reset="earliest",
                                    enable_auto_commit=False) as c:
            c.assign([tp0])
            first = await within(c.getone())
            assert await c.position(tp0) == 1  # the other nine were fetched, not returned
            await c.commit()
            assert await c.committed(tp0) == 1
            rest = []
            async for r in c:
                rest.append(r)
                if len(rest) == 5:
                    break
            await c.commit()
            return first, rest, await c.committed(tp0), await c.position(tp0)
    first, rest, committed, position = run(main())
    assert [first.offset] + [r.offset for r in rest] == list(range(6))
    assert [r.value for r in rest] == [b"%d" % (3 * i) for i in range(1, 6)]
    assert committed == position == 6

    async def auto():  # stop() commits (enable_auto_commit) what was returned, not what was fetched
        async with AIOKafkaConsumer(engine=eng, group_id="g", auto_offset_reset="earliest") as c:
            c.assign([tp0])
            assert (await within(c.getone())).offset == 6
        async with AIOKafkaConsumer(engine=eng, group_id="g") as c:
            c.assign([tp0])
            return await c.committed(tp0), (await within(c.getone())).offset
    assert run(auto()) == (7, 7)


def test_seeks_pause_offsets_and_bounds(eng, run):
    with eng.producer() as sp:
        for i in range(10):
            sp.send("events", b"%d" % i, partition=0, timestamp_ms=1000 + i)
    tp0, tp1 = TopicPartition("events", 0), TopicPartition("events", 1)

    async def main():
        async with AIOKafkaConsumer(engine=eng, group_id="s", auto_offset_reset="earliest") as c:
            c.assign([tp0, tp1])
            assert (await within(c.getone())).offset == 0
            c.seek(tp0, 7)
            assert (await within(c.getone())).offset == 7
            await c.seek_to_beginning(tp0)
            assert (await within(c.getone(tp0))).offset == 0
            await c.commit({tp0: 4})
            assert await c.seek_to_committed(tp0) == {tp0: 4}
            assert (await within(c.getone())).offset == 4
            c.pause(tp0)
            assert await c.getmany(timeout_ms=0) == {} and c.paused() == {tp0}
            c.resume(tp0)
            got = await c.getmany(tp0, timeout_ms=0, max_records=2)
            assert [r.offset for r in got[tp0]] == [5, 6]
            await c.seek_to_end()
            assert await c.position(tp0) == 10 and await c.getmany(timeout_ms=0) == {}
            assert (c.highwater(tp0), c.last_stable_offset(tp0)) == (10, 10)
            times = await c.offsets_for_times({tp0: 1003, tp1: 0})
            assert (times[tp0].offset, times[tp0].timestamp, times[tp1]) == (3, 1003, None)
            assert await c.beginning_offsets([tp0]) == {tp0: 0} and await c.end_offsets([tp0, tp1]) == {tp0: 10,
                                                                                                     tp1: 0}
            with pytest.raises(IllegalStateError):
                c.highwater(TopicPartition("events", 2))
            with pytest.raises(InvalidConfigurationError):
                await c.getmany(max_records=0)
    run(main())


def test_getmany_of_some_partitions_returns_only_theirs_and_leaves_the_rest_to_read(eng, run):
    with eng.producer() as sp:
        for p in (0, 1):
            sp.send("events", b"p%d" % p, partition=p)
    tp0, tp1 = TopicPartition("events", 0), TopicPartition("events", 1)

    async def main():
        async with AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest") as c:
            c.assign([tp0, tp1])
            first = await c.getmany(tp0, timeout_ms=0)
            nothing = await c.getmany(tp0, timeout_ms=0)  # tp0 read to its end: idle, but only tp0 is
            rest = await c.getmany(timeout_ms=0)
            return first, nothing, rest
    first, nothing, rest = run(main())
    assert {tp: [r.value for r in rs] for tp, rs in first.items()} == {tp0: [b"p0"]}
    assert nothing == {}
    assert {tp: [r.value for r in rs] for tp, rs in rest.items()} == {tp1: [b"p1"]}


def test_cancelling_a_wait_moves_nothing_and_loses_nothing(eng, run):
    tp = TopicPartition("events", 0)

    async def main():
        async with AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest") as c, \
                AIOKafkaProducer(engine=eng, linger_ms=LONG_MS) as p:
            c.assign([tp])
            for call in (c.getmany(timeout_ms=LONG_MS), c.getone()):
                task = asyncio.ensure_future(call)
                await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await c.position(tp) == 0
            fut = await p.send("events", b"x", partition=0)  # held by linger_ms
            sent = asyncio.ensure_future(_await(fut))
            await asyncio.sleep(0)
            sent.cancel()  # the waiting stops; the record was handed over: it is appended, once
            with pytest.raises(asyncio.CancelledError):
                await sent
            await within(p.flush())
            got = await within(c.getmany(timeout_ms=LONG_MS))
            return [r.value for r in got[tp]]
    assert run(main()) == [b"x"]
    assert len(sync_read(eng)) == 1


def test_a_pattern_subscription_takes_a_topic_created_later(eng, run):
    async def main():
        async with AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest") as c:
            c.subscribe(pattern=r"orders-.*")
            with pytest.raises(InvalidConfigurationError):
                c.subscribe(["a"], pattern="b")
            waiting = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
            await asyncio.sleep(0)
            eng.create_topic("orders-eu", partitions=1)  # a new leader moves LOGS: the wait looks again
            eng.producer().send("orders-eu", b"o").get()
            got = await within(waiting)
            if not got:  # (the topic's creation woke it before the record came)
                got = await within(c.getmany(timeout_ms=LONG_MS))
            return got, c.subscription()
    got, subscription = run(main())
    assert [r.value for r in got[TopicPartition("orders-eu", 0)]] == [b"o"] and subscription == {"orders-eu"}


def test_a_replicated_topic_wakes_a_consumer_when_the_high_watermark_moves(tmp_path, run):
    with engine.open(str(tmp_path / "r"), brokers=3) as e:
        e.create_topic("rep", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})

        async def main():
            async with AIOKafkaConsumer("rep", engine=e, auto_offset_reset="earliest") as c, \
                    AIOKafkaProducer(engine=e, acks="all") as p:
                assert p._producer.hand_off  # followers: the loop never waits for them
                waiting = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
                await asyncio.sleep(0)
                futures = [await p.send("rep", b"%d" % i) for i in range(50)]
                mds = await within(asyncio.gather(*futures))
                got = [r.value for r in (await within(waiting)).get(TopicPartition("rep", 0), [])]
                while len(got) < 50:
                    more = await within(c.getmany(timeout_ms=LONG_MS))
                    got += [r.value for r in more[TopicPartition("rep", 0)]]
                return [m.offset for m in mds], got
        offsets, got = run(main())
        assert offsets == list(range(50)) and got == [b"%d" % i for i in range(50)]


# --- groups -----------------------------------------------------------------------------------------
class Recorder(ConsumerRebalanceListener):
    def __init__(self, name, log, consumer=None):
        self.name, self.log, self.consumer = name, log, consumer

    async def on_partitions_revoked(self, revoked):
        await asyncio.sleep(0)  # a real suspension: the callback runs on the loop
        self.log.append((self.name, "revoked", sorted(p.partition for p in revoked)))
        if self.consumer is not None and revoked:
            await self.consumer.commit()

    async def on_partitions_assigned(self, assigned):
        await asyncio.sleep(0)
        self.log.append((self.name, "assigned", sorted(p.partition for p in assigned)))


async def read_all(c, name: str, seen: list, total: int) -> None:
    """getmany() until `total` records were seen by the group (into `seen` as (name, partition, offset)), then
    commit."""
    while len(seen) < total:
        got = await c.getmany(timeout_ms=100)
        seen.extend((name, r.partition, r.offset) for records in got.values() for r in records)
        await asyncio.sleep(0)  # (a getmany that finds records returns without suspending: let the other run)
    await c.commit()


async def assignments_then_stop(*members) -> tuple:
    assignment = tuple(m.assignment() for m in members)
    for m in members:
        await m.stop()
    return assignment


def test_group_members_share_partitions_and_rebalance_inside_getmany_with_async_callbacks(eng, run):
    with eng.producer() as sp:
        for i in range(60):
            sp.send("events", b"%d" % i, partition=i % 3)
    log: list = []
    seen: list = []

    def member(name, commit_on_revoke):
        c = AIOKafkaConsumer(engine=eng, group_id="grp", auto_offset_reset="earliest", enable_auto_commit=False,
                             heartbeat_interval_ms=100, session_timeout_ms=6000, max_poll_records=4)
        return c, Recorder(name, log, c if commit_on_revoke else None)

    async def main():
        (a, la), (b, lb) = member("a", True), member("b", True)
        await a.start()
        await b.start()
        a.subscribe(["events"], listener=la)
        first = await within(a.getmany(timeout_ms=LONG_MS))  # a alone: every partition, four records
        seen.extend(("a", r.partition, r.offset) for records in first.values() for r in records)
        b.subscribe(["events"], listener=lb)
        assert await within(b.getmany(timeout_ms=0)) == {}  # b's JoinGroup is sent: the group rebalances
        await within(asyncio.gather(read_all(a, "a", seen, 60), read_all(b, "b", seen, 60)))
        return await assignments_then_stop(a, b)
    asg_a, asg_b = run(main())
    assert asg_a | asg_b == {TopicPartition("events", p) for p in range(3)} and not asg_a & asg_b and asg_b
    assert log[:2] == [("a", "revoked", []), ("a", "assigned", [0, 1, 2])]
    assert ("a", "revoked", [0, 1, 2]) in log and any(n == "b" and k == "assigned" and ps for n, k, ps in log)
    # each record read once: a's revocation committed its positions before b took any of its partitions
    assert sorted((p, o) for _n, p, o in seen) == sorted((i % 3, i // 3) for i in range(60))
    assert {n for n, _p, _o in seen} == {"a", "b"}


def test_a_static_member_keeps_its_partitions_across_a_restart(eng, run):
    def member(instance):
        return AIOKafkaConsumer("events", engine=eng, group_id="static", group_instance_id=instance,
                                session_timeout_ms=30000, heartbeat_interval_ms=100)

    async def until_assigned(*members):
        while not all(m.assignment() for m in members):
            await asyncio.gather(*(m.getmany(timeout_ms=50) for m in members))

    async def main():
        a, b = member("a"), member("b")
        await a.start()
        await b.start()
        await within(until_assigned(a, b))
        before = (a.assignment(), b.assignment())
        await a.stop()  # a static member does not leave: its partitions wait for it
        a2 = member("a")
        await a2.start()
        await within(until_assigned(a2))  # no rebalance: b is not polled meanwhile
        after = (a2.assignment(), b.assignment())
        await a2.stop()
        await b.stop()
        return before, after
    before, after = run(main())
    assert before == after and before[0] | before[1] == {TopicPartition("events", p) for p in range(3)}


# --- transactions -----------------------------------------------------------------------------------
def test_transactions_and_read_committed(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng, transactional_id="t1") as p:
            async with p.transaction():
                await p.send("events", b"committed", partition=0)
            with pytest.raises(ZeroDivisionError):
                async with p.transaction():
                    await p.send("events", b"aborted", partition=0)
                    1 / 0
            await p.begin_transaction()
            await p.send("events", b"open", partition=0)
            await within(p.flush())  # appended, undecided
            async with AIOKafkaConsumer(engine=eng, isolation_level="read_committed",
                                        auto_offset_reset="earliest") as c:
                c.assign([TopicPartition("events", 0)])
                seen = [r.value for rs in (await c.getmany(timeout_ms=0)).values() for r in rs]
                assert c.last_stable_offset(TopicPartition("events", 0)) < c.highwater(TopicPartition("events", 0))
                waiting = asyncio.ensure_future(c.getmany(timeout_ms=LONG_MS))
                await asyncio.sleep(0)
                await p.commit_transaction()  # the marker moves the LSO: the waiting read wakes
                seen += [r.value for rs in (await within(waiting)).values() for r in rs]
            return seen
    assert run(main()) == [b"committed", b"open"]
    assert [v for _p, _o, _k, v in sync_read(eng, isolation="read_committed")] == [b"committed", b"open"]


def test_a_failed_send_makes_the_transaction_abort_only(eng, run):
    async def main():
        async with AIOKafkaProducer(engine=eng, transactional_id="t2") as p:
            with pytest.raises(IllegalStateError):
                await p.send("events", b"outside")
            await p.begin_transaction()
            with pytest.raises(RecordTooLargeError):
                await p.send("events", b"x" * 2_000_000)
            with pytest.raises(TransactionAbortableError):
                await p.commit_transaction()
            await p.abort_transaction()
    run(main())
    assert sync_read(eng, isolation="read_committed") == []


def test_exactly_once_consume_transform_produce_under_random_cancellation(tmp_path, run):
    """Each round runs the loop as a task and cancels it at a random moment (mid-getmany, mid-send, mid-commit);
    the next round starts a fresh consumer and producer with the same group and transactional id. In the end the
    sink holds every source record transformed exactly once."""
    n = 400
    with engine.open(str(tmp_path / "eos")) as e:
        e.create_topic("src", partitions=2)
        e.create_topic("sink", partitions=2)
        with e.producer() as sp:
            for i in range(n):
                sp.send("src", b"%d" % i, key=b"%d" % i)
        rnd = random.Random(7)

        async def transform_loop():
            async with AIOKafkaConsumer("src", engine=e, group_id="eos", auto_offset_reset="earliest",
                                        enable_auto_commit=False, isolation_level="read_committed") as c, \
                    AIOKafkaProducer(engine=e, transactional_id="eos-1") as p:
                while True:
                    got = await c.getmany(timeout_ms=200, max_records=7)
                    if not got:
                        return True
                    async with p.transaction():
                        for tp, records in got.items():
                            for r in records:
                                await p.send("sink", r.value.upper() + b"!", key=r.key)
                        await p.send_offsets_to_transaction(
                            {tp: OffsetAndMetadata(records[-1].offset + 1) for tp, records in got.items()},
                            c.group_metadata())

        async def main():
            for _ in range(40):
                task = asyncio.ensure_future(transform_loop())
                for _ in range(rnd.randrange(1, 60)):
                    await asyncio.sleep(0)
                    if task.done():
                        break
                if task.done():
                    if task.result():
                        return
                    continue
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert await within(transform_loop())
        run(main())
        got = sorted(v for _p, _o, _k, v in sync_read(e, "sink", isolation="read_committed"))
        assert got == sorted(b"%d!" % i for i in range(n))


def test_consumer_protocol_members_share_partitions_with_async_callbacks(tmp_path, run):
    """AIOKafkaConsumer with group_protocol='consumer' (KIP-848): the coordinator assigns; the first member's async
    listener hears what it gives up (and commits it) when the second joins; every record is read once."""
    log: list = []
    seen: list = []
    with engine.open(str(tmp_path / "d"), group_config={"group_consumer_heartbeat_interval_ms": 50}) as e:
        e.create_topic("events", partitions=3)
        with e.producer() as sp:
            for i in range(60):
                sp.send("events", b"%d" % i, partition=i % 3)

        def member(name):
            c = AIOKafkaConsumer(engine=e, group_id="kip848", group_protocol="consumer",
                                 auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=4)
            return c, Recorder(name, log, c)

        async def main():
            (a, la), (b, lb) = member("a"), member("b")
            await a.start()
            await b.start()
            a.subscribe(["events"], listener=la)
            while not a.assignment():
                got = await within(a.getmany(timeout_ms=100))
                seen.extend(("a", r.partition, r.offset) for records in got.values() for r in records)
            b.subscribe(["events"], listener=lb)
            await within(asyncio.gather(read_all(a, "a", seen, 60), read_all(b, "b", seen, 60)))
            while not b.assignment():
                await within(asyncio.gather(a.getmany(timeout_ms=50), b.getmany(timeout_ms=50)))
            return await assignments_then_stop(a, b)
        asg_a, asg_b = run(main())
    assert asg_a | asg_b == {TopicPartition("events", p) for p in range(3)} and not asg_a & asg_b and asg_b
    assert log[0] == ("a", "assigned", [0, 1, 2])
    assert any(n == "a" and k == "revoked" and ps for n, k, ps in log)
    assert any(n == "b" and k == "assigned" and ps for n, k, ps in log)
    assert sorted((p, o) for _n, p, o in seen) == sorted((i % 3, i // 3) for i in range(60))
