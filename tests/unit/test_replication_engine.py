"""Replication through the engine: brokers as log directories in one process, RF and min.insync.replicas,
acks='all', failing and restarting brokers (leader election from the ISR, epochs, fencing), what
describe_topic shows, the directory layout, typed errors for bad settings, and a seeded randomised failover
run checked against what was acknowledged and what readers saw."""
from __future__ import annotations

import contextlib
import os
import random
import threading

import pytest

import engine
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidReplicationFactorError,
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    StaleControllerEpochError,
    UnsupportedVersionError,
)
from engine.segments import leader_epoch_checkpoint, offset_checkpoint

TOPIC = "events"


def _open(path, **kw):
    return engine.open(str(path), clock=engine.ManualClock(), background=False, **kw)


def _batch(value: bytes):
    return engine.encode_batch([(None, value, None, 1)])


def _replica_dirs(path, brokers: int) -> dict[int, str]:
    return {b: str(path if b == 0 else path / "brokers" / str(b)) for b in range(brokers)}


def _log_bytes(e, topic, p, broker, upto: int) -> bytes:
    """The bytes of the batches below offset `upto` in a broker's replica."""
    part = e._brokers[broker].partitions[(topic, p)]
    out, offset = b"", 0
    while offset < upto:
        data = part.log.read(offset, 1 << 20, upper_bound=upto)
        batches = [b for b in data.batches() if b.last_offset < upto]
        out += b"".join(bytes(b.buffer) for b in batches)
        offset = batches[-1].next_offset
    return out


def test_acks_all_on_three_replicas_and_the_directory_layout(tmp_path):
    with _open(tmp_path, brokers=3) as e:
        d = e.create_topic(TOPIC, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        assert [p.replicas for p in d.partitions] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]  # leadership spreads
        assert [p.leader for p in d.partitions] == [0, 1, 2] and all(p.isr == p.replicas for p in d.partitions)
        with e.producer(acks="all", linger_ms=0) as prod:
            for i in range(30):
                prod.send(TOPIC, value=b"v%d" % i, partition=i % 3).get(timeout=5)
        for p in e.describe_topic(TOPIC).partitions:
            assert p.high_watermark == p.log_end_offset == 10
            assert p.replica_states == {b: (10, 10) for b in range(3)}
        expected = {p: _log_bytes(e, TOPIC, p, 0, 10) for p in range(3)}
        assert all(_log_bytes(e, TOPIC, p, b, 10) == expected[p] for p in range(3) for b in range(3))
    for b, d in _replica_dirs(tmp_path, 3).items():
        with open(os.path.join(d, "meta.properties")) as f:
            assert f"node.id={b}\n" in f.read()
        hws = offset_checkpoint.parse(open(os.path.join(d, "replication-offset-checkpoint"), "rb").read())
        assert hws == {(TOPIC, p): 10 for p in range(3)}
        for p in range(3):
            text = open(os.path.join(d, f"{TOPIC}-{p}", "leader-epoch-checkpoint"), "rb").read()
            assert leader_epoch_checkpoint.parse(text) == [(0, 0)]
    with _open(tmp_path) as e:  # the broker count is stored
        assert [p.replicas for p in e.describe_topic(TOPIC).partitions] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]


def test_a_failed_leader_is_replaced_from_the_isr_and_rejoins_as_a_follower(tmp_path):
    with _open(tmp_path, brokers=3) as e:
        e.create_topic(TOPIC, replication_factor=3, config={"min.insync.replicas": 2})
        for i in range(5):
            e.append(TOPIC, 0, _batch(b"a%d" % i))
        e.fail_broker(0)
        p = e.describe_topic(TOPIC).partitions[0]
        assert (p.leader, p.leader_epoch, p.isr, p.high_watermark) == (1, 1, [1, 2], 5)
        for i in range(5):
            e.append(TOPIC, 0, _batch(b"b%d" % i))
        e.fail_broker(2)  # the ISR is now {1}: below min.insync.replicas
        with pytest.raises(NotEnoughReplicasError):
            e.append(TOPIC, 0, _batch(b"refused"))
        e.append(TOPIC, 0, _batch(b"acks-1"), acks=1)  # acks=1 needs only the leader
        e.restart_broker(0)
        e.replicate()
        p = e.describe_topic(TOPIC).partitions[0]
        assert p.leader == 1 and p.isr == [0, 1] and p.replica_states[0] == p.replica_states[1] == (11, 11)
        assert _log_bytes(e, TOPIC, 0, 0, 11) == _log_bytes(e, TOPIC, 0, 1, 11)
        assert e._brokers[0].partitions[(TOPIC, 0)].log.leader_epochs.entries == [(0, 0), (1, 5)]
        e.restart_broker(2)
        e.replicate()
        assert sorted(e.describe_topic(TOPIC).partitions[0].isr) == [0, 1, 2]


