"""Property test: random sequences of append / roll / read / truncate / flush / reopen / retention
against an in-memory model of the log. Each sequence is replayable from its seed
(KAFKALOG_LOG_MODEL_SEEDS sets how many run; a failure names its seed)."""
from __future__ import annotations

import os
import random

import pytest

import engine
from engine.common.clock import ManualClock
from engine.common.errors import OffsetOutOfRangeError
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from tests.log_checks import read_all, verify_index_files, verify_log
from engine.log.unified_log import UnifiedLog as Log

SEEDS = int(os.environ.get("KAFKALOG_LOG_MODEL_SEEDS", "40"))
CONFIG = {"segment.bytes": 6000, "index.interval.bytes": 300, "segment.index.bytes": 96,
          "retention.ms": -1, "file.delete.delay.ms": 0}


class Model:
    """What the log must hold: records as (offset, key, value) and batch boundaries."""

    def __init__(self) -> None:
        self.records: list[tuple] = []
        self.batch_starts: list[int] = []
        self.start = 0
        self.end = 0

    def append(self, values: list[tuple]) -> None:
        self.batch_starts.append(self.end)
        for k, v in values:
            self.records.append((self.end, k, v))
            self.end += 1

    def truncate(self, offset: int) -> None:
        self.records = [r for r in self.records if r[0] < offset]
        self.batch_starts = [b for b in self.batch_starts if b < offset]
        self.end = offset


def _open(path, clock, clean=True, log_start_offset=0) -> Log:
    """Open as the log manager would, with the log start offset its checkpoint holds."""
    return Log(FileSystem(), path, LogConfig.from_dict(CONFIG), clock, clean_shutdown=clean,
               log_start_offset=log_start_offset)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_log_matches_model(seed, tmp_path):
    rng = random.Random(seed)
    clock = ManualClock(1_700_000_000_000)
    path = str(tmp_path / "model-0")
    lg, model = _open(path, clock), Model()
    try:
        for step in range(120):
            op = rng.choices(["append", "roll", "read", "truncate", "flush", "reopen", "crash", "delete"],
                             [50, 5, 15, 6, 6, 4, 4, 4])[0]
            if op == "append":
                values = [(rng.randbytes(rng.randint(0, 8)) if rng.random() < 0.8 else None,
                           rng.randbytes(rng.randint(0, 400))) for _ in range(rng.randint(1, 12))]
                clock.advance(rng.randint(0, 50))
                batch = engine.encode_batch([(k, v, None, clock.time_ms()) for k, v in values],
                                            compression=rng.choice(["none", "none", "gzip", "lz4", "zstd"]))
                info = lg.append_as_leader(batch, leader_epoch=0)
                assert (info.first_offset, info.last_offset) == (model.end, model.end + len(values) - 1)
                model.append(values)
            elif op == "roll":
                lg.roll()
            elif op == "read" and model.end > model.start:
                target = rng.randint(model.start, model.end - 1)
                batches = list(engine.iter_batches(lg.read(target, max_bytes=rng.randint(1, 5000)).records))
                assert batches and batches[0].base_offset <= target <= batches[0].last_offset
                got = [(r.offset, r.key, r.value) for b in batches for r in b.records()]
                assert got == [r for r in model.records if batches[0].base_offset <= r[0] <= batches[-1].last_offset]
            elif op == "truncate" and model.batch_starts:
                target = rng.choice([b for b in model.batch_starts if b >= model.start] or [model.end])
                lg.truncate_to(target)
                model.truncate(target)
            elif op == "flush":
                lg.flush()
                assert lg.recovery_point == model.end
            elif op == "reopen":
                lg.close()
                lg = _open(path, clock, log_start_offset=model.start)
            elif op == "crash":  # a process crash: no close, every write() already in the page cache
                lg = _open(path, clock, clean=False, log_start_offset=model.start)
                assert lg.recovery.bytes_truncated == 0
            elif op == "delete" and model.end > model.start:
                lg.update_high_watermark(model.end)
                target = rng.choice(model.batch_starts[-3:] or [model.end])
                if target >= model.start:
                    lg.delete_records(target)
                    model.start = target
                    lg.delete_old_segments()
                    lg.delete_pending_files()
            assert (lg.log_start_offset, lg.log_end_offset) == (model.start, model.end), (seed, step, op)
        verify_log(lg)
        assert read_all(lg) == [r for r in model.records if r[0] >= model.start]
        if model.start:
            with pytest.raises(OffsetOutOfRangeError):
                lg.read(model.start - 1)
    finally:
        lg.close()
    verify_index_files(path)
