"""Consumer groups: how long a rebalance takes when one member joins a stable group (eager `range` against
`cooperative-sticky`, 10/100/1000 partitions x 2/10/50 members; the consumer group protocol, KIP-848, against
classic cooperative-sticky as member 51 joins 1,000 partitions, in process and with librdkafka over the wire), and
commit throughput, each beside librdkafka's mock cluster (confluent-kafka) where it can do the same thing.

A rebalance is timed from the new member's subscribe() until every member holds its share of the new generation
(cooperative: both rounds), with one thread polling every member, as an application with one consumer per thread
would, with no pause between rounds: until the end of the pass of polls after which the group had settled (the
harness's check that finds it so is not counted, on either side). kafkalog's classic members hear of a rebalance from
the coordinator the moment it begins (in one process it can tell them); librdkafka's, and every member of the
consumer group protocol, from their heartbeats, every 100 ms on both sides. The mock cluster creates topics with 4 partitions only and its group coordinator runs its own join
timers, so it is compared on a 4-partition topic, 2 members joined by a third.
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time

import engine
from bench.clients import _MockCluster
from bench.runner import Contender, Workload, figure
from engine.common.structs import TopicPartition

HEARTBEAT_MS = 100
GROUPS = {"group_min_session_timeout_ms": 1000, "group_initial_rebalance_delay_ms": 300,
          "group_consumer_heartbeat_interval_ms": HEARTBEAT_MS}
CONSUMER_PROTOCOL = "consumer"  # as a strategy: the consumer group protocol (KIP-848), the coordinator assigning


def _settled(e, group: str, consumers, partitions: set) -> bool:
    """Every member in the group's stable generation, the partitions each owned once. The cheap tests come first, so
    a pass that finds the rebalance still running spends next to nothing of the time measured on finding it out."""
    if group in e.groups.consumer.groups:
        d = e.groups.describe_consumer_group(group)
        if d.state != "Stable" or len(d.members) != len(consumers) or any(c.group.rebalancing() for c in consumers):
            return False
    else:
        g = e.groups.groups.get(group)
        if g is None or g.state != "Stable":
            return False
        if not all(c.group_metadata().generation_id == g.generation and not c.group.rebalancing()
                   for c in consumers):
            return False
    owned = [tp for c in consumers for tp in c.assignment()]
    return len(owned) == len(set(owned)) and set(owned) == partitions


def _drive(e, group: str, consumers, partitions: set, timeout_s: float = 120) -> float:
    """Poll every member in turn until the group settled; the perf_counter() at the end of the pass after which it had
    (the check that finds it settled is the harness looking, not the rebalance: it is not counted)."""
    start = end = time.perf_counter()
    while not _settled(e, group, consumers, partitions):
        if end - start > timeout_s:
            raise AssertionError(f"group {group} did not settle in {timeout_s} s")
        for c in consumers:
            c.poll(0)
        end = time.perf_counter()
    return end


def kafkalog_rebalance(scratch: str, partitions: int, members: int, strategy: str) -> float:
    """Seconds until a group of `members` consumers over `partitions` partitions took in one more member."""
    with engine.open(tempfile.mkdtemp(dir=scratch), group_config=GROUPS) as e:
        e.create_topic("t", partitions=partitions)
        every = {TopicPartition("t", p) for p in range(partitions)}
        cfg = dict(group_id="g", group_protocol=CONSUMER_PROTOCOL, enable_auto_commit=False) \
            if strategy == CONSUMER_PROTOCOL else \
            dict(group_id="g", partition_assignment_strategy=strategy, heartbeat_interval_ms=HEARTBEAT_MS,
                 session_timeout_ms=10_000, enable_auto_commit=False)
        consumers = [e.consumer("t", **cfg) for _ in range(members)]
        _drive(e, "g", consumers, every)
        start = time.perf_counter()
        consumers.append(e.consumer("t", **cfg))
        took = _drive(e, "g", consumers, every) - start
        for c in consumers:
            c.close()
        return took


def wire_rebalance(scratch: str, partitions: int, members: int, protocol: str) -> float:
    """As kafkalog_rebalance, with librdkafka's consumers over `kafkalog serve`: `protocol` "classic"
    (cooperative-sticky) or "consumer" (KIP-848); heartbeats every HEARTBEAT_MS either way."""
    import confluent_kafka

    with engine.open(tempfile.mkdtemp(dir=scratch), group_config=GROUPS) as e, e.serve(port=0) as listener:
        e.create_topic("t", partitions=partitions)
        conf = {"bootstrap.servers": listener.bootstrap, "group.id": "g", "enable.auto.commit": False,
                "group.protocol": protocol}
        if protocol == "classic":
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
                         "heartbeat.interval.ms": HEARTBEAT_MS})

        def consumer():
            c = confluent_kafka.Consumer(conf)
            c.subscribe(["t"])
            return c

        def settled(cs) -> bool:
            owned = [(tp.topic, tp.partition) for c in cs for tp in c.assignment()]
            if len(owned) != partitions or len(set(owned)) != partitions or not all(c.assignment() for c in cs):
                return False
            if protocol == CONSUMER_PROTOCOL:
                d = e.groups.describe_consumer_group("g")
                return d.state == "Stable" and len(d.members) == len(cs)
            return e.groups.describe_group("g").state == "Stable"

        def drive(cs) -> float:
            start = end = time.perf_counter()
            while not settled(cs):
                if end - start > 120:
                    raise AssertionError(f"the {protocol} group did not settle over the wire")
                for c in cs:
                    c.poll(0.001)
                end = time.perf_counter()
            return end

        consumers = [consumer() for _ in range(members)]
        drive(consumers)
        start = time.perf_counter()
        consumers.append(consumer())
        took = drive(consumers) - start
        _close_within(consumers, 30)
        return took


def _mock_rebalance(mock: _MockCluster, topic: str, strategy: str, run: int) -> float:
    import confluent_kafka

    md = mock.producer.list_topics(topic, timeout=10)
    every = len(md.topics[topic].partitions)

    def consumer(i):
        c = confluent_kafka.Consumer({"bootstrap.servers": mock.address, "group.id": f"bench-{strategy}-{run}",
                                      "partition.assignment.strategy": strategy, "session.timeout.ms": 10_000,
                                      "heartbeat.interval.ms": HEARTBEAT_MS, "client.id": f"c{i}"})
        c.subscribe([topic])
        return c

    def drive(cs):  # as _drive: the end of the pass after which the group had settled
        start = end = time.perf_counter()
        while not (sum(len(c.assignment()) for c in cs) == every and all(c.assignment() for c in cs)):
            if end - start > 120:
                raise AssertionError("the mock cluster's group did not settle")
            for c in cs:
                c.poll(0.001)
            end = time.perf_counter()
        return end

    consumers = [consumer(0), consumer(1)]
    drive(consumers)
    start = time.perf_counter()
    consumers.append(consumer(2))
    took = drive(consumers) - start
    _close_within(consumers, 30)
    return took


def _close_within(consumers, timeout_s: float) -> None:
    """Close the peer's consumers. librdkafka's close() once hung in this bench, inside the rebalance callback it
    serves while closing against the mock cluster, and stopped the whole run: a close still running after
    `timeout_s` is left to its daemon thread (after the measurement, so no figure depends on it)."""
    closers = [threading.Thread(target=c.close, daemon=True) for c in consumers]
    for t in closers:
        t.start()
    deadline = time.perf_counter() + timeout_s
    for t in closers:
        t.join(max(0.0, deadline - time.perf_counter()))
    if any(t.is_alive() for t in closers):
        print(f"confluent-kafka: a consumer's close() did not return in {timeout_s} s; left running", file=sys.stderr)


def figures(quick: bool, scratch: str) -> list[dict]:
    reps = 1 if quick else 3
    out = []
    for partitions in ((10, 100) if quick else (10, 100, 1000)):
        for members in ((2, 10) if quick else (2, 10, 50)):
            eager = [kafkalog_rebalance(scratch, partitions, members, "range") * 1000 for _ in range(reps)]
            coop = [kafkalog_rebalance(scratch, partitions, members, "cooperative-sticky") * 1000
                    for _ in range(reps)]
            fig = figure(f"rebalance as member {members + 1} joins, {partitions} partitions: cooperative-sticky "
                          f"(two rounds)", coop, "ms", "kafkalog, eager range (one round, all revoke)", eager, True)
            fig["ceilings"] = [["cooperative", fig["value"], 10], ["eager", fig["peer_value"], 5]]
            out.append(fig)
    partitions, members = (100, 10) if quick else (1000, 50)  # (the group: 50 members, 1,000 partitions)
    for where, run in (("in process", lambda p: kafkalog_rebalance(scratch, partitions, members, p)),
                       ("over the wire, librdkafka", lambda p: wire_rebalance(scratch, partitions, members, p))):
        consumer = [run(CONSUMER_PROTOCOL) * 1000 for _ in range(reps)]
        classic = [run("cooperative-sticky" if where == "in process" else "classic") * 1000 for _ in range(reps)]
        out.append(figure(f"rebalance as member {members + 1} joins, {partitions} partitions, {where}: consumer "
                          f"protocol (KIP-848, heartbeats every {HEARTBEAT_MS} ms)", consumer, "ms",
                          "kafkalog, classic cooperative-sticky", classic, True))
    mock = _MockCluster()
    mock.producer.produce("rebalance", b"x")
    mock.producer.flush(10)
    for strategy in ("range",) if quick else ("range", "cooperative-sticky"):  # the mock's rounds take seconds
        ours, theirs = [], []
        for run in range(reps):
            ours.append(kafkalog_rebalance(scratch, 4, 2, strategy) * 1000)
            theirs.append(_mock_rebalance(mock, "rebalance", strategy, run) * 1000)
        out.append(figure(f"rebalance as member 3 joins, 4 partitions, {strategy}", ours, "ms",
                           "confluent-kafka mock cluster", theirs, True))
    return out


def workloads(quick: bool, scratch: str) -> list[Workload]:
    """Synchronous commits of 4 partitions' offsets by a group member, one after another."""
    import confluent_kafka

    n = 200 if quick else 2000
    e = engine.open(tempfile.mkdtemp(dir=scratch), group_config=GROUPS)
    e.create_topic("c", partitions=4)
    ours = e.consumer("c", group_id="committer", heartbeat_interval_ms=HEARTBEAT_MS, enable_auto_commit=False)
    _drive(e, "committer", [ours], {TopicPartition("c", p) for p in range(4)})
    counter = iter(range(10**9))

    def kafkalog_commit():
        base = next(counter) * n
        for i in range(n):
            ours.commit({TopicPartition("c", p): base + i for p in range(4)})

    mock = _MockCluster()
    mock.producer.produce("c", b"x")
    mock.producer.flush(10)
    theirs = confluent_kafka.Consumer({"bootstrap.servers": mock.address, "group.id": "committer",
                                       "enable.auto.commit": False})
    parts = len(mock.producer.list_topics("c", timeout=10).topics["c"].partitions)
    theirs.assign([confluent_kafka.TopicPartition("c", p, 0) for p in range(parts)])

    def rdkafka_commit():
        base = next(counter) * n
        for i in range(n):
            theirs.commit(offsets=[confluent_kafka.TopicPartition("c", p, base + i) for p in range(parts)],
                          asynchronous=False)

    assert parts == 4, f"the mock cluster made {parts} partitions"
    def close() -> None:
        ours.close()
        e.close()
        _close_within([theirs], 30)
    return [Workload("groups", f"commit() of 4 partitions' offsets, synchronous, {n} in a row (OffsetCommit)",
                     n, 0, [Contender("kafkalog", kafkalog_commit),
                            Contender("confluent-kafka mock cluster", rdkafka_commit)], close=close)]