def test_an_offline_partition_waits_for_an_isr_member_unless_unclean_election_is_enabled(tmp_path):
    for unclean in (False, True):
        path = tmp_path / str(unclean)
        with _open(path, brokers=2) as e:
            e.create_topic(TOPIC, replication_factor=2, config={"unclean.leader.election.enable": unclean})
            e.append(TOPIC, 0, _batch(b"x"))
            e.fail_broker(1)       # the ISR shrinks to {0}
            e.append(TOPIC, 0, _batch(b"y"))
            e.fail_broker(0)       # the last ISR member dies: no leader
            with pytest.raises(NotLeaderOrFollowerError):
                e.append(TOPIC, 0, _batch(b"z"))
            e.restart_broker(1)    # out of sync: a leader only if unclean election is allowed
            p = e.describe_topic(TOPIC).partitions[0]
            assert p.leader == (1 if unclean else -1)
            e.restart_broker(0)
            e.replicate()
            p = e.describe_topic(TOPIC).partitions[0]
            if unclean:  # broker 1's log wins: "y" is gone, as unclean election allows
                assert p.leader == 1 and p.replica_states[0].log_end_offset == 1
            else:
                assert p.leader == 0 and p.high_watermark == 2 and p.replica_states[1] == (2, 2)


def test_bad_replication_settings_are_typed_and_name_the_option(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="brokers"):
        _open(tmp_path / "a", brokers=0)
    with pytest.raises(InvalidConfigurationError, match="brokers"):
        _open(tmp_path / "a", brokers="3")
    with _open(tmp_path / "b", brokers=2) as e:
        with pytest.raises(InvalidReplicationFactorError, match="replication_factor=3"):
            e.create_topic(TOPIC, replication_factor=3)
        with pytest.raises(InvalidConfigurationError, match="min.insync.replicas"):
            e.create_topic(TOPIC, replication_factor=2, config={"min.insync.replicas": 3})
        with pytest.raises(InvalidConfigurationError, match="unclean.leader.election.enable"):
            e.create_topic(TOPIC, config={"unclean.leader.election.enable": "maybe"})
        for acks in (2, "2", "none", None):
            with pytest.raises(InvalidConfigurationError, match="acks"):
                e.producer(acks=acks)
        with pytest.raises(InvalidConfigurationError):
            e.fail_broker(5)
        e.fail_broker(1)
        with pytest.raises(IllegalStateError):
            e.fail_broker(1)
        with pytest.raises(IllegalStateError):
            e.restart_broker(0)
        assert e.list_topics() == []
    with pytest.raises(UnsupportedVersionError, match="broker count"):
        _open(tmp_path / "b", brokers=3)


def test_a_stale_controller_is_fenced(tmp_path):
    with _open(tmp_path, brokers=2) as e:
        e.create_topic(TOPIC, replication_factor=2)
        part = e.partition(TOPIC, 0)
        with pytest.raises(StaleControllerEpochError):
            part.make_leader(5, [0, 1], [0, 1], controller_epoch=e.controller.epoch - 1)


