"""One scenario, written once against aiokafka's API, run twice: with aiokafka's own classes against `kafkalog serve`
(the protocol listener) and with engine.aio in-process. Keyed records with headers, a committed and an aborted
transaction, a read_committed group member that commits: both runs return the same records at the same offsets and
leave the same committed offsets."""
from __future__ import annotations

import asyncio

import engine
from engine import TopicPartition

TOPIC = "parity"


async def scenario(producer_class, consumer_class, connect: dict):
    producer = producer_class(transactional_id="parity-tx", **connect)
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(30):
                await producer.send(TOPIC, b"v%d" % i, key=b"k%d" % (i % 7), headers=[("n", b"%d" % i)])
        await producer.begin_transaction()
        for i in range(10):
            await producer.send(TOPIC, b"aborted-%d" % i, key=b"k%d" % i)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(TOPIC, b"last", key=b"k0")
    finally:
        await producer.stop()
    consumer = consumer_class(TOPIC, group_id="parity-group", auto_offset_reset="earliest",
                              isolation_level="read_committed", enable_auto_commit=False, **connect)
    await consumer.start()
    try:
        got = []
        while len(got) < 31:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += [(r.partition, r.offset, r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
                    for records in batch.values() for r in records]
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition(TOPIC, p)) for p in range(3)}
    finally:
        await consumer.stop()
    return sorted(got), committed


def test_aiokafka_against_the_listener_and_engine_aio_in_process_get_the_same_records(tmp_path):
    import aiokafka

    from engine.aio import AIOKafkaConsumer, AIOKafkaProducer

    with engine.open(str(tmp_path / "served")) as served, engine.open(str(tmp_path / "embedded")) as embedded:
        for eng in (served, embedded):
            eng.create_topic(TOPIC, partitions=3)
        listener = served.serve(port=0)
        remote = asyncio.run(scenario(aiokafka.AIOKafkaProducer, aiokafka.AIOKafkaConsumer,
                                      {"bootstrap_servers": listener.bootstrap}))
        local = asyncio.run(scenario(AIOKafkaProducer, AIOKafkaConsumer, {"engine": embedded}))
    assert local == remote
    records, committed = local
    assert [r[3] for r in records if r[3].startswith(b"aborted")] == []
    assert sorted(r[3] for r in records) == sorted([b"v%d" % i for i in range(30)] + [b"last"])
    assert sum(committed.values()) > 31  # past the markers and the aborted records, as the broker counts offsets
