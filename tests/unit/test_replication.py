"""Replication at the partition level (replication.partition, replication.replica_fetcher), brokers being
directories in one process: the seed's high-watermark walkthrough step by step, the seed's leader-epoch
scenario (nothing lost) beside the same steps with high-watermark truncation (offsets 0-1 lost, as the seed
says), OffsetsForLeaderEpoch by Kafka's rules, ISR shrink and expansion, min.insync.replicas and acks=all."""
from __future__ import annotations

import pytest

import engine
from engine.common.errors import (
    FencedLeaderEpochError,
    KafkaTimeoutError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from engine.replication.partition import Partition
from engine.replication.replica_fetcher import ReplicaFetcher
from engine.segments.fs import FileSystem
from engine.segments.leader_epoch_checkpoint import LeaderEpochCache
from engine.segments.log_config import LogConfig
from engine.log.unified_log import UnifiedLog

TOPIC = "t"


class Cluster:
    """Broker b's replica of t-0 lives in <root>/broker-<b>/t-0; a broker "fails" by closing its log and
    "restarts" by reopening it (recovery included)."""

    def __init__(self, root, brokers: int, config: dict | None = None) -> None:
        self.root, self.clock, self.fs = root, engine.ManualClock(), FileSystem()
        self.config = LogConfig.from_dict(config)
        self.parts: dict[int, Partition] = {b: self._open(b) for b in range(brokers)}
        self.leader = 0

    def _open(self, b: int) -> Partition:
        log = UnifiedLog(self.fs, str(self.root / f"broker-{b}" / f"{TOPIC}-0"), self.config, self.clock)
        return Partition(TOPIC, 0, log, broker_id=b, clock=self.clock)

    def fetcher(self, b: int, max_bytes: int = 1 << 20, cls=ReplicaFetcher) -> ReplicaFetcher:
        return cls(b, lambda _: self.parts[self.leader], max_bytes)

    def produce(self, *values: bytes) -> None:
        """Each value is one batch (so a fetch can take some of them)."""
        for v in values:
            self.parts[self.leader].append(engine.encode_batch([(None, v, None, 1)]), acks=1)

    def state(self) -> dict[int, tuple[int, int]]:
        return {b: (p.log.log_end_offset, p.log.high_watermark) for b, p in self.parts.items()}

    def values(self, b: int) -> list[bytes]:
        log = self.parts[b].log
        out = []
        if log.log_end_offset:
            for batch in engine.iter_batches(log.read(0, 1 << 20).records):
                out += [r.value for r in batch.records()]
        return out

    def restart(self, b: int) -> None:
        self.parts[b].log.close()
        self.parts[b] = self._open(b)


def test_the_seeds_high_watermark_walkthrough(tmp_path):
    """004's steps: a leader and two followers, produce a and b, the followers fetch (2 and 1 records), the
    leader gets c, the followers fetch again (HW 1), then once more (HW 3), each LEO and HW as the seed says."""
    c = Cluster(tmp_path, 3)
    c.parts[0].make_leader(0, isr=[0, 1, 2], replicas=[0, 1, 2])
    for b in (1, 2):
        c.parts[b].make_follower(0, 0, replicas=[0, 1, 2])
    f1, f2 = c.fetcher(1), c.fetcher(2, max_bytes=1)  # follower 2 takes one batch a fetch
    assert c.state() == {0: (0, 0), 1: (0, 0), 2: (0, 0)}                    # 1. nothing yet
    c.produce(b"a", b"b")
    assert c.state() == {0: (2, 0), 1: (0, 0), 2: (0, 0)}                    # 2. leader LEO 2
    f1.fetch_once(c.parts[1])
    f2.fetch_once(c.parts[2])
    assert {b: r.log_end_offset for b, r in c.parts[0].remote.items()} == {1: 0, 2: 0}  # 3. LEOs sent: 0, 0
    assert c.state() == {0: (2, 0), 1: (2, 0), 2: (1, 0)}                    # 4. followers LEO 2 and 1, HW 0
    c.produce(b"c")
    assert c.state()[0] == (3, 0)                                            # 5. leader LEO 3 ...
    # 5.-6. both followers' fetches (LEOs 2 and 1) reach the leader before either answer goes back
    pending = [f1.send(c.parts[1]), f2.send(c.parts[2])]
    assert c.state()[0] == (3, 1)                                            # HW = min(3, 2, 1) = 1
    for p in pending:
        f1.complete(p)
    assert c.state() == {0: (3, 1), 1: (3, 1), 2: (2, 1)}                    # 6.-7. data and HW 1 reach them
    hws = [c.state()[0][1]]
    for _ in range(3):                                                       # 8. fetching goes on ...
        f1.fetch_once(c.parts[1])
        f2.fetch_once(c.parts[2])
        hws.append(c.state()[0][1])
    assert hws == sorted(hws) and hws[0] == 1                                # (the HW only moves up)
    assert c.state() == {0: (3, 3), 1: (3, 3), 2: (3, 3)}                    # ... until all are the same
    assert c.values(1) == c.values(2) == c.values(0) == [b"a", b"b", b"c"]


def test_a_fetch_that_sends_its_next_request_moves_the_high_watermark_in_one_round(tmp_path):
    """The acks='all' waiter's rounds (send_next): a fetch that appended sends its next request at once, answered
    before anything is read. After one round of both followers the leader knows both log ends (HW 2), the second
    follower got that HW with its answer, the first still has the HW its own fetch carried; the seed's plain fetches
    (above) need a second round for the same. Nothing is read twice: a later round appends nothing and brings the
    first follower the HW its answer carries."""
    c = Cluster(tmp_path, 3)
    c.parts[0].make_leader(0, isr=[0, 1, 2], replicas=[0, 1, 2])
    for b in (1, 2):
        c.parts[b].make_follower(0, 0, replicas=[0, 1, 2])
    f1, f2 = c.fetcher(1), c.fetcher(2)
    c.produce(b"a", b"b")
    assert f1.fetch_once(c.parts[1], send_next=True) > 0
    assert {b: r.log_end_offset for b, r in c.parts[0].remote.items()} == {1: 2, 2: -1}
    assert c.state() == {0: (2, 0), 1: (2, 0), 2: (0, 0)}
    assert f2.fetch_once(c.parts[2], send_next=True) > 0
    assert {b: r.log_end_offset for b, r in c.parts[0].remote.items()} == {1: 2, 2: 2}
    assert c.state() == {0: (2, 2), 1: (2, 0), 2: (2, 2)}
    assert f1.fetch_once(c.parts[1], send_next=True) == 0 and c.state()[1] == (2, 2)
    assert c.values(1) == c.values(2) == [b"a", b"b"]


def test_a_caught_up_follower_outside_the_isr_holds_the_high_watermark_until_it_lags(tmp_path):
    """Kafka's maybeIncrementLeaderHW: the HW waits for a follower outside the ISR while it was caught up within
    replica.lag.time.max.ms (it is about to join), not for one that lags longer, nor for one never heard from."""
    c = Cluster(tmp_path, 3)
    leader = c.parts[0]
    leader.make_leader(0, isr=[0], replicas=[0, 1, 2])  # broker 2 never fetches (log end unknown)
    follower = leader.remote[1]
    follower.log_end_offset, follower.last_caught_up_ms = 0, c.clock.time_ms()  # caught up at offset 0, just now
    c.produce(b"a")
    assert c.state()[0] == (1, 0)
    c.clock.advance(leader.lag_max_ms + 1)
    c.produce(b"b")
    assert c.state()[0] == (2, 2)


def test_a_next_request_from_a_diverged_log_records_nothing(tmp_path):
    """follower_log_end from a log whose last epoch the leader does not have: no log end recorded, no HW moved,
    None (the follower's next full fetch gets the epoch to truncate to)."""
    c = Cluster(tmp_path, 2)
    c.parts[0].make_leader(3, isr=[0, 1], replicas=[0, 1])
    c.produce(b"a", b"b")
    leader = c.parts[0]
    assert leader.follower_log_end(1, 1, 2) is None  # no epoch 2 here (its first, 3, starts at 0): diverged
    assert leader.remote[1].log_end_offset == -1 and c.state()[0] == (2, 0)
    assert leader.follower_log_end(1, 2, 3) == (2, 0)                   # the leader's epoch: recorded, HW 2
    assert leader.remote[1].log_end_offset == 2 and c.state()[0] == (2, 2)


def test_a_parked_next_request_completes_without_being_recorded_again(tmp_path):
    """The next request a send_next round sends is recorded when sent and then waits for records (Kafka parks a
    fetch that finds nothing to read): the fetch that completes it reads without recording the follower again. A
    parked request below a log start that moved since is refused, as any fetch there is."""
    c = Cluster(tmp_path, 3)
    leader = c.parts[0]
    leader.make_leader(0, isr=[0, 2], replicas=[0, 1, 2])  # broker 1 fetches from outside the ISR
    for b in (1, 2):
        c.parts[b].make_follower(0, 0, replicas=[0, 1, 2])
    f1, f2 = c.fetcher(1), c.fetcher(2)
    c.produce(b"a")
    parked_at = c.clock.time_ms()
    assert f1.fetch_once(c.parts[1], send_next=True) > 0
    replica = leader.remote[1]
    assert replica.parked == (1, 0, 0) and replica._last_fetch_ms == parked_at
    c.clock.advance(1_000)
    c.produce(b"b")
    pending = f1.send(c.parts[1])  # completes the parked request
    assert replica.parked is None and replica._last_fetch_ms == parked_at and replica._last_fetch_leader_leo == 1
    f1.complete(pending, follow=False)
    assert c.values(1) == [b"a", b"b"]
    assert f1.fetch_once(c.parts[1]) == 0 and replica._last_fetch_ms == parked_at + 1_000  # a plain fetch: recorded
    # parked at 2, then broker 1 lags out of reach, the HW passes it and the log start moves past it
    leader.follower_log_end(1, 2, 0, 0)
    c.clock.advance(leader.lag_max_ms + 1)
    c.produce(b"c", b"d")
    f2.fetch_once(c.parts[2], send_next=True)
    assert leader.maybe_shrink_isr() and leader.isr == {0, 2} and c.state()[0] == (4, 4)
    leader.log.delete_records(3)
    with pytest.raises(OffsetOutOfRangeError):
        leader.fetch_for_follower(1, 2, 0, 1 << 20, leader_epoch=0)


def test_followers_asking_from_one_mark_share_one_read(tmp_path):
    """Two followers fetching from the same tail mark with nothing appended between get the one read, which the
    leader lets go once both have it; an append between them means a read of its own, with the new batch."""
    c = Cluster(tmp_path, 3)
    c.parts[0].make_leader(0, isr=[0, 1, 2], replicas=[0, 1, 2])
    for b in (1, 2):
        c.parts[b].make_follower(0, 0, replicas=[0, 1, 2])
    f1, f2 = c.fetcher(1), c.fetcher(2)
    c.produce(b"a")
    f1.fetch_once(c.parts[1])
    f2.fetch_once(c.parts[2])  # both have read to the tail
    c.produce(b"b")
    p1 = f1.send(c.parts[1])
    assert c.parts[0]._tail_read is not None
    p2 = f2.send(c.parts[2])
    assert p2.answer.records is p1.answer.records and c.parts[0]._tail_read is None
    f1.complete(p1)
    f2.complete(p2)
    c.produce(b"c")
    p1 = f1.send(c.parts[1])
    c.produce(b"d")
    p2 = f2.send(c.parts[2])
    assert p2.answer.records is not p1.answer.records
    f1.complete(p1)
    f2.complete(p2)
    assert c.values(1) == [b"a", b"b", b"c"] and c.values(2) == [b"a", b"b", b"c", b"d"]


def _seed_epoch_scenario(c: Cluster, fetcher_cls) -> None:
    """Leader A (0) {LEO 2, HW 2}, follower B (1) {LEO 2, HW 0}; B restarts; A dies, B leads; A returns."""
    a, b = 0, 1
    c.parts[a].make_leader(0, isr=[a, b], replicas=[a, b])
    c.parts[b].make_follower(a, 0, replicas=[a, b])
    fb = c.fetcher(b, cls=fetcher_cls)
    c.produce(b"m0", b"m1")
    fb.fetch_once(c.parts[b])             # B appends both
    c.parts[0].fetch_for_follower(b, 2, 0, 1 << 20)  # B's next fetch reaches the leader, its answer is lost
    assert c.state() == {a: (2, 2), b: (2, 0)}
    c.restart(b)                          # B restarts and follows A again: it truncates before fetching
    c.parts[b].make_follower(a, 0, replicas=[a, b])
    fb.truncate(c.parts[b], c.parts[a])
    c.parts[b].truncation_pending = False
    c.parts[a].log.close()                # A dies before B fetched again; B is elected with epoch 1
    c.leader = b
    c.parts[b].make_leader(1, isr=[b], replicas=[a, b])
    c.parts[a] = c._open(a)               # A comes back as a follower of B
    c.parts[a].make_follower(b, 1, replicas=[a, b])
    fa = c.fetcher(a, cls=fetcher_cls)
    for _ in range(3):
        fa.fetch_once(c.parts[a])


def test_the_seeds_leader_epoch_scenario_loses_nothing(tmp_path):
    c = Cluster(tmp_path, 2)
    _seed_epoch_scenario(c, ReplicaFetcher)
    assert c.values(0) == c.values(1) == [b"m0", b"m1"]
    assert c.parts[1].log.leader_epochs.entries == [(0, 0), (1, 2)]
    c.produce(b"m2")  # the new leader's epoch starts at 2, as the seed's [Epoch=1, Offset=2]
    assert [bt.partition_leader_epoch for bt in engine.iter_batches(c.parts[1].log.read(0, 1 << 20).records)] \
        == [0, 0, 1]


class HighWatermarkTruncation(ReplicaFetcher):
    """Before KIP-101: a follower truncates to its HW when it starts following, and to the leader's log end
    when it finds itself past it."""

    def truncate(self, follower, leader):
        follower.log.truncate_to(follower.log.high_watermark)

    def fetch_once(self, follower):
        leader = self.leader_of(follower)
        log = follower.log
        try:
            got = leader.fetch_for_follower(self.broker_id, log.log_end_offset, -1, self.max_bytes)
        except OffsetOutOfRangeError:
            log.truncate_to(leader.log.log_end_offset)
            return 0
        if got.records is not None:
            log.append_as_follower(self._from_log_end(got.records, log.log_end_offset, log.dir))
        self.follow_high_watermark(follower, got.high_watermark, got.log_start_offset)
        return 1


def test_the_same_steps_with_high_watermark_truncation_lose_offsets_0_and_1(tmp_path):
    c = Cluster(tmp_path, 2)
    _seed_epoch_scenario(c, HighWatermarkTruncation)
    assert c.values(0) == c.values(1) == []  # both messages gone from both replicas, as the seed describes


def test_end_offset_for_an_epoch_follows_kafkas_rules(tmp_path):
    cache = LeaderEpochCache(FileSystem(), str(tmp_path))
    assert cache.end_offset_for(0, 10) == (-1, -1)
    for epoch, start in ((1, 0), (3, 5), (6, 9)):
        cache.assign(epoch, start)
    leo = 12
    assert cache.end_offset_for(6, leo) == (6, 12)   # the latest: the log end
    assert cache.end_offset_for(3, leo) == (3, 9)    # the next epoch's start
    assert cache.end_offset_for(4, leo) == (3, 9)    # unknown: the largest below, and where it ended
    assert cache.end_offset_for(0, leo) == (0, 0)    # below every epoch: the first start
    assert cache.end_offset_for(7, leo) == (-1, -1)  # above every epoch
    assert cache.end_offset_for(-1, leo) == (-1, -1)


def test_a_follower_with_a_divergent_tail_truncates_to_the_leaders_epoch_end(tmp_path):
    """B led epoch 0 and wrote two batches nobody else got; A took over in epoch 1 at offset 1 and wrote
    more; B, following A, drops its divergent batch and ends with A's log byte for byte."""
    c = Cluster(tmp_path, 2)
    c.parts[1].make_leader(0, isr=[0, 1], replicas=[0, 1])
    c.leader = 1
    c.parts[0].make_follower(1, 0, replicas=[0, 1])
    c.produce(b"shared")
    c.fetcher(0).fetch_once(c.parts[0])
    c.produce(b"lost-1", b"lost-2")  # never replicated: B's divergent tail
    c.parts[1].make_offline()
    c.leader = 0
    c.parts[0].make_leader(1, isr=[0], replicas=[0, 1])
    c.produce(b"new-1", b"new-2", b"new-3")
    c.parts[1].make_follower(0, 1, replicas=[0, 1])
    f = c.fetcher(1)
    for _ in range(3):
        f.fetch_once(c.parts[1])
    assert c.values(1) == c.values(0) == [b"shared", b"new-1", b"new-2", b"new-3"]
    assert c.parts[1].log.leader_epochs.entries == c.parts[0].log.leader_epochs.entries == [(0, 0), (1, 1)]
    assert 1 in c.parts[0].isr  # caught up: back in the ISR


def test_isr_shrinks_after_the_lag_time_and_expands_when_caught_up(tmp_path):
    c = Cluster(tmp_path, 3, {"min.insync.replicas": 2})
    leader = c.parts[0]
    leader.make_leader(0, isr=[0, 1, 2], replicas=[0, 1, 2])
    for b in (1, 2):
        c.parts[b].make_follower(0, 0, replicas=[0, 1, 2])
    f1, f2 = c.fetcher(1), c.fetcher(2)
    c.produce(b"x")
    c.clock.advance(20_000)
    f1.fetch_once(c.parts[1])
    f1.fetch_once(c.parts[1])
    c.clock.advance(15_000)  # follower 2 last caught up 35 s ago, follower 1 15 s ago
    assert leader.maybe_shrink_isr() and leader.isr == {0, 1}
    assert leader.log.high_watermark == 1
    c.produce(b"y")
    f1.fetch_once(c.parts[1])
    f1.fetch_once(c.parts[1])
    assert leader.log.high_watermark == 2  # the ISR is {0, 1}: follower 2 no longer holds the HW back
    f2.fetch_once(c.parts[2])
    f2.fetch_once(c.parts[2])
    assert leader.isr == {0, 1, 2}
    # min.insync.replicas=2: with the ISR at the leader alone, acks=all is refused before the append
    leader.remove_from_isr(1)
    leader.remove_from_isr(2)
    with pytest.raises(NotEnoughReplicasError):
        leader.append(engine.encode_batch([(None, b"z", None, 1)]), acks=-1)
    info = leader.append(engine.encode_batch([(None, b"z", None, 1)]), acks=1)
    assert leader.log.high_watermark == 2  # ISR 1 < min ISR 2: the HW does not move
    with pytest.raises(KafkaTimeoutError):
        leader.wait_for_high_watermark(info.last_offset, 0)


def test_acks_all_waits_for_the_isr_and_reports_a_shrunk_isr(tmp_path):
    c = Cluster(tmp_path, 2, {"min.insync.replicas": 2})
    leader = c.parts[0]
    leader.make_leader(0, isr=[0, 1], replicas=[0, 1])
    c.parts[1].make_follower(0, 0, replicas=[0, 1])
    info = leader.append(engine.encode_batch([(None, b"v", None, 1)]), acks=-1)
    with pytest.raises(KafkaTimeoutError):
        leader.wait_for_high_watermark(info.last_offset, 0)
    f = c.fetcher(1)
    f.fetch_once(c.parts[1])
    f.fetch_once(c.parts[1])
    leader.wait_for_high_watermark(info.last_offset, 0)  # replicated: returns
    info = leader.append(engine.encode_batch([(None, b"w", None, 1)]), acks=-1)
    f.fetch_once(c.parts[1])
    f.fetch_once(c.parts[1])
    c.parts[0].isr = frozenset({0})  # the ISR shrank after the HW passed the batch
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        leader.wait_for_high_watermark(info.last_offset, 0)


def test_fencing_a_stale_leader_epoch_and_a_non_leader(tmp_path):
    c = Cluster(tmp_path, 2)
    c.parts[0].make_leader(3, isr=[0, 1], replicas=[0, 1])
    c.parts[1].make_follower(0, 3, replicas=[0, 1])
    with pytest.raises(FencedLeaderEpochError):
        c.parts[0].fetch_for_follower(1, 0, -1, 100, leader_epoch=2)
    with pytest.raises(NotLeaderOrFollowerError):
        c.parts[1].append(engine.encode_batch([(None, b"v", None, 1)]), acks=1)
    with pytest.raises(NotLeaderOrFollowerError):
        c.parts[0].fetch_for_follower(7, 0, -1, 100)


def test_an_idle_follower_stays_in_the_isr(tmp_path):
    """With nothing to replicate a follower's fetches change nothing, but they still tell the leader it is
    caught up: hours without appends never shrink the ISR."""
    c = Cluster(tmp_path, 2)
    c.parts[0].make_leader(0, isr=[0, 1], replicas=[0, 1])
    c.parts[1].make_follower(0, 0, replicas=[0, 1])
    f = c.fetcher(1)
    c.produce(b"x")
    for _ in range(3):
        f.fetch_once(c.parts[1])
    for _ in range(500):
        c.clock.advance(10_000)
        f.fetch_once(c.parts[1])
        assert not c.parts[0].maybe_shrink_isr()
    assert c.parts[0].isr == {0, 1}
    c.clock.advance(31_000)  # no fetch for longer than replica.lag.time.max.ms: out
    assert c.parts[0].maybe_shrink_isr() and c.parts[0].isr == {0}
