"""Segmented-log workloads against their peers: append throughput (raw sequential write() of the same
bytes; sqlite3 in WAL mode), random reads by offset and by timestamp (sqlite3), the recovery scan
(a raw read() of the same bytes) and opening a directory of many segments (stat() of every file)."""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import time

import engine
from bench.codec import make_records
from bench.peers import SqliteLog, raw_read, stat_all
from bench.runner import Contender, Workload, figure, percentile
from engine.common.clock import ManualClock, SystemClock
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.log.unified_log import UnifiedLog as Log

T0 = 1_700_000_000_000


def records_per_batch(batch_bytes: int) -> int:
    return batch_bytes // 132  # ~131 encoded bytes a record: a "1 MiB" batch stays under max.message.bytes


def _append_log(batches: list[bytes], scratch: str):
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        lg = Log(FileSystem(), os.path.join(d, "bench-0"), LogConfig(), SystemClock())
        for b in batches:
            lg.append_as_leader(b)
        lg.close(flush=False)  # no flush: "flush at roll only", and nothing rolls within 1 GiB; closed as the raw
        shutil.rmtree(d)       # side closes its descriptor (an open one would keep the deleted file's pages cached)
    return call


def _append_raw(batches: list[bytes], scratch: str):
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        fd = os.open(os.path.join(d, "raw.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        for b in batches:
            os.write(fd, b)
        os.close(fd)
        shutil.rmtree(d)
    return call


def _append_sqlite(chunks: list[list], scratch: str):
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        db = SqliteLog(os.path.join(d, "log.db"))
        for c in chunks:
            db.append(c)
        db.close()
        shutil.rmtree(d)
    return call


def workloads(quick: bool, scratch: str) -> list[Workload]:
    total = (8 << 20) if quick else (64 << 20)
    out = []
    for batch_bytes, label in ((16 << 10, "16 KiB"), (1 << 20, "1 MiB")):
        per = records_per_batch(batch_bytes)
        chunk = make_records(per, 100)
        one = engine.encode_batch(chunk)
        count = max(1, total // len(one))
        batches = [one] * count
        out.append(Workload("log append", f"100 B records, {label} batches, flush at roll only", count * per,
                            count * len(one), [
                                Contender("kafkalog", _append_log(batches, scratch)),
                                Contender("raw write()", _append_raw(batches, scratch)),
                                Contender("sqlite3 WAL", _append_sqlite([chunk] * count, scratch))],
                            targets={"raw write()": 0.7}))
    parts = 200 if quick else 10_000
    out.append(Workload("topics", f"create a topic of {parts:,} partitions (its directory removed after)", parts, 0, [
        Contender("kafkalog", _create_topic(parts, scratch)),
        Contender("mkdir + files", _create_dirs(parts, scratch))]))
    return out


def _create_topic(partitions: int, scratch: str):
    """An engine creating (and deleting) a topic of `partitions` partitions: directories, metadata, segments."""
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        with engine.open(d, background=False) as eng:
            eng.create_topic("many", partitions=partitions)
        shutil.rmtree(d)
    return call


def _create_dirs(partitions: int, scratch: str):
    """The file system's floor for the same layout: per partition a directory, its metadata file written and
    fsynced, and the three empty segment files, the parent directory fsynced once."""
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        for p in range(partitions):
            part = os.path.join(d, f"many-{p}")
            os.mkdir(part)
            with open(os.path.join(part, "partition.metadata"), "wb") as f:
                f.write(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
                os.fsync(f.fileno())
            for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
                open(os.path.join(part, name), "wb").close()
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        shutil.rmtree(d)
    return call


def figures(quick: bool, scratch: str) -> list[dict]:
    """Reads, recovery and opening, each against its peer, on one log built here."""
    size = (64 << 20) if quick else (1 << 30)
    d = tempfile.mkdtemp(dir=scratch)
    lg = Log(FileSystem(), os.path.join(d, "big-0"), LogConfig(), SystemClock())
    db = SqliteLog(os.path.join(d, "big.db"))
    per = records_per_batch(16 << 10)
    rounds = size // (per * 131)
    for r in range(rounds):
        chunk = [(b"%016d" % i, b"v" * 100, None, T0 + r * per + i) for i in range(per)]
        lg.append_as_leader(engine.encode_batch(chunk))
        db.append(chunk)
    end = lg.log_end_offset
    label = f"{lg.size_in_bytes() / 2**30:.2f} GiB log, 16 KiB batches"
    rng = random.Random(1)
    n = 1000 if quick else 10000

    def by_offset():
        target = rng.randrange(end)
        t = time.perf_counter_ns()
        batch = next(engine.iter_batches(lg.read(target, max_bytes=1).records))
        value = batch.consumer_records("big", 0, target, 1)[0][0].value  # the consumer's decode of that one record
        mine = time.perf_counter_ns() - t
        t = time.perf_counter_ns()
        row = db.read(target)[0]
        theirs = time.perf_counter_ns() - t
        assert value == row[3]
        return mine, theirs

    def by_timestamp():
        ts = T0 + rng.randrange(end)
        t = time.perf_counter_ns()
        found = lg.offset_for_timestamp(ts)
        mine = time.perf_counter_ns() - t
        t = time.perf_counter_ns()
        row = db.offset_for_timestamp(ts)
        theirs = time.perf_counter_ns() - t
        assert found == tuple(row)
        return mine, theirs

    out = []
    for what, probe in (("offset", by_offset), ("timestamp", by_timestamp)):
        reps = [[probe() for _ in range(n)] for _ in range(3)]  # three repetitions, interleaved per probe
        for pct, name in ((0.5, "p50"), (0.99, "p99")):
            ours = [percentile([m for m, _ in r], pct) for r in reps]
            theirs = [percentile([t for _, t in r], pct) for r in reps]
            out.append(figure(f"random read by {what}, {name} ({label})", ours, "µs", "sqlite3 WAL", theirs, True,
                               ratio_target=1.0 if what == "timestamp" else None))
    seg = lg.active_segment
    speeds, raw = [], []
    for _ in range(3):
        t = time.perf_counter()
        assert seg.recover() == 0
        speeds.append(seg.size / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        raw_read(seg.log_path)
        raw.append(seg.size / (time.perf_counter() - t) / 1e9)
    out.append(figure(f"recovery scan from page cache ({label})", speeds, "GB/s",
                       "raw read() of the same bytes", raw, False, target=3.0))
    db.close()
    lg.close()
    shutil.rmtree(d)
    out.append(_open_many(2000 if quick else 10_000, scratch))
    return out


def _open_many(count: int, scratch: str) -> dict:
    """A clean directory of `count` one-batch segments, opened (indexes open lazily)."""
    d = tempfile.mkdtemp(dir=scratch)
    path = os.path.join(d, "many-0")
    os.makedirs(path)
    for i in range(count):
        base = i * 10
        with open(os.path.join(path, f"{base:020d}.log"), "wb") as f:
            f.write(engine.encode_batch([(None, b"x" * 50, None, T0 + i)] * 10, base_offset=base))
        open(os.path.join(path, f"{base:020d}.index"), "wb").close()
        open(os.path.join(path, f"{base:020d}.timeindex"), "wb").close()
    ours, floors = [], []
    for _ in range(3):
        t = time.perf_counter()
        lg = Log(FileSystem(), path, LogConfig(), ManualClock(T0), clean_shutdown=True, recovery_point=count * 10)
        ours.append(time.perf_counter() - t)
        assert len(lg.segments) == count and lg.log_end_offset == count * 10
        lg.close()
        t = time.perf_counter()
        stat_all(path)
        floors.append(time.perf_counter() - t)
    shutil.rmtree(d)
    return figure(f"open a directory of {count:,} segments (clean shutdown)", ours, "s",
                   "listdir + stat() of every file", floors, True)
