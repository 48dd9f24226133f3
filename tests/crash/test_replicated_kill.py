"""A whole process with three brokers is killed (SIGKILL) while a producer appends with acks='all' and a thread
fails and restarts brokers (the leader among them). The README's rule for a process kill: every record
acknowledged with acks='all' survives, whatever the flush settings (a killed process leaves its writes in the
page cache). After reopening, every acknowledged record is at its offset once the replicas have caught up, and
the replicas agree byte for byte below the high watermark. KAFKALOG_REPLICATED_KILLS sets the trials (CI: 6;
`make crash`: 60)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import engine
from tests.crash.children import run_until_killed

pytestmark = pytest.mark.crash
TRIALS = int(os.environ.get("KAFKALOG_REPLICATED_KILLS", "6"))


def _run_and_kill(directory: Path, seed: int, delay: float, *mode: str) -> list[tuple[int, int, bytes]]:
    lines = run_until_killed("tests.crash.replicated_producer", [str(directory), str(seed), *mode], 20, delay)
    return [(int(p), int(o), v.encode()) for line in lines for _, p, o, v in [line.split()]]


def _records(part) -> dict[int, bytes]:
    out, offset = {}, part.log_start_offset
    while offset < part.high_watermark:
        for batch in part.fetch(offset, 1 << 20).batches():
            out.update((r.offset, r.value) for r in batch.records())
            offset = batch.next_offset
    return out


def test_sigkill_of_a_replicated_process_loses_no_record_acknowledged_with_acks_all(tmp_path):
    rng = random.Random(1414)
    for trial in range(TRIALS):
        directory = tmp_path / f"trial{trial}"
        acks = _run_and_kill(directory, trial, rng.uniform(0.1, 0.8))
        with engine.open(str(directory), background=False) as e:
            e.replicate()
            for p in range(2):
                d = e.describe_topic("r").partitions[p]
                assert d.leader >= 0 and sorted(d.isr) == [0, 1, 2], (trial, d)
                present = _records(e.partition("r", p))
                for part, offset, value in acks:
                    if part == p:
                        assert present.get(offset) == value, (trial, p, offset)
                replicas = [e._brokers[b].partitions[("r", p)].log for b in range(3)]
                views = [bytes(lg.read(0, 1 << 30, upper_bound=d.high_watermark).records) if d.high_watermark
                         else b"" for lg in replicas]
                assert views[0] == views[1] == views[2], (trial, p)


def test_sigkill_leaves_every_record_acknowledged_with_acks_all_on_every_in_sync_replica(tmp_path):
    """No broker fails, so the followers are linked to the native replica fetcher most of the run: a follower's
    log end counts at the leader only once its bytes are written, so each replica's own log, recovered and not
    yet replicated, holds every acknowledged record."""
    rng = random.Random(1515)
    for trial in range(max(1, TRIALS // 2)):
        directory = tmp_path / f"trial{trial}"
        acks = _run_and_kill(directory, trial, rng.uniform(0.1, 0.6), "steady")
        with engine.open(str(directory), background=False) as e:
            for p in range(2):
                for b in range(3):
                    log = e._brokers[b].partitions[("r", p)].log
                    present = {}
                    offset = log.log_start_offset
                    while offset < log.log_end_offset:
                        for batch in log.read(offset, 1 << 20).batches():
                            present.update((r.offset, r.value) for r in batch.records())
                            offset = batch.next_offset
                    missing = [o for part, o, v in acks if part == p and present.get(o) != v]
                    assert not missing, (trial, p, b, missing[:5])
