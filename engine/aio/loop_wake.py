"""Waking a coroutine from any thread: what the engine tells its waiters (a fetch bound moved, a rebalance began, a
group's answer came in) is a call of `set()`; a LoopWake turns that call into the event loop's own wake-up of the one
coroutine waiting on it, at the cost of one `call_soon_threadsafe` when it comes from another thread and none when
it comes from the loop's.

Byte layout: none. Crash policy: none (memory only). Thread-safety: `set()` from any thread (a closed loop is
ignored: nothing waits any more); `arm()` and `wait()` on the loop's thread only.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading


def _fire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class LoopWake:
    """One waiter's wake-up: `arm()` before looking at what it waits for, `wait()` after finding nothing; a `set()`
    in between (or during the wait) ends the wait."""

    __slots__ = ("_loop", "_thread", "_future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()
        self._future: asyncio.Future | None = None

    def arm(self) -> None:
        self._future = self._loop.create_future()

    def set(self) -> None:
        future = self._future
        if future is None:
            return
        if threading.get_ident() == self._thread:
            _fire(future)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                self._loop.call_soon_threadsafe(_fire, future)

    async def wait(self, timeout_s: float) -> None:
        """Until `set()` (since the last `arm()`) or `timeout_s`; a cancellation propagates with nothing left behind."""
        future = self._future
        if future.done():
            return
        timer = self._loop.call_later(max(0.0, timeout_s), _fire, future)
        try:
            await future
        finally:
            timer.cancel()
