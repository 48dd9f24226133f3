"""Coverage-guided fuzzing in CI: each target of tests/fuzz/coverage.py runs for
KAFKALOG_COVERAGE_FUZZ_RUNS inputs (CI: 200,000 each, 1.8 M in all; `make fuzz` 10x) with a fixed seed,
after replaying every crasher kept under tests/data/fuzz-crashers/. A crash or a disagreement of the twins
fails the run; the fuzzer must also have found coverage beyond its seeds, or it is not fuzzing. On a Python that
atheris has no build for, the targets run under coverage.mutation_fuzz instead (the run says so)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("KAFKALOG_COVERAGE_FUZZ_RUNS", "200000"))
ATHERIS = importlib.util.find_spec("atheris") is not None  # no build for Python 3.10: mutation fuzzing stands in
TARGETS = ["decoder", "offset-checkpoint", "leader-epoch-checkpoint", "partition.metadata", "kafkalog.metadata",
           "snapshot", "index", "timeindex"]


def test_the_target_list_is_the_fuzzers():
    from tests.fuzz import coverage

    assert coverage.TARGETS == sorted(TARGETS, key=lambda t: (t != "decoder", t))


@pytest.mark.parametrize("target", TARGETS)
def test_coverage_guided_fuzzing_finds_no_crash(tmp_path, target):
    env = dict(os.environ, KAFKALOG_FUZZ_CORPUS=str(tmp_path))
    fuzzer = [sys.executable, "-m", "tests.fuzz.coverage", target, f"-runs={RUNS}", "-seed=1", "-print_final_stats=1"]
    # through a shell that forks it: libFuzzer's memory limit reads the peak RSS, which a direct child of this process
    # starts at what this process holds (a long test worker can hold gigabytes); the shell's child starts at the shell's
    run = subprocess.run(["/bin/sh", "-c", '"$@"; exit $?', "sh", *fuzzer], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1200)
    log = run.stderr
    assert run.returncode == 0, log[-4000:]
    # libFuzzer can stop one input past -runs (CI once saw "Done 200001 runs" for 200000): at least RUNS must have run
    ran = re.search(r"^Done (\d+) runs", log, re.M)
    assert ran and int(ran.group(1)) >= RUNS, log[-2000:]
    if not ATHERIS:  # the stand-in measures no coverage; that it ran every input is what it can show
        assert "runs under seeded mutation fuzzing" in log, log[-2000:]
        return
    inited = int(re.search(r"INITED cov: (\d+)", log).group(1))
    done = int(re.search(r"DONE\s+cov: (\d+)", log).group(1))
    assert done > inited, f"{target}: no new coverage beyond the seeds ({inited})"


def test_the_mutation_stand_in_replays_crashers_then_runs_every_mutant(tmp_path, monkeypatch):
    """coverage.mutation_fuzz, which runs the targets where atheris has no build: a crash is kept as `crash-<sha1>`
    and fails the run; the next run replays it first, then as many mutants as asked."""
    from tests.fuzz import coverage

    seen = []

    def crashing(name, data):
        seen.append(data)
        if len(seen) == 50:
            raise ValueError("planted")
    monkeypatch.setattr(coverage, "run_target", crashing)
    with pytest.raises(ValueError, match="planted"):
        coverage.mutation_fuzz("index", 100, 1, tmp_path)
    (kept,) = tmp_path.glob("crash-*")
    assert kept.read_bytes() == seen[-1]
    seen.clear()
    monkeypatch.setattr(coverage, "run_target", lambda name, data: seen.append(data))
    coverage.mutation_fuzz("index", 100, 1, tmp_path)
    assert len(seen) == 101 and seen[0] == kept.read_bytes() and len(set(seen[1:])) > 50
