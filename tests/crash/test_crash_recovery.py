"""Crashes are normal: a child appending with flush.messages=1 is SIGKILLed at random moments, and
files are torn, truncated and bit-flipped past the last acknowledged (or fsynced) byte through the
fault seam. After reopening, every acknowledged batch is there, no corrupt batch is ever returned,
the LEO is one past the last valid batch, and the indexes are consistent.
KAFKALOG_CRASH_TRIALS sets the SIGKILL trials (CI: 50; `make crash`: 500)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import engine
from engine.common.clock import ManualClock
from engine.log.log_manager import LogManager
from engine.segments.fs import FaultyFileSystem, FileSystem
from engine.segments.log_config import LogConfig
from tests.crash.children import run_until_killed
from tests.log_checks import read_all, verify_index_files, verify_log
from engine.log.unified_log import UnifiedLog as Log

pytestmark = pytest.mark.crash
TRIALS = int(os.environ.get("KAFKALOG_CRASH_TRIALS", "50"))


def _run_and_kill(directory: Path, seed: int, rng: random.Random) -> list[tuple[int, int, int]]:
    lines = run_until_killed("tests.crash.appender", [str(directory), str(seed)], 1, rng.uniform(0.0, 0.4))
    return [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("ACK ")]


def test_sigkill_while_appending_loses_no_acknowledged_batch(tmp_path):
    rng = random.Random(4242)
    for trial in range(TRIALS):
        directory = tmp_path / f"trial{trial}"
        acks = _run_and_kill(directory, trial, rng)
        assert acks, "the child acknowledged nothing before it was killed"
        partition = directory / "crash-0"
        # damage strictly after the last acknowledged batch, found in the files (no clean open in between)
        end = _end_of_batch(partition, acks[-1][0])
        if end is not None:
            _damage_tail_at(partition, end, rng)
        with LogManager(str(directory), background=False) as manager:
            lg = manager.get_log("crash", 0)
            batches = verify_log(lg)
            by_base = {b.base_offset: b for b in batches}
            for first_off, last_off, crc in acks:
                assert first_off in by_base, (trial, first_off)
                assert (by_base[first_off].last_offset, by_base[first_off].crc) == (last_off, crc)
            assert lg.log_end_offset >= acks[-1][1] + 1
            read_all(lg)
        verify_index_files(partition)


def _end_of_batch(partition: Path, base_offset: int) -> int | None:
    """End position of the batch at `base_offset` if it lies in the last segment file, else None."""
    active = sorted(partition.glob("*.log"))[-1]
    try:
        for b in engine.iter_batches(active.read_bytes()):
            if b.base_offset == base_offset:
                return b.position + b.size_in_bytes
    except engine.CorruptRecordError:
        return None  # a torn tail before the batch: it is not in the last file
    return None


def _damage_tail_at(partition: Path, start: int, rng: random.Random) -> None:
    """Tear, truncate or flip bits at or after byte `start` of the active segment."""
    active = sorted(partition.glob("*.log"))[-1]
    size = active.stat().st_size
    kind = rng.choice(["garbage", "truncate", "flip", "none"])
    if kind == "garbage":
        with open(active, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 300)))
    elif kind == "truncate" and size > start:
        os.truncate(active, rng.randint(start, size))
    elif kind == "flip" and size > start:
        with open(active, "r+b") as f:
            pos = rng.randrange(start, size)
            f.seek(pos)
            byte = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))


@pytest.mark.parametrize("seed", range(int(os.environ.get("KAFKALOG_POWER_LOSS_TRIALS", "150"))))
def test_power_loss_keeps_everything_flushed(seed, tmp_path):
    """Unsynced bytes vanish (FaultyFileSystem.lose_unsynced) and the rest past the recovery point is
    damaged; everything below the recovery point survives, and the tail is cut at the last valid batch."""
    rng = random.Random(seed)
    fs = FaultyFileSystem(seed)
    clock = ManualClock()
    config = LogConfig.from_dict({"flush.messages": rng.randint(1, 6), "segment.bytes": rng.choice([3000, 20000]),
                                  "index.interval.bytes": 256})
    path = tmp_path / "power-0"
    lg = Log(fs, str(path), config, clock)
    expected = []
    for _ in range(rng.randint(1, 40)):
        values = [rng.randbytes(rng.randint(0, 200)) for _ in range(rng.randint(1, 8))]
        info = lg.append_as_leader(engine.encode_batch([(None, v, None, clock.time_ms()) for v in values]))
        expected += [(info.first_offset + i, None, v) for i, v in enumerate(values)]
    durable = lg.recovery_point
    fs.lose_unsynced()
    survivors = [s for s in sorted(path.glob("*.log")) if s.stat().st_size]
    if survivors and rng.random() < 0.7:
        active = survivors[-1]
        start = 0
        for b in engine.iter_batches(active.read_bytes()):
            if b.next_offset <= durable:
                start = b.position + b.size_in_bytes
        if active.stat().st_size > start:
            with open(active, "r+b") as f:
                pos = rng.randrange(start, active.stat().st_size)
                f.seek(pos)
                f.write(bytes([rng.randrange(256)]))
    reopened = Log(FileSystem(), str(path), config, clock, recovery_point=0)
    batches = verify_log(reopened)
    records = [(r.offset, r.key, r.value) for b in batches for r in b.records()]
    assert records[:sum(1 for r in expected if r[0] < durable)] == [r for r in expected if r[0] < durable]
    assert records == expected[:len(records)], "a recovered record differs from what was appended"
    assert reopened.log_end_offset == (batches[-1].next_offset if batches else 0)
    reopened.close()
    verify_index_files(path)


def test_failed_and_torn_writes_leave_no_partial_batch(tmp_path):
    """An append whose write fails (or lands torn) raises KafkaStorageError and leaves the log as before."""
    from engine.common.errors import KafkaStorageError

    fs = FaultyFileSystem(1)
    clock = ManualClock()
    lg = Log(fs, str(tmp_path / "torn-0"), LogConfig(), clock)
    good = engine.encode_batch([(None, b"ok", None, 1)])
    lg.append_as_leader(good)
    for tear in (False, True):
        fs.arm("write", tear=tear)
        with pytest.raises(KafkaStorageError) as info:
            lg.append_as_leader(engine.encode_batch([(None, b"x" * 500, None, 2)]))
        assert info.value.file and info.value.position == len(good)
        assert lg.log_end_offset == 1 and lg.active_segment.size == len(good)
    lg.append_as_leader(good)
    assert [r[2] for r in read_all(lg)] == [b"ok", b"ok"]
    lg.close()
