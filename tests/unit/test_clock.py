"""The injected clock: tests drive time, and waiting threads wake when time passes."""
from __future__ import annotations

import threading
import time

import pytest

from engine.common.clock import ManualClock, SystemClock


def test_system_clock_is_wall_time():
    before = int(time.time() * 1000)
    assert before - 5 <= SystemClock().time_ms() <= int(time.time() * 1000) + 5
    event = threading.Event()
    event.set()
    assert SystemClock().wait(event, 10_000) is True


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(1_000)
    assert clock.time_ms() == 1_000
    assert clock.advance(250) == 1_250
    clock.set(2_000)
    assert clock.time_ms() == 2_000
    with pytest.raises(ValueError):
        clock.set(1_999)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_manual_wait_times_out_on_clock_time_not_wall_time():
    clock = ManualClock(0)
    event = threading.Event()
    result = []
    t = threading.Thread(target=lambda: result.append(clock.wait(event, 5_000)))
    t.start()
    time.sleep(0.2)
    assert t.is_alive(), "a manual clock must not time out on its own"
    clock.advance(4_999)
    time.sleep(0.2)
    assert t.is_alive()
    clock.advance(1)
    t.join(5)
    assert result == [False]


def test_manual_wait_returns_when_the_event_is_set():
    clock = ManualClock(0)
    event = threading.Event()
    result = []
    t = threading.Thread(target=lambda: result.append(clock.wait(event, 60_000)))
    t.start()
    event.set()
    clock.wake()
    t.join(5)
    assert result == [True]
