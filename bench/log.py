"""Segmented-log workloads: append throughput against a raw sequential write() of the same bytes,
random read-by-offset latency, recovery scan speed, and opening a directory of many segments."""
from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time

import engine
from bench.runner import Contender, Workload
from engine.clock import ManualClock, SystemClock
from segments.fs import FileSystem
from segments.log import Log
from segments.log_config import LogConfig

T0 = 1_700_000_000_000


def _records_per_batch(batch_bytes: int) -> int:
    return batch_bytes // 132  # ~131 encoded bytes a record: a "1 MiB" batch stays under max.message.bytes


def _batches(batch_bytes: int, total: int) -> list[bytes]:
    per = _records_per_batch(batch_bytes)
    one = engine.encode_batch([(b"%016d" % i, b"v" * 100, None, T0 + i) for i in range(per)])
    return [one] * max(1, total // len(one))


def _append_log(batches: list[bytes], scratch: str):
    def call():
        d = tempfile.mkdtemp(dir=scratch)
        lg = Log(FileSystem(), os.path.join(d, "bench-0"), LogConfig(), SystemClock())
        for b in batches:
            lg.append_as_leader(b)
        shutil.rmtree(d)  # no flush: "flush at roll only", and nothing rolls within 1 GiB
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


def workloads(quick: bool, scratch: str) -> list[Workload]:
    total = (16 << 20) if quick else (128 << 20)
    out = []
    for batch_bytes, label in ((16 << 10, "16 KiB"), (1 << 20, "1 MiB")):
        batches = _batches(batch_bytes, total)
        nbytes = sum(len(b) for b in batches)
        records = len(batches) * _records_per_batch(batch_bytes)
        out.append(Workload("log append", f"100 B records, {label} batches, flush at roll only", records, nbytes, [
            Contender("kafkalog", _append_log(batches, scratch)),
            Contender("raw write()", _append_raw(batches, scratch))], targets={"raw write()": 0.7}))
    return out


def figures(quick: bool, scratch: str) -> list[dict]:
    """Figures without a peer: read latency, recovery speed, opening many segments."""
    out = []
    size = (64 << 20) if quick else (1 << 30)
    d = tempfile.mkdtemp(dir=scratch)
    path = os.path.join(d, "big-0")
    lg = Log(FileSystem(), path, LogConfig(), SystemClock())
    one = _batches(16 << 10, 1)[0]
    for _ in range(size // len(one)):
        lg.append_as_leader(one)
    end = lg.log_end_offset
    rng = random.Random(1)
    lat = []
    for _ in range(2000 if quick else 20000):
        target = rng.randrange(end)
        t = time.perf_counter_ns()
        first = next(iter(engine.iter_batches(lg.read(target, max_bytes=1).records)))
        lat.append(time.perf_counter_ns() - t)
        assert first.base_offset <= target <= first.last_offset
    lat.sort()
    label = f"{lg.size_in_bytes() / 2**30:.2f} GiB log, 16 KiB batches"
    out.append({"name": f"random read by offset, p50 ({label})", "value": lat[len(lat) // 2] / 1000, "unit": "µs"})
    out.append({"name": f"random read by offset, p99 ({label})", "value": lat[int(len(lat) * 0.99)] / 1000,
                "unit": "µs"})
    seg = lg.active_segment
    speeds = []
    for _ in range(3):
        t = time.perf_counter()
        assert seg.recover() == 0
        speeds.append(seg.size / (time.perf_counter() - t) / 1e9)
    out.append({"name": f"recovery scan from page cache ({label})", "value": statistics.median(speeds),
                "unit": "GB/s", "target": 3.0})
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
    t = time.perf_counter()
    lg = Log(FileSystem(), path, LogConfig(), ManualClock(T0), clean_shutdown=True, recovery_point=count * 10)
    elapsed = time.perf_counter() - t
    assert len(lg.segments) == count and lg.log_end_offset == count * 10
    lg.close()
    shutil.rmtree(d)
    return {"name": f"open a directory of {count:,} segments (clean shutdown)", "value": elapsed, "unit": "s"}
