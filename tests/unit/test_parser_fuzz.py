"""Mutation fuzzing of every parser of the files beside the segments: offset checkpoints, the
leader-epoch checkpoint, `partition.metadata`, `kafkalog.metadata`, producer `.snapshot` files and the
entries of `.index` / `.timeindex` files. Valid files (written by our writers and taken from Kafka's
vectors) are bit-flipped, truncated, spliced and replaced; each parse must return or raise a typed
KafkaError, never anything else. KAFKALOG_PARSER_FUZZ_CASES sets the count (CI: 200,000; `make fuzz`:
2,000,000); with the decoder fuzzer's 800,000 that is over a million inputs in CI."""
from __future__ import annotations

import os
import random

from engine import metadata
from engine.common.errors import CorruptIndexError, KafkaError
from engine.segments import leader_epoch_checkpoint, offset_checkpoint, partition_metadata
from engine.segments.offset_index import OffsetIndex
from engine.segments.time_index import TimeIndex
from tests import vectors
from engine.log import producer_snapshot

CASES = int(os.environ.get("KAFKALOG_PARSER_FUZZ_CASES", "200000"))


def _index(cls, data: bytes):
    """The entry check an index opened from disk gets (segments.index.MmapIndex.validate)."""
    usable = len(data) - len(data) % cls.ENTRY.size
    problem = cls.check_entries(cls.ENTRY.iter_unpack(data[:usable]), 1 << 20)
    if problem:
        raise CorruptIndexError(problem)


PARSERS = {
    "offset-checkpoint": offset_checkpoint.parse,
    "leader-epoch-checkpoint": leader_epoch_checkpoint.parse,
    "partition.metadata": partition_metadata.parse,
    "kafkalog.metadata": metadata.parse,
    "snapshot": producer_snapshot.decode,
    "index": lambda d: _index(OffsetIndex, d),
    "timeindex": lambda d: _index(TimeIndex, d),
}


def _seeds() -> dict[str, list[bytes]]:
    seeds: dict[str, list[bytes]] = {k: [] for k in PARSERS}
    seeds["offset-checkpoint"].append(offset_checkpoint.render({("a", 0): 5, ("b.c", 12): 2**40}))
    seeds["leader-epoch-checkpoint"].append(leader_epoch_checkpoint.render([(0, 0), (3, 17), (9, 2**33)]))
    seeds["partition.metadata"].append(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    cat = metadata.Catalogue({"t": metadata.TopicRecord("AAAAAAAAAAAAAAAAAAAAAQ", 3, {"retention.ms": "5"})}, 7)
    seeds["kafkalog.metadata"].append(metadata.render(cat))
    seeds["snapshot"].append(producer_snapshot.encode([producer_snapshot.ProducerSnapshotEntry(1, 2, 3, 4, 5, 6)]))
    for path in vectors.KAFKA_WRITTEN.rglob("*"):
        kind = {".index": "index", ".timeindex": "timeindex", ".snapshot": "snapshot"}.get(path.suffix)
        if path.name in ("leader-epoch-checkpoint", "partition.metadata"):
            kind = path.name
        elif "offset-checkpoint" in path.name:
            kind = "offset-checkpoint"
        if kind and path.is_file() and path.stat().st_size < 1 << 16:
            seeds[kind].append(path.read_bytes())
    return seeds


def _mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    buf = bytearray(data)
    op = rng.randrange(6)
    if op == 0 and buf:
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del buf[rng.randrange(len(buf) + 1):]
    elif op == 2:
        at = rng.randrange(len(buf) + 1)
        buf[at:at] = rng.choice([b"\n", b" ", b"-", b"9" * 20, b"\xff", b"\x00", rng.randbytes(4), b"{", b"[]"])
    elif op == 3 and buf:
        at = rng.randrange(len(buf))
        buf[at] = rng.choice(b"0123456789 \n-:{}[]\",")
    elif op == 4:
        buf += rng.choice(others)
    else:
        buf = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(buf)


def test_every_parser_returns_or_raises_typed():
    seeds = _seeds()
    assert all(seeds.values()), {k: len(v) for k, v in seeds.items()}
    rng = random.Random(int(os.environ.get("KAFKALOG_FUZZ_SEED", "20261123")))
    kinds = sorted(PARSERS)
    outcomes = {k: [0, 0] for k in kinds}
    for _ in range(CASES):
        kind = rng.choice(kinds)
        data = _mutate(rng, rng.choice(seeds[kind]), seeds[kind])
        try:
            PARSERS[kind](data)
            outcomes[kind][0] += 1
        except KafkaError:
            outcomes[kind][1] += 1
    # every parser must have both accepted and refused something, or the fuzzer tests nothing
    assert all(ok and bad for ok, bad in outcomes.values()), outcomes
