"""What a leader knows of its followers (engine.replication.replica, both twins): a follower's progress as its fetches
report it, and the high-watermark rule. Random fetch histories go through the native twin and the pure-Python one
side by side and must leave the same fields; the HW each gives is checked against the rule stated set-wise here
(the smallest log end over the leader, the ISR and the caught-up followers outside it, and never below the HW)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.common.clock import ManualClock
from engine.record import twins
from engine.replication import replica as _registers_the_twin  # noqa: F401
from tests.conftest import IMPLEMENTATIONS

LAG_MAX_MS = 100
FOLLOWERS = (1, 2, 3)
# one step: (what, follower, offset, time step)
STEPS = st.lists(st.tuples(st.sampled_from(["fetch", "fetch", "fetch", "reset", "append", "isr", "hw"]),
                           st.sampled_from(FOLLOWERS), st.integers(-1, 40), st.integers(0, 80)),
                 min_size=1, max_size=60)


def _fields(r) -> tuple:
    return r.broker_id, r.log_end_offset, r.last_caught_up_ms, r._last_fetch_leader_leo, r._last_fetch_ms, r.tail_mark, r.parked


def _rule(leader_leo: int, hw: int, remote: dict, isr: frozenset, min_isr: int, now: int) -> int:
    """The HW rule, said with sets: who counts, then the smallest log end among them."""
    if leader_leo <= hw or (remote and len(isr) < min_isr):
        return hw
    counted = [r.log_end_offset for b, r in remote.items()
               if b in isr or (r.log_end_offset >= 0 and now - r.last_caught_up_ms <= LAG_MAX_MS)]
    return max(hw, min([leader_leo, *counted]))


@pytest.mark.skipif(IMPLEMENTATIONS == ["python"], reason="the native twin is not built in this run")
@settings(max_examples=300, deadline=None)
@given(STEPS, st.integers(1, 4))
def test_both_twins_keep_the_same_progress_and_move_the_hw_by_the_rule(steps, min_isr):
    sides = [twins.load("replica", impl) for impl in ("cython", "python")]
    clock = ManualClock(0)
    remotes = [{b: replica(b) for b in FOLLOWERS} for replica, _ in sides]
    leader_leo, hw, isr = 0, 0, frozenset({0, *FOLLOWERS})
    for what, b, offset, step in steps:
        clock.advance(step)
        now = clock.time_ms()
        if what == "append":
            leader_leo += offset + 1
        elif what == "isr":  # the follower leaves the ISR, or joins it
            isr = isr ^ {b}
        for remote in remotes:
            if what == "fetch":
                remote[b].on_fetch(min(max(offset, 0), leader_leo), leader_leo, now)
            elif what == "reset":
                remote[b].reset(now if offset % 2 else 0)
        assert [_fields(r) for r in remotes[0].values()] == [_fields(r) for r in remotes[1].values()]
        assert [r.caught_up(now, LAG_MAX_MS) for r in remotes[0].values()] == \
            [r.caught_up(now, LAG_MAX_MS) for r in remotes[1].values()]
        answers = [rule(leader_leo, hw, remote, isr, min_isr, clock, LAG_MAX_MS)
                   for (_, rule), remote in zip(sides, remotes)]
        assert answers == [_rule(leader_leo, hw, remotes[1], isr, min_isr, now)] * 2
        if what == "hw":
            hw = answers[0]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_leader_alone_follows_its_log_end_and_the_hw_never_goes_down(impl):
    replica, rule = twins.load("replica", impl)
    clock = ManualClock(0)
    assert rule(7, 3, {}, frozenset({0}), 1, clock, LAG_MAX_MS) == 7
    assert rule(2, 3, {}, frozenset({0}), 1, clock, LAG_MAX_MS) == 3
    remote = {1: replica(1)}
    assert rule(7, 3, remote, frozenset({0, 1}), 2, clock, LAG_MAX_MS) == 3  # its log end is not known yet
    remote[1].on_fetch(5, 7, 0)
    assert rule(7, 3, remote, frozenset({0, 1}), 2, clock, LAG_MAX_MS) == 5
    assert rule(7, 3, remote, frozenset({0}), 2, clock, LAG_MAX_MS) == 3  # the ISR below min.insync.replicas


@pytest.mark.skipif(IMPLEMENTATIONS == ["python"], reason="the native twin is not built in this run")
def test_the_native_twin_refuses_what_it_cannot_hold_with_a_typed_error():
    replica, rule = twins.load("replica", "cython")
    with pytest.raises(OverflowError):
        replica(1).on_fetch(2**63, 0, 0)
    with pytest.raises(TypeError):
        rule(7, 3, {1: "not a replica"}, frozenset({0, 1}), 1, ManualClock(0), LAG_MAX_MS)
