"""tests/crash/txn_pipeline.py's consume-transform-produce loop written with engine.aio (a group member's getmany(),
a transactional AIOKafkaProducer, offsets sent to the transaction), as a child for tests/crash/test_aio_kill.py that
kills itself with SIGKILL at a seeded point: between two sends, before the commit, while the coordinator writes
markers, or right after a commit. The test finishes the work in the parent with the same loop."""
from __future__ import annotations

import asyncio
import random
import sys

import engine
from engine.aio import AIOKafkaConsumer, AIOKafkaProducer
from tests.crash.txn_pipeline import GROUP, POINTS, SINK, SOURCE, die, die_during_markers

GROUPS = {"group_min_session_timeout_ms": 1000}  # a member a kill left behind is gone after 2 s


async def run(e, rng: random.Random, kill: tuple[str, int] | None = None) -> int:
    """Move every record of SOURCE to SINK exactly once; `kill` = (point, round) dies there. Returns rounds
    committed."""
    rounds = 0
    async with AIOKafkaProducer(engine=e, transactional_id="aio-pipeline-tx") as producer, \
            AIOKafkaConsumer(SOURCE, engine=e, group_id=GROUP, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             session_timeout_ms=2000, heartbeat_interval_ms=500) as consumer:
        while True:
            records = await consumer.getmany(timeout_ms=500, max_records=rng.randint(1, 25))
            if not records:
                if await _caught_up(e, consumer):
                    return rounds
                continue  # (a member a kill left behind holds partitions until its session expires)
            here = kill[0] if kill and kill[1] == rounds else None
            await producer.begin_transaction()
            sent = 0
            kill_after = min(2, sum(len(rs) for rs in records.values()))
            for rs in records.values():
                for r in rs:
                    await producer.send(SINK, r.value, key=r.key)
                    sent += 1
                    if here == "between-sends" and sent == kill_after:
                        await producer.flush()
                        die()
            await producer.send_offsets_to_transaction(
                {tp: engine.OffsetAndMetadata(rs[-1].offset + 1) for tp, rs in records.items()},
                consumer.group_metadata())
            if here == "before-commit":
                await producer.flush()
                die()
            if here == "during-markers":
                die_during_markers()
            await producer.commit_transaction()
            rounds += 1
            if here == "after-commit":
                die()


async def _caught_up(e, consumer) -> bool:
    """This member holds every partition of the source and has read each to its end."""
    parts = {engine.TopicPartition(SOURCE, p) for p in range(e.partitions_for(SOURCE))}
    if consumer.assignment() != parts:
        return False
    ends = await consumer.end_offsets(parts)
    positions = {tp: await consumer.position(tp) for tp in parts}
    return all(positions[tp] >= ends[tp] for tp in parts)


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    kill = (POINTS[seed % len(POINTS)], rng.randrange(2))  # SOURCE has >= 40 records, a round <= 25: two rounds run
    with engine.open(directory, group_config=GROUPS) as e:
        asyncio.run(run(e, rng, kill))
    sys.stdout.write("FINISHED\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
