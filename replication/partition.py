"""One topic-partition as a broker hosts it (Kafka's Partition): the one path for appends and fetches, as leader
or as follower.

`PartitionView` holds the rules of what a reader may see: offsets from the log start up to the fetch
bound (the high watermark; the last stable offset under read_committed), and
ListOffsets answers (earliest, latest, by timestamp) within that bound. A live `Partition` applies
them to an engine's log; the Spark source applies the same rules to a directory read from outside
(segments.partition_reader), so the bound is defined once.

As leader, a `Partition` appends producers' batches stamped with its leader epoch and keeps a `Replica` per
follower: each follower fetch (`fetch_for_follower`) records the follower's log end, may bring it back into the
ISR, and may raise the high watermark, which is the smallest log end over the ISR (Kafka's
maybeIncrementLeaderHW: it never moves while the ISR is smaller than min(min.insync.replicas, replicas), and
never goes down). `maybe_shrink_isr` drops followers not caught up within `replica.lag.time.max.ms`.
A fetch whose last fetched epoch diverges from the leader's log gets the epoch and end offset to truncate to
(KIP-320's diverging epoch) instead of records. ISR changes go to the controller through `alter_isr`.
As follower, a partition's log is written by a replication.replica_fetcher.
With one replica the ISR is the leader alone, so the HW follows the log end after every append.
A leader whose followers are linked to the native replica fetcher (replication.replica_fetcher) publishes each
append to it (`links`); an acks='all' wait then waits natively (`wait_linked`) and moves the HW by the same rule over
the followers' progress, which the native thread records. A follower's link (`link`) ends before it changes role.
On-disk: nothing of its own (the log's files; the HW reaches `replication-offset-checkpoint` through the
log manager).
Thread-safety: a partition's state changes under its lock; appends are serialised by the log's lock as well;
`wait_for_high_watermark` waits on the partition's condition, `wait_linked` on the native fetcher's without the GIL.
A linked follower's progress at the leader (its Replica) is written by the native fetcher's thread only, and only
grows.
"""
from __future__ import annotations

import operator
import threading
from types import MappingProxyType
from typing import Callable, NamedTuple, Protocol

from engine.common.clock import Clock, SystemClock
from engine.common.errors import (
    FencedLeaderEpochError,
    InvalidConfigurationError,
    InvalidRequiredAcksError,
    KafkaTimeoutError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleControllerEpochError,
    UnknownLeaderEpochError,
)
from engine.record import twins
from engine.replication.replica import Replica
from engine.segments.local_log import FetchData
from engine.segments.txn_index import AbortedTxn
from engine.segments.log_segments import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from engine.log.log_slot import LogSlot
from engine.log.unified_log import CLIENT, AppendInfo, UnifiedLog

NewReplica, high_watermark = twins.selected("replica")  # its Replica type and HW rule
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ACKS = (0, 1, -1)
REPLICA_LAG_TIME_MAX_MS = 30_000


class ReadableLog(Protocol):
    """What a view needs of a log: a live UnifiedLog and a read-only PartitionReader both provide it."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None: ...


def check_isolation(level: str) -> str:
    """`level` if it is 'read_uncommitted' or 'read_committed'; InvalidConfigurationError otherwise."""
    if level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise InvalidConfigurationError(f"isolation_level={level!r} must be 'read_uncommitted' or 'read_committed'")
    return level


_HIGH_WATERMARK, _LAST_STABLE = operator.attrgetter("log.high_watermark"), operator.attrgetter("log.last_stable_offset")


class PartitionView:
    def __init__(self, topic: str, index: int, log: ReadableLog) -> None:
        self.topic, self.index, self.log = topic, index, log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def fetch_upper_bound(self, isolation: str = READ_UNCOMMITTED) -> int:
        """The offset after the last record a reader at `isolation` may see."""
        return self.bound_reader(isolation)(self)

    @staticmethod
    def bound_reader(isolation: str) -> Callable[[PartitionView], int]:
        """A function of a view giving its fetch upper bound at `isolation` (for a loop over many partitions)."""
        return _LAST_STABLE if check_isolation(isolation) == READ_COMMITTED else _HIGH_WATERMARK

    def offset_for_timestamp(self, timestamp: int, isolation: str = READ_UNCOMMITTED) -> tuple[int, int] | None:
        """ListOffsets: (timestamp, offset) of the first visible record whose timestamp is >= `timestamp`,
        None when there is none; -2 gives the log start and -1 the fetch bound (timestamp -1); -3 the first visible
        record with the largest timestamp; -4 the log start too (every segment is local) and -5 offset -1 (nothing
        is in tiered storage)."""
        bound = self.fetch_upper_bound(isolation)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return -1, self.log.log_start_offset
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        if timestamp == LATEST_TIMESTAMP:
            return -1, bound
        found = self.log.offset_for_timestamp(timestamp)
        return found if found is not None and found[1] < bound else None


def only_replica_loaded(log: UnifiedLog) -> None:
    """As the log of a partition's only replica loads: its HW is its log end (a checkpointed HW may lag it)."""
    if log.log_end_offset > log.high_watermark:
        log.update_high_watermark(log.log_end_offset)


