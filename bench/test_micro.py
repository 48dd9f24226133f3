"""Micro-benchmarks of kafkalog's own hot calls (pytest-benchmark), comparable between runs of this project:
`pytest bench --benchmark-only`, `--benchmark-save=NAME`, then `--benchmark-compare`. The peer comparisons
live in `python -m bench`, which times every contender in the same run.

Each benchmark also checks its result, so a benchmark of a broken call fails instead of timing it."""
from __future__ import annotations

import os

import pytest

import engine
import engine.clients.accumulator
from engine.common.clock import SystemClock
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.log.unified_log import UnifiedLog

VALUE = os.urandom(100)
RECORDS = [(b"key-%05d" % i, VALUE, None, 1_700_000_000_000 + i) for i in range(130)]  # ~16 KiB
BATCH = engine.encode_batch(RECORDS)


def test_encode_batch_16k(benchmark):
    out = benchmark(engine.encode_batch, RECORDS)
    assert out == BATCH


def test_decode_records_16k(benchmark):
    def decode():
        return [(r.offset, r.key, r.value) for b in engine.iter_batches(BATCH) for r in b.records()]
    assert len(benchmark(decode)) == len(RECORDS)


def test_decode_columnar_16k(benchmark):
    assert len(benchmark(engine.decode_columnar, BATCH)) == len(RECORDS)


def test_crc32c_64k(benchmark):
    data = os.urandom(64 << 10)
    assert benchmark(engine.crc32c, data) == engine.crc32c(data)


@pytest.fixture
def log(tmp_path):
    lg = UnifiedLog(FileSystem(), str(tmp_path / "bench-0"), LogConfig.from_dict({"segment.bytes": 1 << 30}),
                    SystemClock())
    yield lg
    lg.close()


def test_log_append_16k(benchmark, log):
    info = benchmark(log.append_as_leader, BATCH)
    assert info.last_offset - info.first_offset == len(RECORDS) - 1


def test_index_lookup(benchmark, log):
    for _ in range(2000):
        log.append_as_leader(BATCH)
    index = log.active_segment.offset_index
    target = log.log_end_offset // 2
    offset, position = benchmark(index.lookup, target)
    assert offset <= target and position > 0


def test_read_by_offset(benchmark, log):
    for _ in range(200):
        log.append_as_leader(BATCH)
    got = benchmark(log.read, 12_345, 1 << 16)
    assert next(iter(got.batches())).base_offset <= 12_345


def test_producer_send(benchmark, tmp_path):
    with engine.open(str(tmp_path / "data"), background=False) as eng:
        eng.create_topic("t", partitions=3)
        with eng.producer() as p:
            future = benchmark(p.send, "t", value=VALUE, key=b"car-42")
            p.flush()
            assert future.get().partition == (engine.clients.accumulator.selected.murmur2(b"car-42") & 0x7FFFFFFF) % 3


# --- the cost of the descriptor budget: appends spread over many partitions, most of whose handles and
# maps the pool has closed, against the same appends over 10 partitions (KAFKALOG_BENCH_PARTITIONS; 10,000)
MANY = int(os.environ.get("KAFKALOG_BENCH_PARTITIONS", "10000"))
SMALL = engine.encode_batch(RECORDS[:8])


@pytest.mark.parametrize("partitions", [10, MANY], ids=["10-partitions", "many-partitions"])
def test_append_round_robin_under_fd_budget(benchmark, tmp_path, partitions):
    with engine.open(str(tmp_path), background=False, fd_budget=64) as e:
        e.create_topic("b", partitions=partitions)
        state = {"next": 0}

        def append():
            p = state["next"] = (state["next"] + 1) % partitions
            return e.append("b", p, SMALL)
        assert benchmark(append).last_offset >= 7
        assert e.fs.open_handles() <= 64


@pytest.mark.parametrize("how", ["pooled-handle", "plain-fd"])
def test_write_16k_through_the_seam_and_without(benchmark, tmp_path, how):
    """The seam's per-append cost when no fault is armed: a pooled handle's write of one 16 KiB batch, beside
    the same write on a descriptor held open by the caller (both unbuffered, both appending). Both empty the
    file every 1,024 writes, so neither run is timing a file grown to gigabytes."""
    fs = FileSystem(fd_budget=8)
    path = str(tmp_path / "seam.log")
    writes = [0]
    with open(path, "ab+", buffering=0) as plain:
        def pooled():
            with fs.handle(path, "ab+") as f:
                writes[0] += 1
                if writes[0] % 1024 == 0:
                    f.truncate(0)
                return fs.write(f, BATCH)

        def direct():
            writes[0] += 1
            if writes[0] % 1024 == 0:
                plain.truncate(0)
            return plain.write(BATCH)
        assert benchmark(pooled if how == "pooled-handle" else direct) == len(BATCH)
    fs.close_pool()


@pytest.mark.parametrize("rf", [1, 3], ids=["rf-1", "rf-3"])
def test_acks_all_append_16k(benchmark, tmp_path, rf):
    """One 16 KiB batch appended with acks='all' and waited for, 3 brokers, at RF=3 beside RF=1: the difference is
    what replicating a batch costs the appending thread, which runs the followers' fetch rounds itself."""
    with engine.open(str(tmp_path), brokers=3) as e:
        e.create_topic("r", replication_factor=rf, config={"min.insync.replicas": min(rf, 2)})
        info = benchmark(e.append, "r", 0, BATCH, -1)
        got = e.describe_topic("r").partitions[0]
        assert got.high_watermark == info.last_offset + 1 == got.log_end_offset
        assert len(got.replica_states) == rf
        assert all(state.log_end_offset >= got.high_watermark for state in got.replica_states.values())