def _random_failover_run(path, seed: int) -> None:
    """Random appends (acks='all' and acks=1), partial replication, broker failures and restarts (the leader
    among them), ISR expiry, reads up to the HW, and whole-process kills (every broker crashed, then a reopen).
    Checks: every acknowledged record is present afterwards at its offset; a record a reader saw never changes
    or disappears; the HW never goes down while the process lives; replicas agree byte for byte below the HW."""
    rng = random.Random(seed)
    acked: dict[int, bytes] = {}
    seen: dict[int, bytes] = {}
    trace = []
    e = _open(path, brokers=3)
    e.create_topic(TOPIC, replication_factor=3, config={"min.insync.replicas": 2, "segment.bytes": 600})
    last_hw = 0
    for step in range(60):
        op = rng.choice(["all", "all", "all", "one", "fetch", "fetch", "fail", "restart", "expire", "read", "kill"])
        trace.append(op)
        alive = [b for b, br in e._brokers.items() if br.alive]
        dead = [b for b, br in e._brokers.items() if not br.alive]
        with contextlib.suppress(KafkaError):  # typed failures (no leader, too few replicas, a timeout) ack nothing
            if op in ("all", "one"):
                value = b"%d-%d" % (seed, step)
                info = e.append(TOPIC, 0, _batch(value), acks=-1 if op == "all" else 1, timeout_ms=0)
                if op == "all":
                    acked[info.first_offset] = value
            elif op == "fetch" and alive:
                b = rng.choice(alive)
                fetcher = engine_fetcher(e, b)
                for part in e._brokers[b].followers():
                    fetcher.fetch_once(part)
            elif op == "fail" and len(alive) > 1:
                e.fail_broker(rng.choice(alive))
            elif op == "restart" and dead:
                e.restart_broker(rng.choice(dead))
            elif op == "expire":
                e.clock.advance(31_000)
                e.shrink_isrs()
            elif op == "read":
                part = e.partition(TOPIC, 0)
                offset = 0
                while offset < part.high_watermark:
                    data = part.fetch(offset, 1 << 20)
                    for batch in data.batches():
                        for r in batch.records():
                            assert seen.setdefault(r.offset, r.value) == r.value, (seed, trace)
                        offset = batch.next_offset
            elif op == "kill":  # the whole process dies: every broker stops where it is, the catalogue as it was
                for b in alive:
                    e._brokers[b].crash()
                e.close()
                e = _open(path)
                last_hw = 0
        part = e._partitions.get((TOPIC, 0))
        if part is not None:
            assert part.high_watermark >= last_hw, (seed, trace)
            last_hw = part.high_watermark
    for b in [b for b, br in e._brokers.items() if not br.alive]:
        e.restart_broker(b)
    e.replicate()
    d = e.describe_topic(TOPIC).partitions[0]
    leader = e.partition(TOPIC, 0)
    present = {}
    offset = 0
    while offset < leader.high_watermark:
        for batch in leader.fetch(offset, 1 << 20).batches():
            for r in batch.records():
                present[r.offset] = r.value
            offset = batch.next_offset
    for off, value in acked.items():
        assert present.get(off) == value, (seed, trace, off)
    for off, value in seen.items():
        assert present.get(off) == value, (seed, trace, off)
    for b in d.replicas:
        assert _log_bytes(e, TOPIC, 0, b, d.high_watermark) == _log_bytes(e, TOPIC, 0, d.leader, d.high_watermark)
    e.close()
    from engine.tools import verify
    for b, directory in _replica_dirs(path, 3).items():
        assert verify.check(directory)[1] == [], (seed, b, trace)


def engine_fetcher(e, broker_id):
    """A fetcher for one step; odd brokers take one batch a fetch, so followers lag differently."""
    from engine.replication.replica_fetcher import ReplicaFetcher
    return ReplicaFetcher(broker_id, e.replicas.leader_of, max_bytes=1 if broker_id % 2 else 1 << 20)


RUNS = int(os.environ.get("KAFKALOG_FAILOVER_RUNS", "200"))


@pytest.mark.parametrize("seed", range(RUNS))
def test_seeded_random_failover_keeps_every_acknowledged_record(tmp_path, seed):
    _random_failover_run(tmp_path, seed)


def test_every_replica_directory_passes_the_single_log_checks(tmp_path):
    """Each broker's directory is a Kafka log directory on its own: `verify` (batches, indexes, checkpoints),
    Kafka's text checkpoints, and the Spark source's reader sees broker 0's replica up to its high watermark."""
    from engine.tools import verify
    from engine.segments.fs import FileSystem
    from engine.segments.partition_reader import PartitionReader, read_checkpoints

    with engine.open(str(tmp_path), brokers=3) as e:
        e.create_topic(TOPIC, partitions=2, replication_factor=3,
                       config={"segment.bytes": 2000, "index.interval.bytes": 100})
        with e.producer(acks="all", batch_size=300, linger_ms=1) as p:
            for i in range(400):
                p.send(TOPIC, value=b"value-%d" % i, partition=i % 2)
        e.fail_broker(2)
        with e.producer(acks="all") as p:
            for i in range(40):
                p.send(TOPIC, value=b"late-%d" % i, partition=i % 2).get(timeout=5)
        e.restart_broker(2)
        expected = {p: e.describe_topic(TOPIC).partitions[p].high_watermark for p in range(2)}
    for b, d in _replica_dirs(tmp_path, 3).items():
        checked, problems = verify.check(d)
        assert problems == [] and checked >= 2, (b, problems)
    starts, hws = read_checkpoints(FileSystem(), str(tmp_path))
    for p in range(2):
        reader = PartitionReader(str(tmp_path / f"{TOPIC}-{p}"), high_watermark=hws.get((TOPIC, p)))
        assert reader.high_watermark == expected[p] == 220
        reader.close()


