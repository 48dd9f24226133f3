"""What a partition's leader knows of one follower replica (Kafka's Replica): its log end offset as of its
last fetch, and when it was last caught up, which decides ISR membership (`replica.lag.time.max.ms`).

A follower is caught up at a fetch when it asked from the leader's log end, or from at least the log end the
leader had at its previous fetch (it then was caught up as of that previous fetch): Kafka's
`updateFetchStateOrThrow`.
The high watermark is the smallest log end over the ISR and over the followers outside it that are caught up (they
are about to rejoin), once that is above the HW; it never moves while the ISR is smaller than min(min.insync.replicas,
replicas), and never goes down (Kafka's maybeIncrementLeaderHW): `high_watermark`.

This module is the pure-Python twin; the native one (engine._native._replica) keeps a follower's progress in C fields
and takes the rule in one call, with the same answers. They are the twin "replica" of
engine.record.twins.
On-disk: nothing (the leader rebuilds this from the next fetches after a restart or a leader change).
Thread-safety: changed only under the owning partition's lock, but for a follower linked to the native replica
fetcher, whose progress that fetcher's thread records (through the native twin's C fields).
"""
from __future__ import annotations

from typing import Callable

from engine.common.clock import Clock
from engine.record import twins

UNKNOWN = -1


class Replica:
    __slots__ = ("broker_id", "log_end_offset", "last_caught_up_ms", "_last_fetch_leader_leo", "_last_fetch_ms",
                 "tail_mark", "parked")

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.reset(0)

    def reset(self, last_caught_up_ms: int) -> None:
        """Forget what the previous leader learned (a new leadership starts knowing nothing of the follower)."""
        self.log_end_offset = UNKNOWN
        self.last_caught_up_ms = last_caught_up_ms
        self._last_fetch_leader_leo = UNKNOWN
        self._last_fetch_ms = 0
        self.tail_mark: tuple[int, int, int] | None = None  # where the last fetch served up to: the log's tail()
        # a fetch the leader recorded and answered with no records, still waiting for them (as Kafka parks it): its
        # (fetch offset, last fetched epoch, leader epoch)
        self.parked: tuple[int, int, int | None] | None = None

    def on_fetch(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A fetch from `fetch_offset` arrived while the leader's log ended at `leader_leo`."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self._last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self._last_fetch_ms)
        self.log_end_offset = fetch_offset
        self._last_fetch_leader_leo, self._last_fetch_ms = leader_leo, now_ms

    def caught_up(self, now_ms: int, lag_max_ms: int) -> bool:
        return now_ms - self.last_caught_up_ms <= lag_max_ms

    def __repr__(self) -> str:
        return f"Replica({self.broker_id}, leo={self.log_end_offset})"


def high_watermark(leader_leo: int, hw: int, remote: dict[int, Replica], isr: frozenset, min_isr: int, clock: Clock,
                   lag_max_ms: int) -> int:
    """The HW a leader whose log ends at `leader_leo` moves to from `hw`, given its followers (`remote`, by broker
    id), its ISR and min(min.insync.replicas, replicas): `hw` itself when the HW does not move."""
    candidate = leader_leo
    if candidate <= hw:
        return hw
    if remote:
        if len(isr) < min_isr:
            return hw
        now = None
        for b, r in remote.items():
            leo = r.log_end_offset
            if leo >= candidate:
                continue
            if b not in isr:
                if now is None:
                    now = clock.time_ms()
                if leo < 0 or not r.caught_up(now, lag_max_ms):
                    continue
            candidate = leo
    return candidate if candidate > hw else hw


def _native() -> tuple[type, Callable[..., int]]:
    from engine._native import _replica
    return _replica.Replica, _replica.high_watermark


twins.register("replica", python=lambda: (Replica, high_watermark), native=_native)  # (Replica, high_watermark)
