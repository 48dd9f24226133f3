"""The checkpoint-file corpus in tests/data/kafka-checkpoints, and what Kafka's own readers make of it.

`python -m tests.broker.checkpoint_corpus` (KAFKA_HOME set) writes the corpus again: the checkpoint files a real
broker (KAFKA_HOME's) has in its data directory at start-up (empty: Kafka creates them before it has anything to
write), while it runs with topics produced to, and after a controlled shutdown; the leader-epoch-checkpoint files
of its partitions; and hand-made files at the edges of the format (`EDGES`). Then Kafka's OffsetCheckpointFile and
LeaderEpochCheckpointFile read every file (tests/broker/java/KafkaCheckpoints.java) and what they read, or that they
refused it, is `expected.jsonl`. `kafka_reads` is that step on its own: `make interop` checks the stored expectations
against Kafka again (tests/broker/test_checkpoint_corpus.py).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from tests.vectors import KAFKA_CHECKPOINTS, OFFSET_CHECKPOINTS, checkpoint_kind

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = str(KAFKA_CHECKPOINTS)
EXPECTED = os.path.join(CORPUS, "expected.jsonl")

# (file name, bytes): the format's edges, each read by Kafka's own class (checkpoint_kind: the name says which) for
# its expected outcome
EDGES: list[tuple[str, bytes]] = [
    ("edge.version-only.offsets", b"0\n"),
    ("edge.version-only-no-newline.offsets", b"0"),
    ("edge.no-entries.offsets", b"0\n0\n"),
    ("edge.no-final-newline.offsets", b"0\n1\nt 0 5"),
    ("edge.crlf.offsets", b"0\r\n2\r\nt 0 5\r\nt 1 6\r\n"),
    ("edge.cr.offsets", b"0\r1\rt 0 5\r"),
    ("edge.tabs-and-spaces.offsets", b"0\n1\nt\t0   5\n"),
    ("edge.trailing-space.offsets", b"0\n1\nt 0 5 \n"),
    ("edge.leading-space.offsets", b"0\n1\n t 0 5\n"),
    ("edge.version-1.offsets", b"1\n0\n"),
    ("edge.version-space.offsets", b"0 \n0\n"),
    ("edge.signs.offsets", b"+0\n+1\nt +0 +5\n"),
    ("edge.fewer-than-count.offsets", b"0\n2\nt 0 5\n"),
    ("edge.more-than-count.offsets", b"0\n0\nt 0 5\n"),
    ("edge.count-no-entries.offsets", b"0\n1\n"),
    ("edge.blank-line-inside.offsets", b"0\n1\n\nt 0 5\n"),
    ("edge.blank-line-at-end.offsets", b"0\n1\nt 0 5\n\n"),
    ("edge.blank-first-line.offsets", b"\n"),
    ("edge.duplicate-partition.offsets", b"0\n2\nt 0 5\nt 0 9\n"),
    ("edge.negative-offset.offsets", b"0\n1\nt 0 -1\n"),
    ("edge.negative-partition.offsets", b"0\n1\nt -1 5\n"),
    ("edge.negative-count.offsets", b"0\n-1\n"),
    ("edge.offset-past-int64.offsets", b"0\n1\nt 0 9223372036854775808\n"),
    ("edge.offset-int64-max.offsets", b"0\n1\nt 0 9223372036854775807\n"),
    ("edge.partition-past-int32.offsets", b"0\n1\nt 2147483648 5\n"),
    ("edge.offset-not-a-number.offsets", b"0\n1\nt 0 x\n"),
    ("edge.offset-underscore.offsets", b"0\n1\nt 0 1_0\n"),
    ("edge.four-fields.offsets", b"0\n1\nt 0 5 6\n"),
    ("edge.two-fields.offsets", b"0\n1\nt 0\n"),
    ("edge.not-utf8.offsets", b"0\n1\n\xff 0 5\n"),
    ("edge.utf8-topic.offsets", "0\n1\nt\u00e9 0 5\n".encode()),
    ("edge.bom.offsets", b"\xef\xbb\xbf0\n0\n"),
    ("edge.many.offsets", ("0\n300\n" + "".join(f"topic.{i % 7}_x-y {i} {i * 1000}\n" for i in range(300))).encode()),
    ("edge.empty.epochs", b""),
    ("edge.no-entries.epochs", b"0\n0\n"),
    ("edge.two.epochs", b"0\n2\n0 0\n3 100\n"),
    ("edge.descending.epochs", b"0\n2\n3 100\n1 50\n"),
    ("edge.three-fields.epochs", b"0\n1\n0 0 0\n"),
    ("edge.negative.epochs", b"0\n1\n-1 -5\n"),
    ("edge.epoch-past-int32.epochs", b"0\n1\n2147483648 0\n"),
    ("edge.count-mismatch.epochs", b"0\n3\n0 0\n"),
    ("edge.crlf.epochs", b"0\r\n1\r\n4\t7\r\n"),
    ("edge.version-2.epochs", b"2\n0\n"),
]


def kafka_classpath(home: str) -> str:
    """The classes and jars of the Kafka installation or broker build at `home`."""
    parts = [os.path.join(home, "classes")] + glob.glob(os.path.join(home, "lib", "*.jar")) + \
        glob.glob(os.path.join(home, "libs", "*.jar"))
    return os.pathsep.join(p for p in parts if os.path.exists(p))


def kafka_java(tmp_path_factory, program: str) -> list[str]:
    """The command that runs tests/broker/java/`program`.java, compiled against KAFKA_HOME's classes (a UsageError
    without KAFKA_HOME)."""
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise pytest.UsageError("make interop needs KAFKA_HOME: a Kafka installation or a broker build folder")
    classpath = kafka_classpath(home)
    out = str(tmp_path_factory.mktemp(program))
    subprocess.run(["javac", "-d", out, "-cp", classpath, os.path.join(HERE, "java", f"{program}.java")], check=True)
    return ["java", "-cp", os.pathsep.join([out, classpath]), program]


def kafka_reads(home: str, names: list[str]) -> list[dict]:
    """What Kafka's readers (KAFKA_HOME's) read from the corpus files `names`, one JSON object each."""
    classpath = kafka_classpath(home)
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["javac", "-d", out, "-cp", classpath, os.path.join(HERE, "java", "KafkaCheckpoints.java")],
                       check=True)
        args = [a for n in names for a in (checkpoint_kind(n), os.path.join(CORPUS, n))]
        done = subprocess.run(["java", "-cp", os.pathsep.join([out, classpath]), "KafkaCheckpoints", *args],
                              capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _live_files(home: str, into: str) -> None:
    """A real broker's checkpoint files at start-up, while it runs and after a controlled shutdown."""
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    from bench.kafka_broker import KafkaBroker

    def keep(stage: str, broker: KafkaBroker) -> None:
        for name in OFFSET_CHECKPOINTS:
            shutil.copy(os.path.join(broker.data, name), os.path.join(into, f"broker-{stage}.{name}"))
        for part in os.listdir(broker.data):
            epochs = os.path.join(broker.data, part, "leader-epoch-checkpoint")
            if stage != "startup" and os.path.exists(epochs):
                shutil.copy(epochs, os.path.join(into, f"broker-{stage}.{part}.leader-epoch-checkpoint"))

    with tempfile.TemporaryDirectory() as work:
        broker = KafkaBroker(home, work).start()
        try:
            keep("startup", broker)
            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            admin.create_topics([NewTopic("ck", 3, 1), NewTopic("ck.two_x", 1, 1,
                                                                topic_configs={"cleanup.policy": "compact"})])
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
            for i in range(300):
                producer.send("ck", key=b"k%d" % (i % 7), value=b"v%d" % i)
                producer.send("ck.two_x", key=b"k%d" % (i % 3), value=b"v")
            producer.flush()
            producer.close()
            admin.delete_records({TopicPartition("ck", 1): 40})  # a log start offset past the first segment's base
            time.sleep(70)  # past the broker's checkpoint intervals (60 s by default)
            keep("running", broker)
        finally:
            broker.stop()
        keep("stopped", broker)


def main() -> None:
    home = os.environ.get("KAFKA_HOME")
    if not home:
        sys.exit("set KAFKA_HOME to a Kafka installation or a broker build folder")
    os.makedirs(CORPUS, exist_ok=True)
    for name in os.listdir(CORPUS):
        if name != "README.md":
            os.remove(os.path.join(CORPUS, name))
    _live_files(home, CORPUS)
    for name, data in EDGES:
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)
    names = sorted(n for n in os.listdir(CORPUS) if n not in ("README.md", "expected.jsonl"))
    with open(EXPECTED, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in kafka_reads(home, names))
    print(f"{len(names)} files read by Kafka into {EXPECTED}")


if __name__ == "__main__":
    main()
