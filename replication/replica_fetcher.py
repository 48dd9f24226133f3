"""A follower broker's fetcher (Kafka's ReplicaFetcherThread and AbstractFetcherThread), in process: for each
partition it follows it fetches from its own log end at the leader, appends the leader's batches unchanged
(offsets, epochs and producer ids as they are), and sets its high watermark to min(leader HW, own log end).

Truncation is by leader epoch, never by high watermark (KIP-101, KIP-279): after a leader change or a restart
the follower asks the leader for the end offset of its latest epoch (OffsetsForLeaderEpoch) and truncates to
min(leader's end, its own end for that epoch, its log end); when the leader answers with an older epoch the
follower does not have, it truncates to where its own largest epoch below that one ends and asks again. A
fetch that finds the logs diverged (KIP-320) carries the epoch and end offset to truncate to the same way.
The HW is the fallback only when the leader knows no epoch at all.

In the steady state a follower is linked to the engine's native replica fetcher (engine._native._replica_fetcher):
after a round that left the follower's log equal to the leader's (same log end, active segment of the same base and
size), in the leader's epoch, in the ISR, on a topic that is not compacted and sets no `flush.messages`, its next
rounds run on the native thread without the GIL: the leader's new bytes copied to the follower's `.log`, checked as
a follower append checks them, and its log end recorded at the leader (`Link`). What such a round does not do waits
for the Python side: the follower's indexes, LEO and producer state are brought up to what the link wrote by
`UnifiedLog.account_linked` (at its next fetch here, at most SETTLE_MS after the rounds of what the leader published,
at `describe_topic`, and before the partition changes role), which the HW then follows. A link stops before a batch
its rounds may not append (a marker, a roll, another epoch, a failed check, read or write) or when the leadership
goes; the follower's next fetch here unlinks it and runs a Python round, and links it again once the logs agree.
The native fetcher runs on an engine with the system clock and a plain file system (`native_fetcher`), else every
round is Python's.
On-disk: nothing of its own (the follower log's files and checkpoints).
Thread-safety: `fetch_once` holds the follower partition's `fetch_lock`: the broker's fetcher thread and a thread
waiting for acks='all' (which runs rounds itself, see Engine) never fetch for the same follower at once. A link is
made holding the follower's and the leader's partition locks, so a role change (which unlinks) cannot slip between
the checks and the link; a linked follower's log is written by the native thread only, and its state changed by the
Python side only through `account_linked`, under the log's lock.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, NamedTuple

from engine.common.clock import Clock, SystemClock
from engine.common.errors import InvalidOffsetError
from engine.record import batch_format as bf
from engine.record import codec
from engine.replication.partition import FollowerFetch, Partition
from engine.segments import segment_appender
from engine.segments.fs import FileSystem
from engine.segments.log_config import LONG_MAX

MAX_FETCH_BYTES = 1 << 20
SETTLE_MS = 5  # how long a linked follower's catch-up waits for the native rounds of what the leader published
log = logging.getLogger("kafkalog.replica_fetcher")


def native_fetcher(fs: FileSystem, clock: Clock):
    """The native replica fetcher for an engine on this file system and clock (its thread started), or None when
    it cannot run: the pure-Python twin is loaded, the file system does its own writes (fault injection), or the
    clock is not the system clock (its thread reads the wall clock, as SystemClock does)."""
    if codec.IMPL != "cython" or not fs.direct_writes() or type(clock) is not SystemClock:
        return None
    from engine._native import _replica_fetcher
    return _replica_fetcher.Fetcher()


def linkable(follower: Partition, leader: Partition) -> bool:
    """Whether the native rounds may append what the leader appends next to `follower`: the follower is in the
    leader's epoch with the same latest epoch in its log, the topic is not compacted, `flush.messages` is not
    set, and the active segment's indexes can never fill before it is full (the roll the leader makes is the
    follower's roll too; the native rounds stop there)."""
    log, config = follower.log, follower.log.config
    entries = config.segment_bytes // (config.index_interval_bytes + 1) + 2
    return (follower.leader_epoch == leader.leader_epoch == log.leader_epochs.latest_epoch
            and not follower.truncation_pending and not config.compact and config.flush_messages == LONG_MAX
            and entries < config.segment_index_bytes // 12
            and type(log.active_segment.appender) is segment_appender.selected)


def _descriptor(fs: FileSystem, path: str, mode: str) -> int:
    """A descriptor of its own for `path`, opened through the file system (the link closes it)."""
    with fs.open(path, mode) as f:
        return os.dup(f.fileno())


class PendingFetch(NamedTuple):
    follower: Partition
    leader: Partition
    answer: FollowerFetch


