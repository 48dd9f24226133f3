"""kill -9 during a clean: tests/crash/cleaner_kill.py compacts a prepared directory and dies after a seeded
number of file-system operations (anywhere from writing the `.cleaned` segment to the checkpoint). The reopened
directory must hold, for each group of segments the clean rewrites, exactly the records before or after the
clean, and finishing the clean must give exactly the uninterrupted result: no key lost or duplicated.
Two layouts: every segment its own group, and all segments in one group. CI runs 2 x 26 trials;
`make crash` runs KAFKALOG_CLEANER_KILLS per layout."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

import engine
from engine import ManualClock
from tests.crash import cleaner_kill
from tests.crash.children import ROOT
from tests.log_checks import read_log

TRIALS = int(os.environ.get("KAFKALOG_CLEANER_KILLS", "26"))
DEDUPE = 24 * 400  # a small offset map: some cleans take two passes


def _content(path) -> list[tuple[int, bytes, bytes | None]]:
    with engine.open(path, clock=ManualClock(cleaner_kill.NOW), background=False,
                     cleaner_config={"log_cleaner_enable": False}) as e:
        return read_log(e, "t", "read_uncommitted")


def _prepare(path, layout: str, seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock(cleaner_kill.NOW - 60_000)
    with engine.open(path, clock=clock, background=False) as e:
        e.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 1200,
                                    "delete.retention.ms": 1_000})
        plain = e.producer(batch_size=300, linger_ms=0)
        tx = e.producer(transactional_id="tx", batch_size=300, linger_ms=0)
        tx.init_transactions()
        for i in range(rng.randint(250, 400)):
            key = b"k%d" % rng.randrange(60)
            if rng.random() < 0.1:
                tx.begin_transaction()
                for j in range(rng.randint(1, 4)):
                    tx.send("t", key=key + b"-tx%d" % j, value=b"tx-%d" % i)
                tx.commit_transaction() if rng.random() < 0.5 else tx.abort_transaction()
            else:
                plain.send("t", key=key, value=None if rng.random() < 0.15 else b"v%d" % i).get()
            clock.advance(10)
        plain.close()
        tx.close()
        e.log("t", 0).roll()
        if layout == "one-group":
            e.alter_topic_config("t", {"segment.bytes": 1 << 30})


def _run_child(path, kill_after) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.crash.cleaner_kill", str(path), str(kill_after), str(DEDUPE)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _ranges(bases: list[int]) -> list[tuple[int, int]]:
    return list(zip(bases, bases[1:] + [2**63]))


@pytest.mark.parametrize("layout", ["group-per-segment", "one-group"])
@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_clean_killed_anywhere_leaves_the_before_or_after_content(tmp_path, layout, trial):
    seed = trial * 7919 + (layout == "one-group")
    prepared = tmp_path / "prepared"
    _prepare(prepared, layout, seed)
    before = _content(prepared)
    finished = tmp_path / "finished"
    shutil.copytree(prepared, finished)
    done = _run_child(finished, "none")
    assert done.returncode == 0, done.stderr[-3000:]
    steps = int(done.stdout.split()[-1])
    after = _content(finished)
    assert after != before  # the clean did something to interrupt
    bases = sorted(int(f.split(".")[0]) for f in os.listdir(finished / "t-0") if f.endswith(".log"))

    killed = tmp_path / "killed"
    shutil.copytree(prepared, killed)
    kill_at = random.Random(seed).randint(1, steps)
    child = _run_child(killed, kill_at)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    got = _content(killed)
    for lo, hi in _ranges(bases):  # each rewritten group is wholly before or wholly after its swap
        part = [r for r in got if lo <= r[0] < hi]
        assert part in ([r for r in before if lo <= r[0] < hi], [r for r in after if lo <= r[0] < hi]), \
            f"kill after step {kill_at} of {steps}: offsets [{lo}, {hi}) are neither before nor after the clean"
    again = _run_child(killed, "none")  # finishing the clean from what the kill left
    assert again.returncode == 0, again.stderr[-3000:]
    assert _content(killed) == after, f"kill after step {kill_at} of {steps}: the finished clean differs"
