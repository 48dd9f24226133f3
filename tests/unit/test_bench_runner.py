"""The benchmark runner closes what a suite left open once the suite is timed, also when a contender fails, and fails
the run when a suite still leaves an engine's threads running (they would run beside every later suite)."""
from __future__ import annotations

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
