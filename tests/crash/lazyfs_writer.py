"""The processes of the LazyFS trials (tests/crash/test_lazyfs.py), so that the test's own process never holds a
file on the mount: `write` creates a topic of PARTITIONS partitions in DIR, produces RECORDS records with acks=all,
closes cleanly, and prints how many were acknowledged (with `one-syncfs`, the engine is told the file system honours
syncfs: the behaviour before FUSE was told apart, which the trial must be able to catch); `count` opens DIR after the
power loss and prints how many records its topic holds.

Usage: python -m tests.crash.lazyfs_writer write DIR PARTITIONS RECORDS [one-syncfs]
       python -m tests.crash.lazyfs_writer count DIR PARTITIONS
"""
import sys

import engine
from engine.segments.fs import FileSystem


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


def count(path: str, partitions: int) -> None:
    with engine.open(path) as eng:
        held = sum(eng.partition("durable", p).log_end_offset for p in range(partitions)) \
            if "durable" in eng.list_topics() else 0
    print(held, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:] == ["one-syncfs"])
    else:
        count(sys.argv[2], int(sys.argv[3]))
