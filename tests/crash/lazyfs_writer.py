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
       python -m tests.crash.lazyfs_writer count DIR PARTITIONS       (records of topic `durable`)
       python -m tests.crash.lazyfs_writer committed DIR PARTITIONS   (read_committed: one line per record's value)
       python -m tests.crash.lazyfs_writer listed DIR                 (each topic and its partition count)
"""
import sys

import engine
from engine.segments.fs import FileSystem

FLUSHED = {"flush.messages": "1"}


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


def count(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        held = sum(eng.partition("durable", p).log_end_offset for p in range(partitions)) \
            if "durable" in eng.list_topics() else 0
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
            print(name, eng.partitions_for(name))
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
         "committed": committed}[what](where, *numbers)