def test_a_consumer_skips_a_partition_without_a_leader_and_resumes_after(tmp_path):
    with _open(tmp_path, brokers=2) as e:
        e.create_topic(TOPIC, partitions=2, replication_factor=2)
        e.append(TOPIC, 0, _batch(b"p0"))
        e.append(TOPIC, 1, _batch(b"p1"))
        c = e.consumer(TOPIC, auto_offset_reset="earliest")
        assert sorted(r.value for recs in c.poll().values() for r in recs) == [b"p0", b"p1"]
        e.fail_broker(1)
        e.fail_broker(0)                 # both partitions lose their last ISR member
        with pytest.raises(NotLeaderOrFollowerError):
            e.append(TOPIC, 0, _batch(b"x"))
        assert c.poll() == {}            # no error: nothing to read while there is no leader
        e.restart_broker(0)
        e.append(TOPIC, 1, _batch(b"back"))
        assert [r.value for recs in c.poll().values() for r in recs] == [b"back"]


def test_min_insync_replicas_above_the_replication_factor_is_refused_on_alter(tmp_path):
    with _open(tmp_path, brokers=2) as e:
        e.create_topic(TOPIC, replication_factor=2, config={"min.insync.replicas": 2})
        with pytest.raises(InvalidConfigurationError, match="min.insync.replicas=3"):
            e.alter_topic_config(TOPIC, {"min.insync.replicas": 3})


def test_failing_another_broker_leaves_adopted_topics_alone(tmp_path):
    """A directory adopted without a catalogue keeps its partitions as single replicas on broker 0: failing
    broker 1 does not touch them, failing broker 0 takes them offline until it returns."""
    with _open(tmp_path) as e:
        e.create_topic("solo")
        e.append("solo", 0, _batch(b"one"))
    os.remove(tmp_path / "kafkalog.metadata")
    with _open(tmp_path, brokers=2) as e:
        e.fail_broker(1)
        e.append("solo", 0, _batch(b"two"))
        assert e.describe_topic("solo").partitions[0].high_watermark == 2
        e.restart_broker(1)
        e.fail_broker(0)
        with pytest.raises(NotLeaderOrFollowerError):
            e.append("solo", 0, _batch(b"three"))
        e.restart_broker(0)
        e.append("solo", 0, _batch(b"three"))
        assert e.describe_topic("solo").partitions[0].high_watermark == 3


