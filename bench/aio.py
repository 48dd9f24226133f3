"""engine.aio against the synchronous clients on the same engine, and against aiokafka talking to a real broker
(KAFKA_HOME given to `make bench`; without it those contenders are left out and named in the row): n x 100 B keyed
records to 3 partitions. Produce: send() per record then one flush() (the producers' defaults, acks=1, linger 5 ms
for every contender), and send_and_wait() per record (the synchronous producer: send().get()). Consume: a getmany()
loop (the synchronous consumer: poll()) and `async for` (the synchronous consumer's iteration), each reading every
record's key and value. And the latency from a send to the record coming out of a waiting getone() (the synchronous
pair: a send, and a consumer thread waiting in poll()), p50 and p99 over 2,000 round trips, one at a time."""
from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time

import engine
from bench.clients import FreshTopic
from bench.kafka import PARTITIONS, VALUE
from bench.runner import Contender, Workload, figure
from engine.aio import AIOKafkaConsumer, AIOKafkaProducer

SYNC = "kafkalog, synchronous clients"
AIOKAFKA = "aiokafka with a real broker"
NO_BROKER = f"{AIOKAFKA}: needs make bench KAFKA_HOME=<a Kafka installation or build folder>"
LATENCY_ROUND_TRIPS = 2000


def _label(n: int) -> str:
    return f"{n // 1000}k x {VALUE} B records, keyed, {PARTITIONS} partitions"


def workloads(quick: bool, broker, scratch: str) -> list[Workload]:
    n = 100_000 if quick else 1_000_000
    n_wait = 2_000 if quick else 10_000
    keys = [b"key-%05d" % i for i in range(1000)]
    values = [os.urandom(VALUE) for _ in range(1000)]
    eng = engine.open(tempfile.mkdtemp(dir=scratch))
    fresh = FreshTopic(eng, "a", partitions=PARTITIONS)
    eng.create_topic("c", PARTITIONS)
    with eng.producer(linger_ms=5) as p:
        for i in range(n):
            p.send("c", values[i % 1000], keys[i % 1000])
    bootstrap = None
    if broker is not None:
        import aiokafka.admin
        bootstrap = broker.bootstrap
        counter = iter(range(10**9))

        async def broker_topic(prefix: str) -> str:
            """A new topic of its own (the broker is shared with bench.kafka's rows: the names differ)."""
            topic = f"aio-{prefix}{next(counter)}"
            admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                answer = await admin.create_topics([aiokafka.admin.NewTopic(topic, PARTITIONS, 1)])
            finally:
                await admin.close()
            errors = [e for e in answer.topic_errors if e[1] != 0]
            assert not errors, f"the broker did not create {topic}: {errors}"
            return topic

        async def fill() -> str:
            topic = await broker_topic("c")
            async with aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
                for i in range(n):
                    await p.send(topic, values[i % 1000], keys[i % 1000])
            return topic
        consumed = asyncio.run(fill())

    # --- produce ----------------------------------------------------------------------------------------
    def aio_send():
        async def main():
            topic = fresh.next()
            async with AIOKafkaProducer(engine=eng, linger_ms=5) as p:
                send = p.send
                for i in range(n):
                    await send(topic, values[i % 1000], keys[i % 1000])
        asyncio.run(main())

    def sync_send():
        topic = fresh.next()
        with eng.producer(acks=1, linger_ms=5) as p:
            send = p.send
            for i in range(n):
                send(topic, values[i % 1000], keys[i % 1000])

    def aiokafka_send():
        async def main():
            topic = await broker_topic("p")
            async with aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
                send = p.send
                for i in range(n):
                    await send(topic, values[i % 1000], keys[i % 1000])
        asyncio.run(main())

    def aio_send_and_wait():
        async def main():
            topic = fresh.next()
            async with AIOKafkaProducer(engine=eng) as p:
                for i in range(n_wait):
                    await p.send_and_wait(topic, values[i % 1000], keys[i % 1000])
        asyncio.run(main())

    def sync_send_get():
        topic = fresh.next()
        with eng.producer(acks=1) as p:
            for i in range(n_wait):
                p.send(topic, values[i % 1000], keys[i % 1000]).get()

    def aiokafka_send_and_wait():
        async def main():
            topic = await broker_topic("w")
            async with aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap) as p:
                for i in range(n_wait):
                    await p.send_and_wait(topic, values[i % 1000], keys[i % 1000])
        asyncio.run(main())

    # --- consume ----------------------------------------------------------------------------------------
    parts = [engine.TopicPartition("c", p) for p in range(PARTITIONS)]

    async def read_getmany(c, n: int) -> None:
        got = 0
        while got < n:
            for records in (await c.getmany(timeout_ms=1000)).values():
                for r in records:
                    r.key, r.value
                got += len(records)
        assert got == n

    async def read_iterate(c, n: int) -> None:
        got = 0
        async for r in c:
            r.key, r.value
            got += 1
            if got == n:
                break

    def aio_read(read):
        async def main():
            async with AIOKafkaConsumer(engine=eng, auto_offset_reset="earliest") as c:
                c.assign(parts)
                await read(c, n)
        asyncio.run(main())

    def sync_poll():
        with eng.consumer(auto_offset_reset="earliest", max_poll_records=2**31 - 1) as c:
            c.assign(parts)
            got = 0
            while got < n:
                for records in c.poll(timeout_ms=1000).values():
                    for r in records:
                        r.key, r.value
                    got += len(records)
            assert got == n

    def sync_iterate():
        with eng.consumer(auto_offset_reset="earliest", consumer_timeout_ms=60_000) as c:
            c.assign(parts)
            got = 0
            for r in c:
                r.key, r.value
                got += 1
                if got == n:
                    break

    def aiokafka_read(read):
        async def main():
            c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                          enable_auto_commit=False)
            await c.start()
            try:
                c.assign([aiokafka.TopicPartition(consumed, p) for p in range(PARTITIONS)])
                await read(c, n)
            finally:
                await c.stop()
        asyncio.run(main())

    def row(group: str, name: str, records: int, ours, sync, peer) -> Workload:
        contenders = [Contender("kafkalog", ours), Contender(SYNC, sync)]
        targets = {SYNC: 0.8}
        if broker is not None:
            contenders.append(Contender(AIOKAFKA, peer))
            targets[AIOKAFKA] = 5.0
        else:
            name += f" ({NO_BROKER})"
        return Workload(group, name, records, records * VALUE, contenders, targets)

    label = _label(n)
    rows = [row("async produce", f"engine.aio send() per record + one flush() of {label}, acks=1, linger 5 ms",
                n, aio_send, sync_send, aiokafka_send),
            row("async produce", f"engine.aio send_and_wait() per record of {_label(n_wait)}, acks=1 "
                                 f"(synchronous: send().get())", n_wait, aio_send_and_wait, sync_send_get,
                aiokafka_send_and_wait),
            row("async consume", f"engine.aio getmany() loop over {label}, partitions assigned, every key and "
                                 f"value read (synchronous: poll())", n, lambda: aio_read(read_getmany), sync_poll,
                lambda: aiokafka_read(read_getmany)),
            row("async consume", f"engine.aio `async for` over {label}, partitions assigned, every key and value "
                                 f"read (synchronous: iteration)", n, lambda: aio_read(read_iterate), sync_iterate,
                lambda: aiokafka_read(read_iterate))]
    rows[0].close = eng.close
    return rows


