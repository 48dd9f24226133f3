"""The segment layer's lock (segments.fs.new_lock): the native one (engine._native._lock) behaves as threading's
RLock and Lock do, which are the twin's and the model here, for every use kafkalog makes of them: nested holds,
non-blocking attempts, releases by the wrong thread, and mutual exclusion while waiters let the GIL go."""
from __future__ import annotations

import threading

import pytest

from tests.conftest import IMPLEMENTATIONS

KINDS = [(impl, reentrant) for impl in IMPLEMENTATIONS for reentrant in (True, False)]


def _make(impl: str, reentrant: bool):
    if impl == "python":
        return threading.RLock() if reentrant else threading.Lock()
    from engine._native._lock import Lock
    return Lock(reentrant)


def _in_thread(fn):
    """fn's result, run in another thread (its exception type when it raises)."""
    out = []

    def run():
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - the type is the answer
            out.append(type(exc))
    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive()
    return out[0]


def _story(lock, reentrant: bool) -> list:
    """What a lock answers through a fixed sequence of uses, from this thread and another."""
    got = [lock.acquire(), _in_thread(lambda: lock.acquire(blocking=False))]
    got.append(lock.acquire(blocking=False))  # a reentrant lock's holder takes it again; a plain lock refuses
    if got[-1]:
        lock.release()
    got.append(_in_thread(lock.release) if reentrant else "skip")  # only its holder may release a reentrant lock
    lock.release()
    got.append(_in_thread(lambda: lock.acquire(blocking=False) and lock.release() is None))
    try:
        lock.release()
        got.append("released")
    except RuntimeError:
        got.append(RuntimeError)
    with lock:
        got.append(_in_thread(lambda: lock.acquire(blocking=False)))
    got.append(_in_thread(lambda: lock.acquire(False) and (lock.release() or True)))
    return got


@pytest.mark.parametrize("reentrant", [True, False])
def test_the_native_lock_answers_as_threadings_does(reentrant):
    model = _story(_make("python", reentrant), reentrant)
    assert model[:3] == [True, False, reentrant]  # the model is what threading documents
    for impl in IMPLEMENTATIONS:
        assert _story(_make(impl, reentrant), reentrant) == model, impl


@pytest.mark.parametrize("impl,reentrant", KINDS)
def test_holders_exclude_each_other_and_waiters_let_the_gil_go(impl, reentrant):
    """Threads add to a shared counter in two steps with a thread switch between them; every addition survives.
    A waiter that kept the GIL would stop the holder forever (the joins would time out)."""
    lock, total, rounds = _make(impl, reentrant), [0], 300
    switch = threading.Event()

    def work():
        for _ in range(rounds):
            with lock:
                seen = total[0]
                switch.wait(0.0001)  # lets the GIL go while holding the lock
                total[0] = seen + 1
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert total[0] == 4 * rounds


@pytest.mark.parametrize("impl,reentrant", KINDS)
def test_a_timeout_is_refused_by_the_native_lock_not_ignored(impl, reentrant):
    """kafkalog never acquires with a timeout; the native lock says so rather than wait forever."""
    lock = _make(impl, reentrant)
    if impl == "python":
        assert lock.acquire(timeout=1)
        lock.release()
    else:
        with pytest.raises(ValueError, match="timeout is not supported"):
            lock.acquire(timeout=1)
    assert lock.acquire(blocking=False)
    lock.release()