class ReplicaFetcher:
    def __init__(self, broker_id: int, leader_of: Callable[[Partition], Partition | None],
                 max_bytes: int = MAX_FETCH_BYTES, native=None) -> None:
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.max_bytes = max_bytes
        self.native = native  # the engine's native fetcher (engine._native._replica_fetcher.Fetcher), or None

    def fetch_once(self, follower: Partition, blocking: bool = True, send_next: bool = False) -> int:
        """One fetch round for `follower` (truncating first if its leadership changed); the bytes appended.
        Rounds for one follower never overlap; with blocking=False a round already running means none here.
        With send_next, a round that appended sends its next fetch at once, answered before anything is read
        (the leader learns the new log end, the follower the HW, with no second read)."""
        if not follower.fetch_lock.acquire(blocking):
            return 0
        try:
            link = follower.link
            if link is not None:
                if link.running:
                    self.catch_up(follower)
                    return 0
                follower.unlink()  # it stopped (see Link.reason): this round is Python's
            pending = self.send(follower)
            if pending is None:
                return 0
            appended = self.complete(pending, follow=not send_next)
            if send_next and pending.answer.diverging_epoch is None:
                got = None
                if appended:
                    latest = follower.log.leader_epochs.latest_epoch
                    got = pending.leader.follower_log_end(self.broker_id, follower.log.log_end_offset,
                                                          -1 if latest is None else latest, follower.leader_epoch)
                # no next request (nothing appended, or it found the logs diverged): this answer's HW
                self.follow_high_watermark(follower, *(got or self._answered(pending)))
            if self.native is not None and pending.answer.diverging_epoch is None:
                self._maybe_link(follower, pending.leader)
            return appended
        finally:
            follower.fetch_lock.release()

    def catch_up(self, follower: Partition) -> None:
        """A linked follower's log takes what its link wrote (waiting a little for the rounds of what the leader
        published), the leader's HW moves by the rule, and the follower follows it."""
        link = follower.link
        if link is None:  # (its role changed meanwhile, which unlinked it)
            return
        link.settle(SETTLE_MS)
        follower.take_linked()
        leader = self.leader_of(follower)
        if leader is not None and leader.is_leader:
            leader.settle_high_watermark()
            self.follow_high_watermark(follower, leader.log.high_watermark, leader.log.log_start_offset)

    def _maybe_link(self, follower: Partition, leader: Partition) -> None:
        """Hand a follower's fetches to the native fetcher when its log is the leader's (same log end, active
        segment of the same base and size) and nothing its rounds cannot do is due: see `linkable`."""
        if follower.link is not None or not linkable(follower, leader) or len(leader.remote) > self.native.max_followers:
            return
        with follower._lock, leader._lock:  # (its role cannot change meanwhile: that would unlink a link not yet made)
            if follower.link is not None or follower.leader_id != leader.broker_id or not linkable(follower, leader):
                return
            replica = leader.remote.get(self.broker_id)
            log, leader_log = follower.log, leader.log
            seg, leader_seg = log.active_segment, leader_log.active_segment
            if (not leader.is_leader or replica is None or self.broker_id not in leader.isr
                    or log.log_end_offset != leader_log.log_end_offset or seg.base_offset != leader_seg.base_offset
                    or seg.size != leader_seg.size or not seg.size):
                return
            if leader.links is None:
                leader.links = self.native.leader(len(leader.remote))
            src = _descriptor(leader_log.fs, leader_seg.log_path, "rb")
            dst = _descriptor(log.fs, seg.log_path, "ab")
            if os.fstat(dst).st_size != seg.size:  # bytes past the follower's end (a failed write not cut yet)
                os.close(src)
                os.close(dst)
                return
            follower.link = self.native.link(leader.links, replica, src, dst, seg.base_offset, seg.size,
                                             log.log_end_offset, leader.leader_epoch)
            replica.parked = replica.tail_mark = None  # its next Python fetch, after the link, starts afresh
            leader.settle_high_watermark()  # (the link recorded the follower's log end, as its next fetch would)

    def send(self, follower: Partition) -> PendingFetch | None:
        """The request half of a fetch: the leader records the follower's log end (which may move the HW) and
        reads the records; None when there is no leader to fetch from."""
        leader = self.leader_of(follower)
        if leader is None or not leader.is_leader or follower.is_leader or follower.leader_id is None:
            return None  # (leader_id None: the partition went offline, its broker died or dropped it)
        log = follower.log
        if follower.truncation_pending:
            self.truncate(follower, leader)
            follower.truncation_pending = False
        if self._nothing_to_fetch(follower, leader):
            return None
        latest = log.leader_epochs.latest_epoch
        got = leader.fetch_for_follower(self.broker_id, log.log_end_offset, -1 if latest is None else latest,
                                        self.max_bytes, leader_epoch=follower.leader_epoch)
        return PendingFetch(follower, leader, got)

    def _nothing_to_fetch(self, follower: Partition, leader: Partition) -> bool:
        """A fetch now would change nothing: no new records, no new HW, the leader already knows this
        follower's log end, and it counted the follower caught up within half replica.lag.time.max.ms (an idle
        follower still fetches often enough to stay in the ISR)."""
        seen = leader.remote.get(self.broker_id)
        leo = follower.log.log_end_offset
        return (seen is not None and seen.log_end_offset == leo == leader.log.log_end_offset
                and follower.log.high_watermark == leader.log.high_watermark
                and leader.clock.time_ms() - seen.last_caught_up_ms < leader.lag_max_ms // 2)

    def complete(self, pending: PendingFetch, follow: bool = True) -> int:
        """The response half: as with a fetch Kafka answers when it completes, the HW it carries is the
        leader's as of now (other followers' fetches since may have raised it); the bytes appended. With
        follow=False the caller takes the HW (from the answer to the next request it sends at once)."""
        follower, _, got = pending
        log = follower.log
        if got.diverging_epoch is not None:
            self._truncate_towards(follower, *got.diverging_epoch)
            return 0
        appended = 0
        if got.records is not None:
            data = self._from_log_end(got.records, log.log_end_offset, log.dir)
            if data:
                log.append_as_follower(data)
                appended = len(data)
        if follow:
            self.follow_high_watermark(follower, *self._answered(pending))
        return appended

    @staticmethod
    def _answered(pending: PendingFetch) -> tuple[int, int]:
        """The (HW, log start) a fetch's answer carries when it completes: the leader's HW as of now."""
        answer = pending.answer
        return max(answer.high_watermark, pending.leader.log.high_watermark), answer.log_start_offset

    @staticmethod
    def follow_high_watermark(follower: Partition, leader_hw: int, leader_log_start: int) -> None:
        """HW = min(leader HW, own log end), never lowered by a fetch; the log start follows the leader's."""
        log = follower.log
        hw = min(leader_hw, log.log_end_offset)
        if hw > log.high_watermark:
            log.update_high_watermark(hw)
        if log.log_start_offset < leader_log_start <= log.high_watermark:
            log.delete_records(leader_log_start)

    @staticmethod
    def _from_log_end(records, leo: int, source: str) -> memoryview:
        """The fetched bytes from the first batch at or after the follower's log end (a fetch view may begin at an
        earlier batch of the same segment). A batch may start above the log end: on a compacted topic the leader's
        cleaner removes whole batches, and a follower appends across the gap, as Kafka's does (only offsets going
        back are an error); a batch that straddles the log end means the logs diverged."""
        view = records.records
        if view.nbytes >= 8 and bf.INT64.unpack_from(view)[0] == leo:
            return view  # the read began at the follower's log end (a tail read: the usual case)
        for batch in records.batches(source):
            if batch.base_offset >= leo:
                return view[batch.position:]  # positions count from the view's start
            if batch.last_offset >= leo:
                raise InvalidOffsetError(f"the leader's batch [{batch.base_offset}, {batch.last_offset}] straddles "
                                         f"the follower's log end {leo}", file=source, offset=leo)
        return view[:0]

    def truncate(self, follower: Partition, leader: Partition) -> None:
        """Truncate by epoch until the follower's log is a prefix of the leader's (KIP-279's loop)."""
        log = follower.log
        for _ in range(len(log.leader_epochs.entries) + 2):
            latest = log.leader_epochs.latest_epoch
            if latest is None:
                if log.log_end_offset > log.high_watermark:
                    log.truncate_to(log.high_watermark)  # no epoch to ask about: the HW is all that is known
                return
            if self._truncate_towards(follower, *leader.offsets_for_leader_epoch(latest)):
                return

    @staticmethod
    def _truncate_towards(follower: Partition, leader_epoch: int, leader_end: int) -> bool:
        """Apply one OffsetsForLeaderEpoch answer; True when the truncation is complete."""
        log = follower.log
        if leader_end < 0:  # the leader knows no such epoch: fall back to the high watermark
            log.truncate_to(max(log.high_watermark, 0))
            return True
        own_epoch, own_end = log.leader_epochs.end_offset_for(leader_epoch, log.log_end_offset)
        if own_epoch != leader_epoch:  # not ours: cut to where our epochs below it end, then ask again
            log.truncate_to(min(own_end if own_end >= 0 else log.log_end_offset, log.log_end_offset))
            return False
        log.truncate_to(min(own_end, leader_end, log.log_end_offset))
        return True


class ReplicaFetcherThread:
    """The engine's thread for one follower broker: fetch rounds over the partitions it follows, waiting up to
    `wait_ms` (Kafka's replica.fetch.wait.max.ms) for an append when a round brought nothing; stops on `stop()`."""

    def __init__(self, fetcher: ReplicaFetcher, partitions: Callable[[], list[Partition]], wake: threading.Event,
                 wait_ms: int = 500) -> None:
        self.fetcher, self.partitions, self.wake, self.wait_ms = fetcher, partitions, wake, wait_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kafkalog-replica-fetcher:{fetcher.broker_id}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.wake.clear()
            moved = 0
            for p in self.partitions():
                try:
                    moved += self.fetcher.fetch_once(p)
                except Exception as exc:  # noqa: BLE001 - a failing partition must not stop the others
                    log.warning("replica fetcher %s: %s-%s: %s", self.fetcher.broker_id, p.topic, p.index, exc)
            if not moved:
                self.wake.wait(self.wait_ms / 1000.0)

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        self._thread.join()
