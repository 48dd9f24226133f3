"""Replication: acks='all' produce throughput at RF=3 beside the same producer at RF=1 (goal: at least 0.7x), and
beside its floor, a narrower row: the RF=1 run, then every byte of its logs read once and written twice more, in
pieces of the most one follower fetch can carry here (one partition's max.in.flight batches). That much two followers
cannot avoid; the floor leaves out all their per-fetch work. (The kernel's cost per byte falls as writes grow, so
the pieces' size matters.) Also follower lag (leader append to every follower holding the batch, p50 and p99)
beside the leader's own append, and failover time (leader failed to new leader accepting a write) beside closing
and reopening a one-broker engine, which is what a single process offers instead. Brokers run their fetcher
threads, as users run them."""
from __future__ import annotations

import os
import tempfile
import time

import engine
from bench.clients import VALUE, FreshTopic, _values
from bench.runner import Contender, Workload, figure, percentile
from engine.clients.producer import MAX_IN_FLIGHT


def workloads(quick: bool, scratch: str) -> list[Workload]:
    n = 50_000 if quick else 500_000
    values = _values(n)
    keys = [b"key-%05d" % i for i in range(1000)]
    targets = {rf: FreshTopic(engine.open(tempfile.mkdtemp(dir=scratch), brokers=3), partitions=3,
                              replication_factor=rf, config={"min.insync.replicas": min(rf, 2)}) for rf in (1, 3)}

    floor_topics = FreshTopic(targets[1].eng, prefix="floor", partitions=3, replication_factor=1)
    copies = tempfile.mkdtemp(dir=scratch)
    piece = MAX_IN_FLIGHT * 16384  # (16384: the batch_size these producers use, the default)

    def send(target: FreshTopic) -> str:
        topic = target.next()
        with target.eng.producer(acks="all", linger_ms=5) as p:
            for i in range(n):
                p.send(topic, values[i % 1000], keys[i % 1000])
        return topic

    def floor() -> None:
        for name in os.listdir(copies):  # the previous call's copies go inside the call, as its topic does
            os.remove(os.path.join(copies, name))
        topic = send(floor_topics)
        for p in range(3):
            for seg in floor_topics.eng.log(topic, p).segments:
                with open(seg.log_path, "rb") as f:
                    data = memoryview(f.read())
                name = os.path.join(copies, f"{p}-{seg.base_offset}")
                with open(f"{name}-1", "wb", buffering=0) as one, open(f"{name}-2", "wb", buffering=0) as two:
                    for at in range(0, len(data), piece):
                        one.write(data[at:at + piece])
                        two.write(data[at:at + piece])

    def close() -> None:  # (the floor's topics are in the RF=1 engine)
        for target in targets.values():
            target.eng.close()

    return [Workload("produce", f"per-record send() with acks='all' of {n // 1000}k x {VALUE} B records, 3 brokers, "
                                f"3 partitions, RF=3, min.insync.replicas=2", n, n * VALUE,
                     [Contender("kafkalog", lambda: send(targets[3])),
                      Contender("kafkalog, same producer at RF=1", lambda: send(targets[1])),
                      Contender("floor: the RF=1 run, then its logs' bytes written twice (narrower: no per-fetch "
                                "work)", floor)],
                     targets={"kafkalog, same producer at RF=1": 0.7}, close=close)]


def figures(quick: bool, scratch: str) -> list[dict]:
    return [*_follower_lag(quick, scratch), _failover(quick, scratch)]


def _follower_lag(quick: bool, scratch: str) -> list[dict]:
    """Each 16 KiB batch appended with acks=1: the time until both followers hold it, and the append itself."""
    batch = engine.encode_batch([(None, b"v" * VALUE, None, 1)] * 140)
    n = 300 if quick else 3000
    reps = []
    for _ in range(3):
        with engine.open(tempfile.mkdtemp(dir=scratch), brokers=3) as e:
            e.create_topic("lag", replication_factor=3)
            followers = [e._brokers[b].partitions[("lag", 0)].log for b in (1, 2)]
            lags, appends = [], []
            for _ in range(n):
                t = time.perf_counter_ns()
                info = e.append("lag", 0, batch, acks=1)
                appends.append(time.perf_counter_ns() - t)
                while any(lg.log_end_offset <= info.last_offset for lg in followers):
                    time.sleep(0)
                lags.append(time.perf_counter_ns() - t)
            reps.append((lags, appends))
    out = []
    for pct, name in ((0.5, "p50"), (0.99, "p99")):
        ours = [percentile(lags, pct) / 1000 for lags, _ in reps]
        theirs = [percentile(appends, pct) / 1000 for _, appends in reps]
        out.append(figure(f"follower lag, {name}: a 16 KiB batch on the leader until both followers hold it "
                           f"(RF=3, fetcher threads)", ours, "ms", "the leader's own append (acks=1)", theirs, True))
    return out


def _failover(quick: bool, scratch: str) -> dict:
    """fail_broker(leader) until an append to the partition succeeds, beside reopening one broker's directory."""
    batch = engine.encode_batch([(None, b"v" * VALUE, None, 1)] * 140)
    fill = 200 if quick else 2000
    ours, theirs = [], []
    for _ in range(3):
        with engine.open(tempfile.mkdtemp(dir=scratch), brokers=3) as e:
            e.create_topic("f", replication_factor=3, config={"min.insync.replicas": 2})
            for _ in range(fill):
                e.append("f", 0, batch)
            t = time.perf_counter()
            e.fail_broker(e.describe_topic("f").partitions[0].leader)
            e.append("f", 0, batch)
            ours.append((time.perf_counter() - t) * 1000)
        d = tempfile.mkdtemp(dir=scratch)
        with engine.open(d) as single:
            single.create_topic("f")
            for _ in range(fill):
                single.append("f", 0, batch)
        t = time.perf_counter()
        single = engine.open(d)
        single.append("f", 0, batch)
        theirs.append((time.perf_counter() - t) * 1000)
        single.close()
    return figure("failover: leader failed until the new leader took a write (acks='all', RF=3)", ours, "ms",
                   "reopening a one-broker engine, then a write", theirs, True)
