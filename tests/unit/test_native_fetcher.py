"""The native replica fetcher (engine._native._replica_fetcher, linked by replication.replica_fetcher): a follower in
the steady state is linked, and its rounds copy the leader's new batches without Python. Its model is the general
path: the follower's files after a run (linked most of it) are what the general follower append makes of the leader's
batches, byte for byte, with the same producer state and leader epochs. Links stop where a round may not append
(a roll, a marker, a leadership change) and the Python rounds take over and link again. The native module's own
answers: each reason a round stops for, with nothing past it written, and typed errors for misuse."""
from __future__ import annotations

import errno
import os
import random

import pytest

import engine
import engine.engine as engine_module
from engine.common.clock import ManualClock, SystemClock
from engine.record import codec
from engine.replication.broker import broker_dir
from engine.replication.partition import Partition
from engine.replication.replica_fetcher import ReplicaFetcher, native_fetcher
from engine.segments.fs import FaultyFileSystem, FileSystem
from engine.log.unified_log import UnifiedLog
from tests.conftest import IMPLEMENTATIONS
from tests.log_checks import GeneralPathOnly, appended_state, model_log

# a clone whose native core is not built collects this module and runs none of it (a run that requires the core
# fails at its start instead: tests/conftest.py)
_replica_fetcher = pytest.importorskip("engine._native._replica_fetcher", reason="the native core is not built")
Replica = pytest.importorskip("engine._native._replica", reason="the native core is not built").Replica
pytestmark = pytest.mark.skipif("cython" not in IMPLEMENTATIONS, reason="the native core is not built in this run")
KEPT = (".log", ".index", ".timeindex", ".snapshot", "leader-epoch-checkpoint")
VALUE = b"v" * 90


def _kept_files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name.endswith(KEPT)}


def _batches_of(directory) -> list[bytes]:
    """Every batch of a closed partition directory, in offset order, as bytes."""
    out = []
    for path in sorted(p for p in directory.iterdir() if p.name.endswith(".log")):
        data = path.read_bytes()
        out += [data[b.position:b.position + b.size_in_bytes] for b in engine.iter_batches(data)]
    return out


def _count_links(monkeypatch) -> dict:
    """Patch the Python side to count the links made, the reasons links were ended for and the bytes accounted,
    and to record each follower log's appends as the (first, last) offsets of each (a Python round's, or a link's
    batches taken in one account)."""
    seen = {"links": 0, "reasons": [], "accounted": 0, "appends": {}}
    maybe_link, unlink, account = ReplicaFetcher._maybe_link, Partition.unlink, UnifiedLog.account_linked
    append = UnifiedLog.append_as_follower

    def recorded(lg, first: int, last: int) -> None:
        seen["appends"].setdefault(os.path.realpath(lg.dir), []).append((first, last))

    def recorded_append(self, data):
        info = append(self, data)
        recorded(self, info.first_offset, info.last_offset)
        return info

    def counted_link(self, follower, leader):
        maybe_link(self, follower, leader)
        seen["links"] += follower.link is not None

    def counted_unlink(self, discard=False):
        if self.link is not None:
            seen["reasons"].append(self.link.reason)
        unlink(self, discard)

    def counted_account(self, take):
        def recorded_take():
            headers = take()
            if headers:
                last = headers[-61:]
                recorded(self, int.from_bytes(headers[:8], "big"),
                         int.from_bytes(last[:8], "big") + int.from_bytes(last[23:27], "big"))
            return headers
        got = account(self, recorded_take)
        seen["accounted"] += got
        return got

    monkeypatch.setattr(ReplicaFetcher, "_maybe_link", counted_link)
    monkeypatch.setattr(Partition, "unlink", counted_unlink)
    monkeypatch.setattr(UnifiedLog, "account_linked", counted_account)
    monkeypatch.setattr(UnifiedLog, "append_as_follower", recorded_append)
    return seen


def _produce(e, rng: random.Random, topic: str, steps: int) -> None:
    """Idempotent sends (acks='all' and acks=1), plain appends, committed and aborted transactions, and looks at
    the replicas' log ends (which brings a linked follower's log up to its link) in between."""
    idempotent = e.producer(acks="all", enable_idempotence=True, linger_ms=0)
    quick = e.producer(acks=1, linger_ms=0)
    txn = e.producer(transactional_id="model-txn")
    txn.init_transactions()
    for i in range(steps):
        what = rng.random()
        if what < 0.45:
            for _ in range(rng.randint(1, 20)):
                idempotent.send(topic, VALUE, b"k%d" % rng.randrange(50))
            idempotent.flush()
        elif what < 0.6:
            quick.send(topic, VALUE, b"q%d" % i).get(timeout=10)
        elif what < 0.75:
            e.append(topic, 0, engine.encode_batch([(None, VALUE, None, 1_700_000_000_000 + i)] * rng.randint(1, 9)))
        elif what < 0.85:
            txn.begin_transaction()
            for _ in range(rng.randint(1, 5)):
                txn.send(topic, VALUE, b"t")
            (txn.commit_transaction if rng.random() < 0.7 else txn.abort_transaction)()
        else:
            e.describe_topic(topic)
    for p in (idempotent, quick, txn):
        p.close()