class FollowerFetch(NamedTuple):
    """A leader's answer to a follower: records from the fetch offset (None if none), the leader's high
    watermark and log start, and the (epoch, end offset) to truncate to when the follower's log diverged."""

    records: FetchData | None
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None = None


class Partition(PartitionView):
    """A partition as one broker hosts it (see the module docstring): its role (leader, follower), leader epoch, ISR,
    followers' replicas, high watermark and the appends, fetches and waits that read and move them. They change
    together under the partition's lock (an append, a follower fetch, an ISR change and a role change each see the
    others whole), which is why it stays one class of about 440 lines, as Kafka's Partition is one."""

    log: UnifiedLog  # loaded: a partition is made over a loaded log (LazyPartition stands in before that)

    def __init__(self, topic: str, index: int, log: UnifiedLog, *, broker_id: int = 0,
                 clock: Clock | None = None, replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
                 alter_isr: Callable[[Partition, frozenset], bool] | None = None) -> None:
        super().__init__(topic, index, log)
        self.broker_id = broker_id
        self.clock = clock or SystemClock()
        self.lag_max_ms = replica_lag_time_max_ms
        self._alter_isr = alter_isr
        self.leader_id: int | None = None
        self.leader_epoch = 0
        self.replicas: list[int] = [broker_id]
        self.isr: frozenset[int] = frozenset({broker_id})
        self.remote: dict[int, Replica] = {}
        self.leader_epoch_start_offset = 0
        self.truncation_pending = False  # a follower truncates by epoch before its next fetch
        self.fetch_lock = threading.Lock()  # a follower's fetches run one at a time (its thread's or a waiter's)
        # the last records read from a tail mark for a follower, kept for the other followers asking from that mark
        # until each has had them: (mark, max bytes, leader epoch), the records, the mark after them, followers to go
        self._tail_read: list | None = None
        self.link = None  # as a follower: its link to the native replica fetcher, while it has one
        self.links = None  # as leader: its side of its followers' links (engine._native._replica_fetcher.Leader)
        self.controller_epoch = -1
        self._lock = threading.RLock()
        self._hw_changed: threading.Condition | None = None  # made by the first wait for the HW (under the lock)

    def load_log(self) -> UnifiedLog:
        """Its log (loaded: LazyPartition's method of the same name loads one)."""
        return self.log

    @property
    def loaded_log(self) -> UnifiedLog:
        return self.log

    # --- roles ----------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def make_leader(self, leader_epoch: int | None = None, isr=None, replicas=None,
                    high_watermark_floor: int = 0, controller_epoch: int | None = None) -> None:
        """Lead the partition. Without arguments (the only replica): keep the latest epoch the log has seen
        (0 for a new log), so epochs never go down in the log; the HW moves to the log end. With them (the
        controller's LeaderAndIsr): take `leader_epoch`, which starts at the log end, forget what the previous
        leadership knew of the followers, and start the HW at `high_watermark_floor` at least (the HW the
        partition had: every ISR member holds that much, so the visible HW never goes down across a failover)."""
        with self._lock:
            self._check_controller(controller_epoch)
            if self.link is not None:
                self.unlink()
            self._close_links()
            self.leader_id = self.broker_id
            self._tail_read = None
            if replicas is None and isr is None:  # the only replica
                self.replicas, self.isr, self.remote = [self.broker_id], frozenset((self.broker_id,)), {}
            else:
                self.replicas = list(replicas) if replicas is not None else [self.broker_id]
                self.isr = frozenset(isr) if isr is not None else frozenset({self.broker_id})
                now = self.clock.time_ms()
                self.remote = {b: NewReplica(b) for b in self.replicas if b != self.broker_id}
                for b, r in self.remote.items():
                    r.reset(now if b in self.isr else 0)
            if leader_epoch is None:
                self.leader_epoch = max(self.log.leader_epochs.latest_epoch or 0, 0)
            else:
                self.leader_epoch = leader_epoch
                self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
            if high_watermark_floor > self.log.high_watermark:
                self.log.update_high_watermark(high_watermark_floor)
            self._maybe_increment_hw()

    def _notify_hw(self) -> None:
        """Wake the waits for the HW (the lock held)."""
        if self._hw_changed is not None:
            self._hw_changed.notify_all()

    def make_follower(self, leader_id: int, leader_epoch: int, replicas=None, isr=None,
                      controller_epoch: int | None = None) -> None:
        """Follow `leader_id` in `leader_epoch`; the replica fetcher truncates the log by epoch before fetching."""
        with self._lock:
            self._check_controller(controller_epoch)
            self.unlink()
            self._close_links()
            self.leader_id, self.leader_epoch = leader_id, leader_epoch
            if replicas is not None:
                self.replicas = list(replicas)
            if isr is not None:
                self.isr = frozenset(isr)
            self.remote, self._tail_read = {}, None
            self.truncation_pending = True
            self._notify_hw()

    def make_offline(self, discard: bool = False) -> None:
        """No leader (the broker hosting this replica stopped, or no replica could be elected); with `discard`, what
        a link wrote is left to recovery (the broker died) or to the log's deletion."""
        with self._lock:
            self.unlink(discard)
            self._close_links()
            self.leader_id = None
            self.remote, self._tail_read = {}, None
            self._notify_hw()

    def unlink(self, discard: bool = False) -> None:
        """As a follower: end its link to the native replica fetcher, if any, and bring its log up to what the link
        wrote (unless `discard`); a link that a failed write stopped leaves no partial bytes behind."""
        link, self.link = self.link, None
        if link is None:
            return
        link.unlink()
        if discard:
            return
        self.log.account_linked(link.take)  # (what the link wrote is the log's now: no partial batch)
        if link.error:
            segment = self.log.active_segment
            segment.restore_after_failed_write(segment.size)

    def take_linked(self) -> None:
        """As a linked follower: its log takes what the link wrote so far (its LEO becomes the link's)."""
        link = self.link
        if link is not None:
            self.log.account_linked(link.take)

    def _close_links(self) -> None:
        """As leader: its followers' links stop (each follower unlinks at its next fetch)."""
        if self.links is not None:
            self.links.close()
            self.links = None

    def publish(self) -> None:
        """Tell the linked followers where the leader's log now ends (after each append)."""
        segment = self.log.active_segment
        self.links.publish(segment.base_offset, segment.size, self.log.log_end_offset)

    def wait_linked(self, offset: int, timeout_ms: int) -> bool:
        """acks='all' while every follower is linked: wait without the GIL until the native fetcher's HW passes
        `offset` (at most `timeout_ms`), then move the HW by the rule; False, without waiting, when not all are."""
        links = self.links
        if links is None or not links.linked:
            return False
        native_hw = links.wait(offset, timeout_ms)
        with self._lock:
            if not self.is_leader:  # (it lost the leadership meanwhile: its caller's wait raises)
                return False
            self._maybe_increment_hw()
            return self.log.high_watermark > offset or native_hw <= offset  # (else the rounds in Python decide)

    def settle_high_watermark(self) -> None:
        """Move the HW by the rule over what the leader knows of its followers now (a linked follower's progress
        is recorded by the native fetcher)."""
        with self._lock:
            if self.is_leader:  # (a partition that is not leader has no followers: the rule is not its)
                self._maybe_increment_hw()

    def _check_controller(self, controller_epoch: int | None) -> None:
        """A LeaderAndIsr from a controller older than one already heard from is refused."""
        if controller_epoch is None:
            return
        if controller_epoch < self.controller_epoch:
            raise StaleControllerEpochError(f"controller epoch {controller_epoch} is older than "
                                            f"{self.controller_epoch}", file=self.log.dir)
        self.controller_epoch = controller_epoch

    def _check_leader(self, leader_epoch: int | None = None) -> None:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {self.topic}-{self.index} "
                                           f"(leader: {self.leader_id})", file=self.log.dir)
        if leader_epoch is not None and leader_epoch >= 0:
            if leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"leader epoch {leader_epoch} is older than {self.leader_epoch}",
                                             file=self.log.dir)
            if leader_epoch > self.leader_epoch:
                raise UnknownLeaderEpochError(f"leader epoch {leader_epoch} is newer than {self.leader_epoch}",
                                              file=self.log.dir)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def min_isr(self) -> int:
        return min(self.log.config.min_insync_replicas, len(self.replicas))

    # --- the leader's writes --------------------------------------------------------------------
    def append(self, data, acks: int = -1, origin: str = CLIENT) -> AppendInfo:
        """Append a producer's batches (bytes of whole RecordBatch v2 batches) as leader, stamped with the
        leader epoch. acks=-1 is refused (NotEnoughReplicasError) while the ISR is smaller than
        min.insync.replicas; waiting for the HW to pass the batch is `wait_for_high_watermark`."""
        if acks not in ACKS:
            raise InvalidRequiredAcksError(f"acks={acks!r} must be 0, 1 or -1", file=self.log.dir)
        with self._lock:
            self._check_leader()
            if acks == -1 and len(self.isr) < self.log.config.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.index} has {len(self.isr)} in-sync replicas, min.insync.replicas is "
                    f"{self.log.config.min_insync_replicas}", file=self.log.dir)
            try:
                return self.log.append_as_leader(data, leader_epoch=self.leader_epoch, origin=origin)
            finally:  # an append that failed after writing (its fsync, a checkpoint) still moved the LEO
                self._maybe_increment_hw()
                if self.links is not None:
                    self.publish()

    def append_marker(self, commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> AppendInfo:
        """WriteTxnMarkers: the coordinator's COMMIT or ABORT for `producer_id`, appended as leader (acks='all';
        the wait is `wait_for_high_watermark`)."""
        with self._lock:
            self._check_leader()
            try:
                return self.log.append_marker(commit, producer_id, producer_epoch, coordinator_epoch,
                                              leader_epoch=self.leader_epoch)
            finally:
                self._maybe_increment_hw()
                if self.links is not None:
                    self.publish()

    def wait_for_high_watermark(self, offset: int, timeout_ms: float) -> None:
        """Block until the HW passes `offset` (acks=all); NotEnoughReplicasAfterAppendError if the ISR is then
        below min.insync.replicas, NotLeaderOrFollowerError if leadership moved, KafkaTimeoutError on time."""
        deadline = self.clock.time_ms() + timeout_ms
        with self._lock:
            while self.log.high_watermark <= offset:
                if not self.is_leader:
                    raise NotLeaderOrFollowerError(f"leadership of {self.topic}-{self.index} moved before offset "
                                                   f"{offset} was replicated", file=self.log.dir, offset=offset)
                left = deadline - self.clock.time_ms()
                if left <= 0:
                    raise KafkaTimeoutError(f"offset {offset} of {self.topic}-{self.index} was not replicated to "
                                            f"the ISR in {timeout_ms} ms", file=self.log.dir, offset=offset)
                if self._hw_changed is None:
                    self._hw_changed = threading.Condition(self._lock)
                self._hw_changed.wait(min(left, 50) / 1000.0)  # short slices: a test's clock moves by hand
            if len(self.isr) < self.log.config.min_insync_replicas:
                raise NotEnoughReplicasAfterAppendError(
                    f"offset {offset} is written, but {self.topic}-{self.index} has {len(self.isr)} in-sync "
                    f"replicas, below min.insync.replicas={self.log.config.min_insync_replicas}",
                    file=self.log.dir, offset=offset)

    # --- the leader's view of its followers -----------------------------------------------------
    def fetch_for_follower(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int, max_bytes: int,
                           leader_epoch: int | None = None) -> FollowerFetch:
        """A follower's fetch from its log end: its state is recorded (ISR expansion, HW), then records from
        `fetch_offset` (past the HW: followers replicate everything), or the epoch to truncate to."""
        with self._lock:
            log = self.log
            replica = self.remote.get(replica_id)
            if (replica is not None and replica.parked == (fetch_offset, last_fetched_epoch, leader_epoch)
                    and log.log_start_offset <= fetch_offset):
                # the request its last append sent, recorded then and parked until records came (Kafka's delayed
                # fetch): it completes now, nothing recorded twice
                self._check_leader(leader_epoch)
                replica.parked = None
            else:
                replica, diverging = self._follower_at(replica_id, fetch_offset, last_fetched_epoch, leader_epoch)
                if diverging is not None:
                    return FollowerFetch(None, log.high_watermark, log.log_start_offset, diverging)
            return FollowerFetch(self._read_for(replica, fetch_offset, max_bytes), log.high_watermark,
                                 log.log_start_offset)

    def follower_log_end(self, replica_id: int, log_end_offset: int, last_fetched_epoch: int,
                         leader_epoch: int | None = None) -> tuple[int, int] | None:
        """A follower's next fetch sent the moment it appended, answered before anything is read: the leader
        records its new log end (ISR expansion, HW) as `fetch_for_follower` does; (HW, log start) for the
        follower, or None when its log diverged (its next full fetch gets the epoch to truncate to)."""
        with self._lock:
            replica, diverging = self._follower_at(replica_id, log_end_offset, last_fetched_epoch, leader_epoch)
            if diverging is not None:
                return None
            replica.parked = (log_end_offset, last_fetched_epoch, leader_epoch)
            return self.log.high_watermark, self.log.log_start_offset

    def _follower_at(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                     leader_epoch: int | None) -> tuple[Replica, tuple[int, int] | None]:
        """A fetch request's half at the leader: the follower's replica and None once its fetch offset is recorded,
        or the (epoch, end offset) to truncate to when its log diverged (nothing recorded)."""
        self._check_leader(leader_epoch)
        replica = self.remote.get(replica_id)
        if replica is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.topic}-{self.index}",
                                           file=self.log.dir)
        log = self.log
        leo = log.log_end_offset
        if last_fetched_epoch >= 0 and fetch_offset > 0:
            epoch, end = log.leader_epochs.end_offset_for(last_fetched_epoch, leo)
            if epoch < last_fetched_epoch or end < fetch_offset:
                return replica, (epoch, end)
        if fetch_offset > leo or fetch_offset < log.log_start_offset:
            raise OffsetOutOfRangeError(f"follower fetch at {fetch_offset} is outside [{log.log_start_offset}, "
                                        f"{leo}]", file=log.dir, offset=fetch_offset)
        replica.on_fetch(fetch_offset, leo, self.clock.time_ms())
        replica.parked = None
        self._maybe_expand_isr(replica)
        self._maybe_increment_hw()
        return replica, None

    def _read_for(self, replica: Replica, fetch_offset: int, max_bytes: int) -> FetchData | None:
        """A follower's records from `fetch_offset`: when it asks from where its last fetch ended, the bytes
        appended since are served straight from the active segment (a fetch session's position, in process)."""
        mark = replica.tail_mark
        if fetch_offset >= self.log.log_end_offset:  # caught up: nothing to read (a mark at this offset holds)
            if mark is None or mark[0] != fetch_offset:
                replica.tail_mark = self.log.tail()
            return None
        if mark is not None and mark[0] == fetch_offset:
            key = (mark, max_bytes, self.leader_epoch)
            shared = self._tail_read
            if shared is not None and shared[0] == key and shared[2][0] == self.log.log_end_offset:
                shared[3] -= 1  # another follower's read of the same bytes, nothing appended since
                if not shared[3]:
                    self._tail_read = None
                replica.tail_mark = shared[2]
                return shared[1]
            found = self.log.read_tail(mark, max_bytes)
            if found is not None:
                replica.tail_mark = found[1]
                if found[1][0] <= fetch_offset:
                    return None
                self._tail_read = [key, *found, len(self.remote) - 1] if len(self.remote) > 1 else None
                return found[0]
        replica.tail_mark = None
        records = self.log.read(fetch_offset, max_bytes)
        end = records.position + records.records.nbytes
        mark = self.log.tail()
        if mark[1] == records.segment_base and mark[2] == end:  # it read to the end: the next fetch follows on
            replica.tail_mark = mark
        return records

    def offsets_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= `epoch`, its end offset) in the leader's log."""
        with self._lock:
            self._check_leader()
            return self.log.leader_epochs.end_offset_for(epoch, self.log.log_end_offset)

    def _maybe_expand_isr(self, replica: Replica) -> None:
        """A follower outside the ISR joins once it has reached the HW and this leadership's first offset."""
        if replica.broker_id in self.isr:
            return
        hw = self.log.high_watermark
        if replica.log_end_offset >= hw and replica.log_end_offset >= self.leader_epoch_start_offset:
            self._set_isr(self.isr | {replica.broker_id})

    def maybe_shrink_isr(self) -> bool:
        """Drop followers not caught up within replica.lag.time.max.ms; True if the ISR changed."""
        with self._lock:
            if not self.is_leader:
                return False
            now = self.clock.time_ms()
            lagging = {b for b in self.isr if b != self.broker_id and not self.remote[b].caught_up(now, self.lag_max_ms)}
            if not lagging:
                return False
            changed = self._set_isr(self.isr - lagging)
            self._maybe_increment_hw()
            return changed

    def remove_from_isr(self, broker_id: int) -> None:
        """The controller saw `broker_id` die: it leaves the ISR at once (its session expired), and what the
        leader knew of it is forgotten, so it no longer counts as a caught-up replica about to rejoin (Kafka
        leaves fenced brokers out of that too)."""
        with self._lock:
            if not self.is_leader:
                return
            if broker_id in self.remote:
                self.remote[broker_id].reset(0)
            if broker_id in self.isr:
                self._set_isr(self.isr - {broker_id})
            self._maybe_increment_hw()

    def _set_isr(self, isr: frozenset) -> bool:
        if self._alter_isr is not None and not self._alter_isr(self, isr):
            return False
        if not isr >= self.isr:
            self._close_links()  # a follower left the ISR: the HW is the rule's over the rest, in Python
        self.isr = frozenset(isr)
        self._notify_hw()
        return True

    def _maybe_increment_hw(self) -> bool:
        """The HW becomes the smallest log end over the ISR and caught-up followers, if that is higher."""
        log = self.log
        leo, hw = log.log_end_offset, log.high_watermark
        if leo <= hw:
            return False
        candidate = high_watermark(leo, hw, self.remote, self.isr, self.min_isr, self.clock, self.lag_max_ms)
        if candidate <= hw:
            return False
        log.update_high_watermark(candidate)
        self._notify_hw()
        return True

    # --- readers --------------------------------------------------------------------------------
    def fetch(self, offset: int, max_bytes: int, isolation: str = READ_UNCOMMITTED) -> FetchData | None:
        """Whole batches from `offset` (at least one, however large), none past the fetch bound; None when
        `offset` is at or past the bound; OffsetOutOfRangeError below the log start or past the log end (as Kafka's
        LocalLog.read: a consumer resets its position)."""
        bound = self.fetch_upper_bound(isolation)
        if offset >= bound:
            if offset > self.log.log_end_offset:
                raise OffsetOutOfRangeError(f"offset {offset} is past the log end offset {self.log.log_end_offset}",
                                            file=self.log.dir)
            return None
        return self.log.read(offset, max_bytes, upper_bound=bound)

    def aborted_transactions(self, data: FetchData) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of `data` overlaps (Kafka's FetchResponse field)."""
        upper = min(self.fetch_upper_bound(READ_COMMITTED), self.log.segment_end(data.segment_base))
        return self.log.collect_aborted(data.start_offset, upper)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset` (-1: the HW); never past the HW."""
        return self.log.delete_records(offset)


class LazyPartition:
    """The only replica of a partition, leading it, whose Partition is not made yet and whose log is not loaded: a
    placeholder in its broker's and the engine's maps of partitions until the replica manager makes the Partition
    (ReplicaManager.made, which every read and write of the partition goes through first) and puts it in the
    placeholder's place in both maps. Until then it costs one small object and answers what a look over every
    partition reads (its role, replicas, ISR and followers: a partition led by its only replica's) and its log if it is
    loaded (`loaded_log`; the log loads as the partition is made, or alone through `load_log()`, which a reader of its
    log that needs no partition calls). It never becomes anything else: a holder of one that is made asks the replica
    manager for the Partition."""

    __slots__ = ("topic", "index", "slot", "broker_id")
    remote = MappingProxyType({})  # no followers
    link = links = None
    is_leader = True

    def __init__(self, topic: str, index: int, slot: LogSlot, broker_id: int) -> None:
        self.topic, self.index, self.slot, self.broker_id = topic, index, slot, broker_id

    @property
    def leader_id(self) -> int:
        return self.broker_id

    @property
    def replicas(self) -> list[int]:
        return [self.broker_id]

    @property
    def isr(self) -> frozenset[int]:
        return frozenset((self.broker_id,))

    @property
    def loaded_log(self) -> UnifiedLog | None:
        """Its log if it is loaded; None (and nothing loaded) otherwise."""
        return self.slot.loaded_log

    def load_log(self) -> UnifiedLog:
        """Its log, loaded now if it was not (the partition is not made)."""
        return self.slot.load()

    def __repr__(self) -> str:
        return f"LazyPartition({self.topic}-{self.index})"