def test_a_producer_waiting_for_acks_all_runs_the_follower_fetches_itself(tmp_path, monkeypatch):
    """With fetcher threads running, an acks='all' wait fetches for the partition's followers in the waiting
    thread (no hand-off to the fetcher threads and back); a follower's rounds never overlap, and a broker that
    dies waits for a fetch in progress before its logs close."""
    from engine.replication.replica_fetcher import ReplicaFetcher
    callers, running, overlaps = [], set(), []
    original = ReplicaFetcher.send

    def recording(self, follower):
        key = (self.broker_id, follower.topic, follower.index)
        overlaps.append(key in running)
        running.add(key)
        try:
            callers.append(threading.current_thread().name)
            return original(self, follower)
        finally:
            running.discard(key)
    monkeypatch.setattr(ReplicaFetcher, "send", recording)
    with engine.open(tmp_path, brokers=3) as e:
        e.create_topic("w", partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
        with e.producer(acks="all", linger_ms=0) as p:
            for i in range(300):
                p.send("w", b"%d" % i, partition=i % 2)
        assert threading.current_thread().name in callers and not any(overlaps)
        e.fail_broker(1)  # stops its fetcher and takes each follower's fetch lock before closing its logs
        with e.producer(acks="all") as p:
            assert p.send("w", b"after", partition=0).get().offset == 150
        assert e.describe_topic("w").partitions[0].log_end_offset == 151


def test_acks_all_keeps_up_to_five_batches_in_flight_per_partition(tmp_path, monkeypatch):
    """As Kafka's max.in.flight.requests.per.connection=5 (each request carrying a batch per partition): at most
    five of a partition's batches are appended and not yet acknowledged, whatever the other partitions hold."""
    with engine.open(tmp_path, brokers=3) as e:
        e.create_topic("f", partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        in_flight: dict[int, int] = {0: 0, 1: 0, 2: 0}
        peaks = []
        append, wait = e.append, e.wait_for_replication

        def counting_append(topic, partition, data, acks=-1, timeout_ms=30_000, wait=True):
            info = append(topic, partition, data, acks, timeout_ms, wait)
            if not wait:
                in_flight[partition] += 1
                peaks.append(dict(in_flight))
            return info

        def counting_wait(topic, partition, info, timeout_ms):
            in_flight[partition] -= 1
            return wait(topic, partition, info, timeout_ms)
        monkeypatch.setattr(e, "append", counting_append)
        monkeypatch.setattr(e, "wait_for_replication", counting_wait)
        with e.producer(acks="all", batch_size=200, linger_ms=50) as p:
            for i in range(600):
                p.send("f", b"x" * 50, partition=i % 3)
        assert max(max(peak.values()) for peak in peaks) == 5
        assert max(sum(peak.values()) for peak in peaks) > 5  # the limit is per partition, not per producer
        assert [d.log_end_offset for d in e.describe_topic("f").partitions] == [200, 200, 200]


def test_an_append_waiting_for_the_isr_when_its_leader_dies_is_not_acknowledged(tmp_path):
    """A producer thread waits for the ISR on the leader it appended to while another thread fails that broker:
    the dead leader has no followers left, which must not read as "nothing to wait for". The append is refused
    (NotLeaderOrFollowerError: the producer resends to the new leader), never acknowledged and then lost (the
    stress harness found a batch acknowledged this way, missing from the leader elected next)."""
    with _open(tmp_path, brokers=3) as e:
        e.create_topic(TOPIC, replication_factor=3)
        e.replicate()
        leader = e.partition(TOPIC, 0)
        info = e.append(TOPIC, 0, _batch(b"in flight"), acks=-1, wait=False)  # appended, not yet replicated
        e.fail_broker(leader.broker_id)           # the waiter still holds the old leader's partition
        assert not leader.remote and not leader.is_leader
        with pytest.raises(NotLeaderOrFollowerError):
            e.replicas.wait_for_replication(leader, info, 1_000)
        with pytest.raises(NotLeaderOrFollowerError):
            e.wait_for_replication(TOPIC, 0, info, 1_000)  # the new leader: another epoch


def _batches_below(directory: str, topic: str, hw: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch of `topic`-0 in a replica's directory that ends below `hw`."""
    out = []
    part = os.path.join(directory, f"{topic}-0")
    for name in sorted(f for f in os.listdir(part) if f.endswith(".log")):
        with open(os.path.join(part, name), "rb") as f:
            data = f.read()
        out += [(b.base_offset, bytes(data[b.position:b.position + b.size_in_bytes]))
                for b in engine.iter_batches(data) if b.last_offset < hw]
    return out


def test_a_follower_catches_up_across_batches_its_leader_compacted_away(tmp_path):
    """The follower is down while the leader's cleaner removes whole batches: when it comes back, the leader's next
    batch starts above the follower's log end. Kafka's follower appends across such a gap (only offsets going back
    are an error: UnifiedLog.append with assignOffsets=false); so does ours, rejoins the ISR, and once every replica
    is compacted the replicas are byte-identical below the HW."""
    topic = "compacted"
    with _open(tmp_path, brokers=2) as e:
        e.create_topic(topic, replication_factor=2,
                       config={"cleanup.policy": "compact", "segment.bytes": 2_000, "min.cleanable.dirty.ratio": 0.01})
        def put(key: bytes, value: bytes) -> None:  # one record a batch
            e.append(topic, 0, engine.encode_batch([(key, value, None, 1)]), acks=1)

        for i in range(10):
            put(b"a%d" % i, b"first")                       # offsets 0-9: replicated
        e.replicate()
        follower = next(b for b in (0, 1) if b != e.partition(topic, 0).broker_id)
        e.fail_broker(follower)                             # its log ends at 10
        for value, keys in ((b"gone", "b"), (b"kept", "b"), (b"last", "a")):
            for i in range(10):
                put(b"%s%d" % (keys.encode(), i), value)    # 10-19 obsolete by 20-29; 0-9 obsolete by 30-39
        for i in range(30):
            put(b"other", b"roll-%d" % i)                   # rolls, so the batches above are cleanable
        e.compact(topic)  # the leader alone: its first batches are gone
        leader = e.partition(topic, 0)
        first_bases = [b.base_offset for b in leader.log.read(0, 1 << 20).batches()]
        assert first_bases[0] > 10, first_bases  # whole batches below the follower's log end (10) were removed
        e.restart_broker(follower)
        e.replicate()
        leader = e.partition(topic, 0)
        assert follower in leader.isr
        replica = e._brokers[follower].partitions[(topic, 0)]
        assert replica.log.log_end_offset == leader.log.log_end_offset
        e.compact(topic)  # every replica
        hw = leader.high_watermark
        dirs = _replica_dirs(tmp_path, 2)
        assert _batches_below(dirs[0], topic, hw) == _batches_below(dirs[1], topic, hw)


@pytest.mark.parametrize("seed", range(int(os.environ.get("KAFKALOG_SIM_RUNS", "200")) // 20))
def test_random_compactions_with_a_follower_down_end_in_sync_and_identical(tmp_path, seed):
    """Seeded operations on a replicated compacted topic: keyed writes and tombstones, rolls, compactions (of the
    live replicas), and a follower failing and restarting across them. At the end, with every broker back and every
    replica compacted, each is in the ISR, every offset that two replicas both hold carries the same batch bytes
    there, and each replica holds the latest value of every key. (Byte-identical logs are not a property of Kafka's
    replicas once they compact: each cleans its own segments, whose boundaries and cleanable ends differ.)"""
    rng = random.Random(seed)
    topic = "compacted"
    latest: dict[bytes, bytes | None] = {}
    with _open(tmp_path, brokers=3) as e:
        e.create_topic(topic, replication_factor=3, config={"cleanup.policy": "compact", "segment.bytes": 1_500,
                                                           "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 0})
        down: int | None = None
        for _ in range(rng.randint(40, 120)):
            op = rng.random()
            if op < 0.6:
                key = b"k%d" % rng.randrange(12)
                value = None if rng.random() < 0.15 else b"v%d" % rng.randrange(10**6)
                e.append(topic, 0, engine.encode_batch([(key, value, None, 1)]), acks=1)
                latest[key] = value
            elif op < 0.7:
                e.log(topic, 0).roll() if e.partition(topic, 0).broker_id == 0 else None
            elif op < 0.82:
                e.compact(topic)
            elif op < 0.92:
                if down is None:
                    down = rng.choice([b for b in (0, 1, 2) if b != e.partition(topic, 0).broker_id])
                    e.fail_broker(down)
                else:
                    e.restart_broker(down)
                    down = None
            e.replicate()
        if down is not None:
            e.restart_broker(down)
        e.replicate()
        e.compact(topic)
        e.replicate()
        leader = e.partition(topic, 0)
        assert leader.isr == frozenset({0, 1, 2}), f"seed {seed}: ISR {sorted(leader.isr)}"
        hw = leader.high_watermark
        assert hw == leader.log.log_end_offset
        dirs = _replica_dirs(tmp_path, 3)
        records = []
        for b in range(3):
            held = {}
            for _, data in _batches_below(dirs[b], topic, hw):
                for batch in engine.iter_batches(data):
                    held.update((r.offset, (r.key, r.value, r.timestamp)) for r in batch.records())
            records.append(held)
            newest = {}
            for offset in sorted(held):
                newest[held[offset][0]] = held[offset][1]
            assert {k: v for k, v in newest.items() if v is not None} == \
                {k: v for k, v in latest.items() if v is not None}, f"seed {seed}: broker {b} lost a key's value"
        for a in range(3):
            for b in range(a + 1, 3):
                both = records[a].keys() & records[b].keys()
                assert all(records[a][o] == records[b][o] for o in both), f"seed {seed}: brokers {a}, {b} disagree"