def _caught_up(e, topic: str) -> None:
    for _ in range(2000):
        d = e.describe_topic(topic).partitions[0]
        if all(r.log_end_offset == d.log_end_offset for r in d.replica_states.values()):
            return
        e.replicate(max_rounds=1)
    raise AssertionError("the followers did not catch up")


@pytest.mark.parametrize("seed", range(3))
def test_a_linked_follower_leaves_what_the_general_path_leaves(tmp_path, monkeypatch, seed):
    seen = _count_links(monkeypatch)
    root = tmp_path / "engine"
    with engine.open(str(root), brokers=3) as e:
        e.create_topic("t", replication_factor=3, config={"min.insync.replicas": 2})
        _produce(e, random.Random(seed), "t", 120)
        _caught_up(e, "t")
    assert seen["links"] >= 2 and seen["accounted"] > 0, seen  # the native rounds did the work
    batches = {engine.iter_batches(b).__next__().base_offset: b for b in _batches_of(root / "t-0")}
    for b in (1, 2):
        follower = root / broker_dir("", b) / "t-0"
        with model_log(tmp_path / f"model-{b}", "cython", {"min.insync.replicas": 2}, ManualClock()) as lg:
            lg._follower_append = GeneralPathOnly()
            for first, last in seen["appends"][os.path.realpath(follower)]:  # the same appends, the general path
                lg.append_as_follower(b"".join(data for base, data in batches.items() if first <= base <= last))
        assert _kept_files(follower) == _kept_files(tmp_path / f"model-{b}"), b


def test_links_stop_at_rolls_markers_and_leadership_changes_and_link_again(tmp_path, monkeypatch):
    seen = _count_links(monkeypatch)
    root = tmp_path / "engine"
    with engine.open(str(root), brokers=3) as e:
        e.create_topic("t", replication_factor=3, config={"min.insync.replicas": 2, "segment.bytes": 16384})
        rng = random.Random(7)
        _produce(e, rng, "t", 60)
        leader = e.describe_topic("t").partitions[0].leader
        e.fail_broker(leader)
        _produce(e, rng, "t", 40)
        e.restart_broker(leader)
        _produce(e, rng, "t", 40)
        _caught_up(e, "t")
        states = [appended_state(e._brokers[b].partitions[("t", 0)].log) for b in range(3)]
        for state in states:
            state.pop("recovery_point")
        assert states[1] == states[0] == states[2]
    assert {"rolled", "control batch", "leadership gone"} <= set(seen["reasons"]), seen["reasons"]
    assert seen["links"] > 6 and seen["accounted"] > 0
    logs = [_batches_of(root / broker_dir("", b) / "t-0" if b else root / "t-0") for b in range(3)]
    assert logs[1] == logs[0] == logs[2]


def test_only_an_engine_on_the_system_clock_and_a_plain_file_system_links_followers(tmp_path):
    assert native_fetcher(FaultyFileSystem(), SystemClock()) is None
    assert native_fetcher(FileSystem(), ManualClock()) is None
    fetcher = native_fetcher(FileSystem(), SystemClock())
    assert isinstance(fetcher, _replica_fetcher.Fetcher) and codec.IMPL == "cython"
    fetcher.close()
    with engine.open(str(tmp_path / "manual"), brokers=3, clock=ManualClock()) as e:
        e.create_topic("t", replication_factor=3)
        for _ in range(5):
            e.append("t", 0, engine.encode_batch([(None, VALUE, None, 1)]), acks=1)
        e.replicate()
        assert all(e._brokers[b].partitions[("t", 0)].link is None for b in (1, 2))
        assert e.replicas.native_fetcher is None


# --- the native module ----------------------------------------------------------------------------------------
def _batch(base: int, n: int = 3, epoch: int = 0, **fields) -> bytes:
    return engine.encode_batch([(b"k", VALUE, None, 1_700_000_000_000)] * n, base_offset=base,
                               partition_leader_epoch=epoch, **fields)


