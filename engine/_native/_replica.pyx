# cython: language_level=3
"""The native twin of engine.replication.replica (see that module for what a leader knows of each follower, when a
follower counts as caught up, and the high-watermark rule): the same fields, answers and errors, with a follower's
progress in C fields and the rule taken in one call over the leader's followers.
On-disk: nothing. Thread-safety: that module's: the owning partition's lock, and for a linked follower the native
replica fetcher's thread (_replica_fetcher.pyx), which records its fetches on the C fields (`on_fetch`).
"""
from cpython.dict cimport PyDict_Next
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t

cdef int64_t UNKNOWN = -1


cdef class Replica:
    """A follower as its leader knows it: its log end as of its last fetch and when it was last caught up."""

    def __init__(self, int32_t broker_id):
        self.broker_id = broker_id
        self.reset(0)

    @property
    def log_end_offset(self) -> int:
        return self.progress.log_end_offset

    @log_end_offset.setter
    def log_end_offset(self, int64_t value) -> None:
        self.progress.log_end_offset = value

    @property
    def last_caught_up_ms(self) -> int:
        return self.progress.last_caught_up_ms

    @last_caught_up_ms.setter
    def last_caught_up_ms(self, int64_t value) -> None:
        self.progress.last_caught_up_ms = value

    @property
    def _last_fetch_leader_leo(self) -> int:  # (readable for tests, as the twin's are)
        return self.progress.last_fetch_leader_leo

    @property
    def _last_fetch_ms(self) -> int:
        return self.progress.last_fetch_ms

    def reset(self, int64_t last_caught_up_ms) -> None:
        """Forget what the previous leader learned (a new leadership starts knowing nothing of the follower)."""
        self.progress.log_end_offset = UNKNOWN
        self.progress.last_caught_up_ms = last_caught_up_ms
        self.progress.last_fetch_leader_leo = UNKNOWN
        self.progress.last_fetch_ms = 0
        self.tail_mark = None
        self.parked = None

    def on_fetch(self, int64_t fetch_offset, int64_t leader_leo, int64_t now_ms) -> None:
        """A fetch from `fetch_offset` arrived while the leader's log ended at `leader_leo`."""
        on_fetch(&self.progress, fetch_offset, leader_leo, now_ms)

    def caught_up(self, int64_t now_ms, int64_t lag_max_ms) -> bool:
        return now_ms - self.progress.last_caught_up_ms <= lag_max_ms

    def __repr__(self) -> str:
        return f"Replica({self.broker_id}, leo={self.progress.log_end_offset})"


def high_watermark(int64_t leader_leo, int64_t hw, dict remote, isr, Py_ssize_t min_isr, clock,
                   int64_t lag_max_ms) -> int:
    """The HW the leader moves to: see engine.replication.replica.high_watermark."""
    cdef int64_t candidate = leader_leo, leo, now = 0
    cdef bint timed = False
    cdef Py_ssize_t pos = 0
    cdef PyObject *key
    cdef PyObject *value
    cdef Replica r
    if candidate <= hw:
        return hw
    if remote:
        if len(isr) < min_isr:
            return hw
        while PyDict_Next(remote, &pos, &key, &value):
            r = <Replica?><object>value
            leo = r.progress.log_end_offset
            if leo >= candidate:
                continue
            if <object>key not in isr:
                if not timed:
                    now, timed = clock.time_ms(), True
                if leo < 0 or now - r.progress.last_caught_up_ms > lag_max_ms:
                    continue
            candidate = leo
    return candidate if candidate > hw else hw
