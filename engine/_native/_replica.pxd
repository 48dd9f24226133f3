# cython: language_level=3
"""The native Replica (see _replica.pyx): its progress fields as a C struct, so the native replica fetcher
(_replica_fetcher.pyx) records a follower's fetches without the GIL."""
from libc.stdint cimport int32_t, int64_t


cdef struct Progress:
    int64_t log_end_offset, last_caught_up_ms, last_fetch_leader_leo, last_fetch_ms


cdef inline void on_fetch(Progress *p, int64_t fetch_offset, int64_t leader_leo, int64_t now_ms) noexcept nogil:
    """Replica.on_fetch on the fields (see engine.replication.replica)."""
    if fetch_offset >= leader_leo:
        if now_ms > p.last_caught_up_ms:
            p.last_caught_up_ms = now_ms
    elif fetch_offset >= p.last_fetch_leader_leo >= 0 and p.last_fetch_ms > p.last_caught_up_ms:
        p.last_caught_up_ms = p.last_fetch_ms
    p.log_end_offset = fetch_offset
    p.last_fetch_leader_leo, p.last_fetch_ms = leader_leo, now_ms


cdef class Replica:
    cdef public int32_t broker_id
    cdef Progress progress
    cdef public object tail_mark, parked
