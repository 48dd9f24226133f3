"""A close that always closes: every step of Engine.close (and of a group member's close) runs whatever the one before
raised, the directory is released and nothing of it stays mapped or open, the first error is raised at the end;
a group's rebalance callbacks run outside its coordinator's lock, each whatever the one before raised; the native
fetcher cannot outlive the links it lists."""
from __future__ import annotations

import gc
import os
import threading
import time

import pytest

import engine
from engine.clients.consumer_coordinator import ConsumerRebalanceListener
from engine.common.closing import DeferringLock, Steps
from engine.log.log_manager import CLEAN_SHUTDOWN
from tests.conftest import IMPLEMENTATIONS


def _held_under(path: str) -> tuple[list[str], list[str]]:
    """The mappings and descriptors this process holds on files under `path`."""
    with open("/proc/self/maps") as f:
        maps = [line.split()[-1] for line in f if path in line]
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(path):
            fds.append(target)
    return maps, fds


class Raising(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked) -> None:
        if revoked:
            raise RuntimeError("the application's listener failed")

    def on_partitions_assigned(self, assigned) -> None:
        pass


def test_a_listener_raising_on_close_still_closes_the_engine(tmp_path):
    path = str(tmp_path / "d")
    e = engine.open(path)
    e.create_topic("t", 4, config={"segment.bytes": 4096})
    with e.producer() as p:
        for i in range(400):
            p.send("t", b"%d" % i * 20, partition=i % 4)
    c = e.consumer(group_id="g", auto_offset_reset="earliest")
    c.subscribe(["t"], listener=Raising())
    while not c.assignment():
        c.poll(100)
    other = e.consumer(group_id="h", auto_offset_reset="earliest")
    other.subscribe(["t"])
    while not other.assignment():
        other.poll(100)
    with pytest.raises(RuntimeError, match="listener failed"):
        e.close()  # the first error, raised once every step ran
    assert _held_under(path) == ([], [])
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN))
    with engine.open(path) as again:  # the directory was released, and the groups were left
        assert again.clean_shutdown
        assert {g: again.groups.describe_group(g).members for g in ("g", "h")} == {"g": [], "h": []}


def test_steps_run_past_failures_and_raise_the_first():
    ran, steps = [], Steps()
    for i in range(4):
        steps.run(lambda i=i: ran.append(i) or (1 / 0 if i in (1, 2) else None))
    assert ran == [0, 1, 2, 3] and len(steps.errors) == 2
    with pytest.raises(ZeroDivisionError):
        steps.raise_first()


def test_deferred_callbacks_run_outside_the_lock_each_whatever_the_one_before_raised(caplog):
    lock, seen = DeferringLock(), []

    def held_elsewhere() -> bool:  # another thread can take the lock: nobody holds it
        got = []
        t = threading.Thread(target=lambda: got.append(lock._lock.acquire(timeout=1) and (lock._lock.release() or 1)))
        t.start()
        t.join()
        return not got[0]

    def fails():
        raise RuntimeError("one member's callback")
    with lock:
        with lock:  # re-entered: nothing runs when the inner holder leaves
            lock.defer(lambda: seen.append(("first", held_elsewhere())))
            lock.defer(fails)
        assert seen == []
        lock.defer(lambda: seen.append(("last", held_elsewhere())))
    assert seen == [("first", False), ("last", False)]
    assert "a deferred callback failed" in caplog.text