class _Pair:
    """A leader's segment file and a follower's, linked by a fresh fetcher (the follower starts empty)."""

    def __init__(self, tmp_path, follower_mode: int = os.O_WRONLY | os.O_APPEND) -> None:
        self.src_path, self.dst_path = tmp_path / "leader.log", tmp_path / "follower.log"
        self.src_path.write_bytes(b"")
        self.dst_path.write_bytes(b"")
        self.fetcher = _replica_fetcher.Fetcher()
        self.leader = self.fetcher.leader(1)
        self.replica = Replica(1)
        self.link = self.fetcher.link(self.leader, self.replica, os.open(self.src_path, os.O_RDONLY),
                                      os.open(self.dst_path, follower_mode), 0, 0, 0, 0)
        self.size = 0

    def append(self, data: bytes, leo: int, publish_extra: int = 0) -> None:
        with open(self.src_path, "ab") as f:
            f.write(data)
        self.size += len(data)
        self.leader.publish(0, self.size + publish_extra, leo)
        self.link.settle(5000)

    def close(self) -> None:
        self.link.unlink()
        self.fetcher.close()


def test_a_round_copies_whole_checked_batches_and_records_them_at_the_leader(tmp_path):
    pair = _Pair(tmp_path)
    data = _batch(0) + _batch(3, producer_id=9, producer_epoch=0, base_sequence=0) + _batch(6)
    pair.append(data, 9)
    assert pair.dst_path.read_bytes() == data
    assert pair.link.running and pair.link.log_end_offset == 9
    assert pair.replica.log_end_offset == 9 and pair.leader.high_watermark == 9
    headers = pair.link.take()
    assert headers == b"".join(data[b.position:b.position + 61] for b in engine.iter_batches(data))
    assert pair.link.take() == b""
    assert pair.leader.wait(8, 1000) == 9  # (passed already: no wait)
    pair.close()


@pytest.mark.parametrize("bad, reason", [
    (lambda: _batch(3, epoch=4), "leader epoch"),
    (lambda: _batch(5), "offset gap"),
    (lambda: engine.encode_control_batch("commit", base_offset=3, producer_id=9, producer_epoch=0,
                                         coordinator_epoch=0, timestamp_ms=1, partition_leader_epoch=0), "control batch"),
    (lambda: _batch(3)[:-1] + bytes([_batch(3)[-1] ^ 1]), "invalid batch"),
])
def test_a_round_stops_before_a_batch_it_may_not_append(tmp_path, bad, reason):
    pair = _Pair(tmp_path)
    first, second = _batch(0), bad()
    pair.append(first + second, 9)
    assert pair.link.reason == reason and not pair.link.running
    assert pair.dst_path.read_bytes() == first and pair.replica.log_end_offset == 3  # nothing past it
    pair.append(_batch(100), 200)  # a stopped link does nothing more
    assert pair.dst_path.read_bytes() == first
    pair.close()


def test_a_failed_read_or_write_stops_the_link_and_leaves_no_bytes(tmp_path):
    (tmp_path / "read").mkdir()
    short = _Pair(tmp_path / "read")
    short.append(_batch(0), 3, publish_extra=500)  # published bytes the leader's file does not hold
    assert short.link.reason == "short read"
    assert short.dst_path.read_bytes() == _batch(0) and short.replica.log_end_offset == 3  # the whole batch only
    short.close()
    (tmp_path / "write").mkdir()
    failing = _Pair(tmp_path / "write", follower_mode=os.O_RDONLY)  # a descriptor that cannot be written
    failing.append(_batch(0), 3)
    assert failing.link.reason == "I/O error" and failing.link.error == errno.EBADF
    assert failing.dst_path.read_bytes() == b"" and failing.replica.log_end_offset == 0  # (as it was linked)
    failing.close()


def test_leadership_gone_and_misuse_are_typed(tmp_path):
    pair = _Pair(tmp_path)
    pair.leader.close()
    assert pair.link.reason == "leadership gone"
    with pytest.raises(ValueError, match="cannot take another link"):
        pair.fetcher.link(pair.leader, Replica(2), os.open(pair.src_path, os.O_RDONLY),
                          os.open(pair.dst_path, os.O_RDONLY), 0, 0, 0, 0)
    with pytest.raises(ValueError, match="still linked"):
        pair.fetcher.close()
    with pytest.raises(ValueError, match="cannot be linked"):
        pair.fetcher.leader(0)
    with pytest.raises(TypeError):
        pair.fetcher.link(pair.leader, "not a replica", 0, 0, 0, 0, 0, 0)
    pair.close()
    pair.link.unlink()  # (again: nothing)
