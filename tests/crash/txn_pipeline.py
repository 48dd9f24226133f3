"""The seed's consume-transform-produce loop (topic A -> topic B, offsets sent to the transaction), as a child
for tests/crash/test_txn_kill.py that kills itself with SIGKILL at a seeded point: between two sends, before
the commit, while the coordinator writes markers, or right after a commit. The test finishes the work in the
parent with the same loop."""
from __future__ import annotations

import os
import random
import signal
import sys

import engine
from engine import TopicPartition
from engine.transactions import Transactions

SOURCE, SINK, GROUP, PARTITIONS = "A", "B", "pipeline", 2
POINTS = ("between-sends", "before-commit", "during-markers", "after-commit")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_during_markers() -> None:
    """The coordinator's next commit writes one partition's marker, then the process dies."""
    written = Transactions.write_markers

    def one_marker_then_die(self, pid, epoch, coordinator_epoch, partitions, commit):
        written(self, pid, epoch, coordinator_epoch, partitions[:1], commit)
        die()
    Transactions.write_markers = one_marker_then_die


def run(e, rng: random.Random, kill: tuple[str, int] | None = None) -> int:
    """Move every record of A to B exactly once; `kill` = (point, round) dies there. Returns rounds committed."""
    producer = e.producer(transactional_id="pipeline-tx")
    producer.init_transactions()
    consumer = e.consumer(group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest",
                          isolation_level="read_committed")
    consumer.assign([TopicPartition(SOURCE, p) for p in range(PARTITIONS)])
    rounds = 0
    while True:
        records = consumer.poll(max_records=rng.randint(1, 25))
        if not records:
            return rounds
        here = kill[0] if kill and kill[1] == rounds else None
        producer.begin_transaction()
        offsets, sent = {}, 0
        kill_after = min(2, sum(len(rs) for rs in records.values()))
        for tp, rs in records.items():
            for r in rs:
                producer.send(SINK, r.value, key=r.key)
                sent += 1
                if here == "between-sends" and sent == kill_after:
                    producer.flush()
                    die()
            offsets[tp] = engine.OffsetAndMetadata(rs[-1].offset + 1)
        producer.send_offsets_to_transaction(offsets, GROUP)
        if here == "before-commit":
            producer.flush()
            die()
        if here == "during-markers":
            die_during_markers()
        producer.commit_transaction()
        rounds += 1
        sys.stdout.write(f"COMMITTED {rounds}\n")
        sys.stdout.flush()
        if here == "after-commit":
            die()


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    kill = (POINTS[seed % len(POINTS)], rng.randrange(2))  # A has >= 40 records, a round <= 25: two rounds run
    with engine.open(directory) as e:
        run(e, rng, kill)
    sys.stdout.write("FINISHED\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
