"""The processes of the LazyFS trials (tests/crash/test_lazyfs.py), so that the test's own process never holds a
file on the mount. Each writer prints one line per step it was told is done (a number: records acknowledged,
transactions committed, topics created), flushed at once, so that the test can kill it with SIGKILL at any point and
know what it was promised; the counters print what a new process finds after the power loss.

Usage: python -m tests.crash.lazyfs_writer write DIR PARTITIONS RECORDS [one-syncfs]   (clean close at the end;
           with one-syncfs the engine is told the file system honours syncfs: the behaviour before FUSE was told
           apart, which the trial must be able to catch)
       python -m tests.crash.lazyfs_writer flushed DIR PARTITIONS     (flush.messages=1, acks=all, until killed)
       python -m tests.crash.lazyfs_writer transactions DIR PARTITIONS SIZE   (flush.messages=1, until killed)
       python -m tests.crash.lazyfs_writer topics DIR PARTITIONS      (topics created one after another, until killed)
       python -m tests.crash.lazyfs_writer deleted DIR PARTITIONS TOPICS  (TOPICS made, then deleted one by one)
       python -m tests.crash.lazyfs_writer defaults DIR SEGMENT_BYTES (default flush settings: each line is the
           records below the partition's recovery point, what a roll made durable, until killed)
       python -m tests.crash.lazyfs_writer compacted DIR PARTITIONS KEYS  (rounds of one value per key, each round
           compacted after it is written, flush.messages=1, until killed)
       python -m tests.crash.lazyfs_writer count DIR PARTITIONS       (records of topic `durable`, after the
                                                                     repairs their load made, one a line)
       python -m tests.crash.lazyfs_writer committed DIR PARTITIONS   (read_committed: one line per record's value)
       python -m tests.crash.lazyfs_writer listed DIR                 (each topic, its partitions, its records)
       python -m tests.crash.lazyfs_writer latest DIR PARTITIONS      (each key's latest value: `key value`)
       python -m tests.crash.lazyfs_writer shared DIR PARTITIONS      (a share group's member acknowledging records
           (every seventh rejected) under flush.messages=1; each line the records whose acknowledgement returned)
       python -m tests.crash.lazyfs_writer share-done DIR PARTITIONS  (the records the share group has acknowledged
                                                                     or archived)
"""
import sys

import engine
from engine.segments.fs import FileSystem

FLUSHED = {"flush.messages": "1"}
SHARED_RECORDS = 3000


def write(path: str, partitions: int, records: int, one_syncfs: bool) -> None:
    if one_syncfs:
        FileSystem.syncfs_honoured = lambda self, root: True
    with engine.open(path) as eng:
        eng.create_topic("durable", partitions)
        with eng.producer(acks="all") as producer:
            sent = [producer.send("durable", key=b"%d" % i, value=b"v%d" % i) for i in range(records)]
            producer.flush()
            acked = sum(1 for f in sent if f.get() is not None)
    print(acked, flush=True)


def flushed(path: str, partitions: int) -> None:
    eng = engine.open(path)
    eng.create_topic("durable", partitions, config=FLUSHED)
    producer = eng.producer(acks="all")
    i = 0
    while True:
        producer.send("durable", key=b"%d" % i, value=b"v%d" % i).get()
        i += 1
        print(i, flush=True)


def transactions(path: str, partitions: int, size: int) -> None:
    eng = engine.open(path)
    eng.create_topic("durable", partitions, config=FLUSHED)
    producer = eng.producer(transactional_id="trial")
    producer.init_transactions()
    t = 0
    while True:
        producer.begin_transaction()
        for r in range(size):
            producer.send("durable", key=b"%d" % r, value=b"%d:%d" % (t, r))
        producer.commit_transaction()
        t += 1
        print(t, flush=True)


def topics(path: str, partitions: int) -> None:
    eng = engine.open(path)
    t = 0
    while True:
        eng.create_topic(f"made-{t}", partitions)
        t += 1
        print(t, flush=True)


def deleted(path: str, partitions: int, made: int) -> None:
    eng = engine.open(path)
    for t in range(made):
        eng.create_topic(f"made-{t}", partitions)
        with eng.producer(acks="all") as producer:
            for p in range(partitions):
                producer.send(f"made-{t}", b"%d" % p, partition=p)
    eng.flush()
    print(0, flush=True)
    for t in range(made):
        eng.delete_topic(f"made-{t}")
        print(t + 1, flush=True)
    eng.close()


