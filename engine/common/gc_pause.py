"""Pausing CPython's cyclic garbage collector while many long-lived objects are made at once (opening a directory of
many partitions, creating many partitions, the first use of many partitions by a producer's drain or a consumer's
assignment, each loading its log; never around a wait): each automatic collection of the oldest generation scans
every tracked object, and a build of hundreds of thousands of them triggers one every time the heap has grown by a
quarter, so their cost grows faster than the build. Paused, the build makes no collection; the collector runs again as usual
afterwards (its next full collection scans the new objects once). Reference counting frees memory as always.
State: whether the collector was enabled when the outermost pause began, and how many pauses are in progress.
Byte layout: none. Crash policy: none (memory only). Thread-safety: pauses may overlap across threads; the collector
is enabled again when the last one ends, and only if it was enabled before the first began.
Leaf module: imports nothing from kafkalog.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def gc_paused():
    """Within the block, no automatic collection (see the module docstring)."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()