def test_a_groups_rebalance_notices_reach_every_member_when_one_raises(tmp_path, monkeypatch):
    """A member's `notify` raising (here: the first member's) never keeps the others from hearing of a rebalance."""
    from engine.clients import consumer_coordinator

    real = consumer_coordinator.ConsumerCoordinator._rebalance_began
    calls, armed = [], []

    def began(self):
        calls.append(self)
        if armed and len(calls) == 1:
            raise RuntimeError("a broken member")
        return real(self)
    monkeypatch.setattr(consumer_coordinator.ConsumerCoordinator, "_rebalance_began", began)
    with engine.open(tmp_path) as e:
        e.create_topic("t", 6)
        members = [e.consumer(group_id="g") for _ in range(3)]
        for m in members:
            m.subscribe(["t"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(len(m.assignment()) == 2 for m in members):
            for m in members:
                m.poll(20)
        assert all(len(m.assignment()) == 2 for m in members)
        calls.clear()
        armed.append(True)
        late = e.consumer(group_id="g")
        late.subscribe(["t"])
        late.poll(100)  # joins: the others are told at once, the first of them raising
        assert len(calls) == 3 and len(set(map(id, calls))) == 3
        for m in [*members, late]:
            m.close()


@pytest.mark.skipif("cython" not in IMPLEMENTATIONS, reason="the native core is not built in this run")
def test_a_fetcher_dropped_with_its_links_listed_takes_them_off_its_thread(tmp_path):
    """An engine dropped without close(): its native fetcher, leader and linked follower become garbage together;
    each link leaves the thread's list before its state is freed (ASan in the sanitizer run), descriptors closed."""
    from engine._native import _replica_fetcher
    from engine._native._replica import Replica

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"")
    dst.write_bytes(b"")
    fetcher = _replica_fetcher.Fetcher()
    leader = fetcher.leader(1)
    link = fetcher.link(leader, Replica(1), os.open(src, os.O_RDONLY), os.open(dst, os.O_RDWR), 0, 0, 0, 0)
    for i in range(200):  # the thread works meanwhile: publishes it has no bytes for stop nothing
        leader.publish(0, 0, 0)
    assert link.running
    del fetcher, leader, link
    gc.collect()
    assert _held_under(str(tmp_path)) == ([], [])


def test_an_open_that_fails_after_starting_its_fetchers_leaves_no_thread_and_no_lock(tmp_path, monkeypatch):
    """Engine.__init__ fails after its replica fetchers (and the native one) started: every thread stops, the
    directory is released, nothing of it stays open."""
    from engine.admin_manager import AdminManager

    path = str(tmp_path / "d")
    with engine.open(path, brokers=2) as e:
        e.create_topic("t", 2, replication_factor=2)
    before = set(os.listdir("/proc/self/task"))  # this process's threads, native ones included
    real_save = AdminManager.save

    def failing_save(self):
        if self.replicas.native_fetcher is not None or any(b._fetcher is not None for b in self.brokers.values()):
            raise engine.KafkaStorageError("the catalogue cannot be written", file=path)
        return real_save(self)
    monkeypatch.setattr(AdminManager, "save", failing_save)
    with pytest.raises(engine.KafkaStorageError, match="catalogue"):
        engine.open(path)
    monkeypatch.undo()
    assert not set(os.listdir("/proc/self/task")) - before  # none of those the failed open started is left
    assert _held_under(path) == ([], [])
    with engine.open(path) as again:
        assert again.list_topics() == ["t"]


def test_a_client_made_while_the_engine_closes_is_closed_too(tmp_path, monkeypatch):
    """A producer made as close() runs: registered after close took its list of clients, or refused once the engine
    is closed; either way its sender thread stops, and the refused one raises IllegalStateError."""
    from engine.clients.producer import Producer

    e = engine.open(tmp_path)
    made = []
    real_close = Producer.close

    def close_and_make(self, *args, **kwargs):  # the first client's close makes another, as a busy thread would
        real_close(self, *args, **kwargs)
        if not made:
            made.append(e.producer())
    monkeypatch.setattr(Producer, "close", close_and_make)
    e.producer()
    e.close()
    assert made and made[0]._thread.join(10) is None and not made[0]._thread.is_alive()
    with pytest.raises(engine.IllegalStateError):
        e.producer()
    assert not [t.name for t in threading.enumerate() if t.name == "kafkalog-producer-sender" and t.is_alive()]