def defaults(path: str, segment_bytes: int) -> None:
    eng = engine.open(path)
    eng.create_topic("durable", 1, config={"segment.bytes": str(segment_bytes)})
    producer = eng.producer(acks="all")
    log = eng.log("durable", 0)
    while True:
        producer.send("durable", value=b"v" * 100).get()
        print(log.recovery_point - log.log_start_offset, flush=True)


def compacted(path: str, partitions: int, keys: int) -> None:
    eng = engine.open(path)
    eng.create_topic("durable", partitions, config={**FLUSHED, "cleanup.policy": "compact", "segment.bytes": "2048",
                                                    "min.cleanable.dirty.ratio": "0.01"})
    producer = eng.producer(acks="all")
    r = 0
    while True:
        for k in range(keys):
            producer.send("durable", key=b"%d" % k, value=b"%d" % r)
        producer.flush()
        eng.compact("durable")
        r += 1
        print(r, flush=True)


def latest(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        values: dict[bytes, bytes] = {}
        consumer = eng.consumer(consumer_timeout_ms=0)
        consumer.assign([engine.TopicPartition("durable", p) for p in range(partitions)])
        consumer.seek_to_beginning()
        for record in consumer:  # (offset order within a partition: a key's partition holds all its values)
            values[record.key] = record.value
        consumer.close()
    for key, value in sorted(values.items()):
        print(key.decode(), value.decode())
    print("end", flush=True)


def shared(path: str, partitions: int) -> None:
    from engine.clients.share_consumer import AcknowledgeType

    eng = engine.open(path, topic_defaults=FLUSHED)
    eng.create_topic("durable", partitions)
    with eng.producer(acks="all") as producer:
        for i in range(SHARED_RECORDS):
            producer.send("durable", key=b"%d" % i, value=b"v%d" % i)
    eng.alter_group_configs("workers", {"share.auto.offset.reset": "earliest"})
    member = eng.share_consumer("workers", ["durable"], acknowledgement_mode="explicit", max_poll_records=7)
    done = 0
    while True:
        records = member.poll(100)
        for r in records:
            member.acknowledge(r, AcknowledgeType.REJECT if int(r.key) % 7 == 0 else AcknowledgeType.ACCEPT)
        outcome = member.commit_sync()
        assert all(e is None for e in outcome.values()), outcome
        done += len(records)
        print(done, flush=True)


def share_done(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        sg = eng.share_groups
        tid = eng.admin.topic_id_of("durable")
        ends = {p: eng.partition("durable", p).high_watermark for p in range(partitions)}
        lags = {p: sg.lag("workers", (tid, p), end) for p, end in ends.items()}
        print(sum(end - lags[p] for p, end in ends.items() if lags[p] is not None), flush=True)


def count(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        held = sum(eng.partition("durable", p).log_end_offset for p in range(partitions)) \
            if "durable" in eng.list_topics() else 0
        for note in eng.recovery_notes():  # (what loading them had to repair)
            print("repaired:", note, flush=True)
    print(held, flush=True)


def committed(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        if "durable" in eng.list_topics():
            consumer = eng.consumer(isolation_level="read_committed", consumer_timeout_ms=0)
            consumer.assign([engine.TopicPartition("durable", p) for p in range(partitions)])
            consumer.seek_to_beginning()
            for record in consumer:
                print(record.value.decode())
            consumer.close()
    print("end", flush=True)


def listed(path: str) -> None:
    with engine.open(path) as eng:
        for name in eng.list_topics():
            held = sum(p.log_end_offset - p.log_start_offset for p in eng.describe_topic(name).partitions)
            print(name, eng.partitions_for(name), held)
    print("end", flush=True)


if __name__ == "__main__":
    what, where = sys.argv[1], sys.argv[2]
    numbers = [int(a) for a in sys.argv[3:] if a.isdigit()]
    if what == "write":
        write(where, *numbers, sys.argv[5:] == ["one-syncfs"])
    elif what == "listed":
        listed(where)
    else:
        {"flushed": flushed, "transactions": transactions, "topics": topics, "count": count,
         "committed": committed, "deleted": deleted, "defaults": defaults, "compacted": compacted,
         "latest": latest, "shared": shared, "share-done": share_done}[what](where, *numbers)