def _aio_latencies(eng: engine.Engine, topic: str) -> list[float]:
    async def main():
        out = []
        async with AIOKafkaConsumer(engine=eng) as c, AIOKafkaProducer(engine=eng) as p:
            c.assign([engine.TopicPartition(topic, 0)])
            await c.seek_to_end()
            for i in range(LATENCY_ROUND_TRIPS):
                waiting = asyncio.ensure_future(c.getone())
                await asyncio.sleep(0)  # the consumer waits before the record is sent
                start = time.perf_counter()
                await p.send(topic, b"%d" % i, partition=0)
                await waiting
                out.append(time.perf_counter() - start)
        return out
    return asyncio.run(main())


def _sync_latencies(eng: engine.Engine, topic: str) -> list[float]:
    out, arrived, ready = [], threading.Event(), threading.Event()
    c = eng.consumer()
    c.assign([engine.TopicPartition(topic, 0)])
    c.seek_to_end()

    def consume():
        for _ in range(LATENCY_ROUND_TRIPS):
            ready.set()
            while not c.poll(timeout_ms=10_000, max_records=1):
                pass
            arrived.set()
    thread = threading.Thread(target=consume)
    thread.start()
    with eng.producer(acks=1) as p:
        for i in range(LATENCY_ROUND_TRIPS):
            ready.wait()
            ready.clear()
            time.sleep(0.0002)  # (the consumer is inside poll() before the record is sent)
            start = time.perf_counter()
            p.send(topic, b"%d" % i, partition=0)
            arrived.wait()
            out.append(time.perf_counter() - start)
            arrived.clear()
    thread.join()
    c.close()
    return out


def figures(quick: bool, scratch: str) -> list[dict]:
    """p50 and p99 of send -> waiting consumer, engine.aio against the synchronous pair, over a few repetitions."""
    reps = 1 if quick else 3
    p50s, p99s = ([], []), ([], [])
    with engine.open(tempfile.mkdtemp(dir=scratch)) as eng:
        eng.create_topic("lat", 1)
        for _ in range(reps):
            for side, latencies in enumerate((_aio_latencies(eng, "lat"), _sync_latencies(eng, "lat"))):
                ms = sorted(x * 1000 for x in latencies)
                p50s[side].append(statistics.median(ms))
                p99s[side].append(ms[int(len(ms) * 0.99) - 1])
    return [figure(f"latency from send() to a waiting getone(), {q}, linger 0", ours, "ms",
                    "kafkalog, synchronous send() to a consumer waiting in poll()", theirs, True)
            for q, (ours, theirs) in (("p50", p50s), ("p99", p99s))]
