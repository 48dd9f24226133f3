"""The benchmark runner closes what a suite left open once the suite is timed, also when a contender fails."""
from __future__ import annotations

import pytest

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
