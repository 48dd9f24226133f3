"""The engine's heartbeat thread: every member of every group of an engine heartbeats from one thread, each at its own
interval, a member joining starts no thread, and a member removed is never called again."""
from __future__ import annotations

import threading
import time

import engine
from engine.clients.heartbeat_thread import HeartbeatThread
from engine.common.clock import ManualClock

GROUPS = {"group_min_session_timeout_ms": 10, "group_initial_rebalance_delay_ms": 0}


def _until(condition, what: str, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_each_member_beats_at_its_own_interval_on_the_engines_clock():
    clock = ManualClock()
    start = clock.time_ms()
    hb = HeartbeatThread(clock)
    intervals, added = {"a": 1000, "b": 300, "c": 150}, {"a": 0, "b": 0, "c": 400}
    beats: dict[str, list[int]] = {n: [] for n in intervals}

    def model(now: int, members) -> dict[str, list[int]]:
        """A member added at t beats at t + k * interval (the clock moves in steps that land on each of them)."""
        return {n: [added[n] + k * intervals[n] for k in range(1, 100) if added[n] + k * intervals[n] <= now]
                if n in members else beats[n] for n in intervals}

    def add(name: str) -> None:
        hb.add(name, intervals[name], lambda: beats[name].append(clock.time_ms() - start))

    try:
        add("a")
        add("b")
        for step in range(1, 61):
            if step == 9:  # added at 400, due at 550, before the thread's next wake-up (b's, at 600): it is woken
                add("c")
            now = clock.advance(50) - start
            want = model(now, {"a", "b", "c"} if step >= 9 else {"a", "b"})
            _until(lambda: all(len(beats[n]) >= len(want[n]) for n in beats), f"the beats due by {now} ms")
            assert beats == want
        hb.remove("b")
        for _ in range(20):
            now = clock.advance(50) - start
            want = model(now, {"a", "c"})
            _until(lambda: all(len(beats[n]) >= len(want[n]) for n in beats), "the others' beats after a removal")
            assert beats == want and len(beats["b"]) == 10  # b, removed at 3000 ms, is never called again
    finally:
        hb.close()


def test_removing_a_member_waits_for_its_running_heartbeat_and_a_failing_one_stops_no_other(caplog):
    clock = ManualClock()
    hb = HeartbeatThread(clock)
    release, running, calls = threading.Event(), threading.Event(), []

    def slow():
        calls.append("slow")
        running.set()
        release.wait(20)

    def failing():
        calls.append("failing")
        raise RuntimeError("this member's heartbeat fails")

    try:
        hb.add("slow", 100, slow)
        hb.add("failing", 50, failing)
        hb.add("steady", 100, lambda: calls.append("steady"))
        clock.advance(100)
        _until(running.is_set, "the slow heartbeat to start")
        removed = threading.Event()
        remover = threading.Thread(target=lambda: (hb.remove("slow"), removed.set()))
        remover.start()
        assert not removed.wait(0.2)  # its heartbeat still runs: remove() has not returned
        release.set()
        remover.join(20)
        assert removed.is_set()
        for beat in range(2, 6):
            clock.advance(100)
            _until(lambda: calls.count("steady") >= beat, "the steady member's heartbeats")
        assert calls.count("slow") == 1
        assert calls.count("failing") >= 4  # it failed every time and stayed scheduled; the others went on
        assert [r.levelname for r in caplog.records if "'failing'" in r.getMessage()] == ["ERROR"]  # reported once
    finally:
        release.set()
        hb.close()


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kafkalog-heartbeat")]


def test_a_groups_members_heartbeat_from_one_thread_and_a_joining_member_starts_none(tmp_path):
    with engine.open(tmp_path, group_config=GROUPS) as e:
        e.create_topic("t", partitions=4)
        e.create_topic("u", partitions=2)
        seen: list[str] = []
        beat = e.groups.heartbeat
        e.groups.heartbeat = lambda group, member, *rest: seen.append(member) or beat(group, member, *rest)
        cfg = dict(heartbeat_interval_ms=5, session_timeout_ms=10_000, enable_auto_commit=False)
        members = [e.consumer("t", group_id="g", **cfg) for _ in range(3)] + [e.consumer("u", group_id="h", **cfg)]
        for c in members:
            c.poll(0)
        _until(lambda: [c.poll(0) for c in members] and all(c.assignment() for c in members), "both groups to settle")
        threads = _heartbeat_threads()
        assert len(threads) == 1
        count = threading.active_count()
        late = e.consumer("t", group_id="g", **cfg)
        _until(lambda: [c.poll(0) for c in members + [late]] and late.assignment()
               and sum(len(c.assignment()) for c in members[:3] + [late]) == 4, "the late member's share")
        assert threading.active_count() == count and _heartbeat_threads() == threads  # its join started no thread
        ids = {c.group_metadata().member_id for c in members + [late]}
        seen.clear()
        _until(lambda: ids <= set(seen), "a heartbeat from every member of both groups")
        gone = members[0].group_metadata().member_id
        members[0].close()
        seen.clear()
        _until(lambda: (ids - {gone}) <= set(seen), "the others' heartbeats after a member closed")
        assert gone not in seen
    assert not threads[0].is_alive()  # the engine's close stopped it
