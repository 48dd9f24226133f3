"""The benchmark runner closes what a suite left open once the suite is timed, also when a contender fails, and fails
the run when a suite still leaves an engine's threads running (they would run beside every later suite)."""
from __future__ import annotations

import importlib
import os
import pathlib
import statistics
import subprocess
import sys
import threading

import pytest

import engine
from bench.runner import Contender, Workload, run


def _suite(events: list, fail: bool):
    def call():
        events.append("call")
        if fail:
            raise RuntimeError("contender failed")

    def suite():
        return [Workload("g", "w", 1, 1, [Contender("kafkalog", call), Contender("peer", call)],
                         close=lambda: events.append("close"))]
    return suite


def test_a_suite_is_closed_once_after_its_last_timing():
    events: list = []
    doc = run([_suite(events, False)], reps=2, min_time=0.0)
    assert events.count("close") == 1 and events[-1] == "close" and events.count("call") == 6  # warm-up + 2 reps
    assert [c["name"] for c in doc["rows"][0]["contenders"]] == ["kafkalog", "peer"]


def test_a_suite_whose_contender_fails_is_still_closed():
    events: list = []
    with pytest.raises(RuntimeError):
        run([_suite(events, True)], reps=1, min_time=0.0)
    assert events == ["call", "close"]


def _engine_suite(path, closes: bool, opened: list):
    def suite():
        e = engine.open(str(path), brokers=3)
        opened.append(e)
        e.create_topic("t", replication_factor=3)
        batch = engine.encode_batch([(None, b"v", None, 1)])
        return [Workload("g", "w", 1, 1, [Contender("kafkalog", lambda: e.append("t", 0, batch))],
                         close=e.close if closes else None)]
    return suite


def test_a_suite_that_leaves_an_engine_open_fails_the_run(tmp_path):
    opened: list = []
    try:
        with pytest.raises(RuntimeError, match="left threads running: .*kafkalog-replica-fetcher"):
            run([_engine_suite(tmp_path, closes=False, opened=opened)], reps=1, min_time=0.0)
    finally:
        opened[0].close()


def test_a_suite_that_closes_its_engine_passes_and_threads_open_before_it_do_not_count(tmp_path):
    opened: list = []
    alive = set(threading.enumerate())
    with engine.open(str(tmp_path / "before")):  # open before the suite began, as a session around a run is
        doc = run([_engine_suite(tmp_path / "suite", closes=True, opened=opened)], reps=1, min_time=0.0)
    assert doc["rows"][0]["contenders"][0]["name"] == "kafkalog" and opened[0].closed
    assert not [t for t in set(threading.enumerate()) - alive if t.name.startswith("kafkalog-")]


def test_the_ab_table_judges_a_row_by_the_other_trees_spread_widened_by_the_peers_drift():
    """bench.compare_builds: a kafkalog median inside the other tree's rounds is "yes"; outside them by more than the
    peers moved, "slower" or "faster"; by less, "yes"; a peer's own rows are only shown."""
    from bench.compare_builds import table

    def rounds(kafkalog: list[float], peer: list[float]) -> list[dict]:
        return [{"r": {"kafkalog": k, "peer": p}} for k, p in zip(kafkalog, peer)]

    def verdict(other, this) -> str:
        lines = table({"other": rounds(*other), "this": rounds(*this)}, "old").splitlines()
        ours, theirs = lines[2].split("|"), lines[3].split("|")
        assert ours[-3].strip().startswith(f"{statistics.median(t / o for t, o in zip(this[0], other[0])):.3f} (")
        assert theirs[2].strip() == "peer" and theirs[-2].strip() == "(peer)"
        return ours[-2].strip()

    assert verdict(([1.0, 1.2], [5.0, 5.0]), ([1.1, 1.1], [5.0, 5.0])) == "yes"
    assert verdict(([1.0, 1.0], [5.0, 5.0]), ([1.3, 1.3], [5.0, 5.0])) == "**slower**"
    assert verdict(([1.0, 1.0], [5.0, 5.0]), ([0.7, 0.7], [5.0, 5.0])) == "faster"
    assert verdict(([1.0, 1.0], [5.0, 5.0]), ([1.3, 1.3], [6.5, 6.5])) == "yes"  # the machine slowed everything


def test_ab_rounds_are_laid_out_alike_on_both_sides_and_differently_each_round():
    """bench.compare_builds: a round's seed gives both checkouts' children the same environment and heap pattern, and
    another round another one (what each side's spread is to hold); a child lays it out and runs."""
    from bench.compare_builds import layout

    assert layout(3) == layout(3)
    envs = [layout(seed)[0] for seed in range(4)]
    assert len({len(e["KAFKALOG_AB_PAD"]) for e in envs}) == 4
    assert len({tuple(layout(seed)[1]) for seed in range(4)}) == 4
    out = subprocess.run([sys.executable, "-c", "import os; from bench.compare_builds import _lay_out_heap, layout; "
                          "kept = _lay_out_heap(layout(1)[1]); print(len(os.environ['KAFKALOG_AB_PAD']), len(kept))"],
                         env={**os.environ, **envs[1]}, capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(envs[1]["KAFKALOG_AB_PAD"])), str(len(layout(1)[1]) // 2)]


@pytest.mark.parametrize("module", sorted(p.stem for p in pathlib.Path(__file__).parents[2].joinpath("bench").glob("*.py")
                                          if p.stem != "__init__"))
def test_every_benchmark_module_imports(module: str):
    """`make bench-quick` runs only in CI's last step; a name one benchmark imports from another that moved fails here,
    in `make test`, not after half an hour of CI."""
    assert importlib.import_module(f"bench.{module}").__name__ == f"bench.{module}"


def test_instruction_counts_come_one_per_counted_call():
    """bench.compare_builds --instructions: callgrind counts inside each `counted` call of the child and nowhere
    else, one total per call in order (a Python whose `functools.reduce` is not the C function `functools_reduce`
    would give no dumps)."""
    import shutil

    from bench.compare_builds import counted_calls

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    out, totals = counted_calls([sys.executable, "-c", "from bench.compare_builds import counted; sum(range(100_000)); "
                                 "counted(lambda: sum(range(10))); counted(lambda: sum(range(100_000))); print('done')"],
                                os.getcwd())
    assert out.strip() == "done" and len(totals) == 2
    assert 0 < totals[0] < 100_000 < totals[1]  # (the uncounted sum outside them would add ~10 instructions a step)
