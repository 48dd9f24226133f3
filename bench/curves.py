"""Scaling curves: throughput vs partitions and vs log size, and peak memory vs records, each with a
raw-file peer on the same plot. Curves are measured once per point (they show a shape, not a ratio);
every timed phase starts after os.sync(), so no phase pays for the previous one's dirty pages."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import engine
from bench.codec import make_records
from bench.log import records_per_batch
from bench.peers import raw_read
from engine.common.clock import SystemClock
from engine.log.log_manager import LogManager
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.log.unified_log import UnifiedLog as Log


def _batch_16k() -> bytes:
    return engine.encode_batch(make_records(records_per_batch(16 << 10), 100))


def partitions_curve(quick: bool, scratch: str) -> dict:
    """MB/s appending 16 KiB batches round-robin over N partitions (one log directory)."""
    points = [1, 10, 100] if quick else [1, 10, 100, 1000]
    total = (8 << 20) if quick else (128 << 20)
    batch = _batch_16k()
    rounds = max(1, total // len(batch))
    curve = {"partitions": points, "series": {"kafkalog append": [], "raw write() to N files": []}}
    for n in points:
        d = tempfile.mkdtemp(dir=scratch)
        with LogManager(d, background=False) as manager:
            logs = [manager.create_log("bench", p) for p in range(n)]
            os.sync()
            t = time.perf_counter()
            for i in range(rounds):
                logs[i % n].append_as_leader(batch)
            curve["series"]["kafkalog append"].append(rounds * len(batch) / (time.perf_counter() - t) / 1e6)
        fds = [os.open(os.path.join(d, f"raw{p}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND) for p in range(n)]
        os.sync()
        t = time.perf_counter()
        for i in range(rounds):
            os.write(fds[i % n], batch)
        curve["series"]["raw write() to N files"].append(rounds * len(batch) / (time.perf_counter() - t) / 1e6)
        for fd in fds:
            os.close(fd)
        shutil.rmtree(d)
    return curve


def log_size_curve(quick: bool, long: bool, scratch: str) -> dict:
    """Append and columnar-consume MB/s for logs of growing size (1 MiB batches, 1 GiB segments)."""
    points = [10 << 20, 100 << 20] if quick else [10 << 20, 100 << 20, 1 << 30] + ([10 << 30] if long else [])
    batch = engine.encode_batch(make_records(records_per_batch(1 << 20), 100))
    names = ("kafkalog append", "raw write()", "kafkalog consume (columnar)", "raw read()")
    curve = {"log_bytes": points, "series": {name: [] for name in names}, "long_mode": long}
    for size in points:
        rounds = max(1, size // len(batch))
        nbytes = rounds * len(batch)
        d = tempfile.mkdtemp(dir=scratch)
        lg = Log(FileSystem(), os.path.join(d, "size-0"), LogConfig(), SystemClock())
        os.sync()
        t = time.perf_counter()
        for _ in range(rounds):
            lg.append_as_leader(batch)
        curve["series"]["kafkalog append"].append(nbytes / (time.perf_counter() - t) / 1e6)
        t = time.perf_counter()
        offset, rows = 0, 0
        while offset < lg.log_end_offset:
            cols = engine.decode_columnar(lg.read(offset, max_bytes=8 << 20).records)
            rows += len(cols)
            offset = cols.next_offset
        curve["series"]["kafkalog consume (columnar)"].append(lg.size_in_bytes() / (time.perf_counter() - t) / 1e6)
        assert rows == lg.log_end_offset
        lg.close()
        shutil.rmtree(d)  # each side starts with the same free page cache
        d = tempfile.mkdtemp(dir=scratch)
        fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.sync()
        t = time.perf_counter()
        for _ in range(rounds):
            os.write(fd, batch)
        os.close(fd)
        curve["series"]["raw write()"].append(nbytes / (time.perf_counter() - t) / 1e6)
        t = time.perf_counter()
        raw_read(os.path.join(d, "raw"))
        curve["series"]["raw read()"].append(nbytes / (time.perf_counter() - t) / 1e6)
        shutil.rmtree(d)
    return curve


_MEMORY_CHILD = r"""
import json, os, sys, tempfile
import engine
from engine.common.clock import SystemClock
from engine.segments.fs import FileSystem
from engine.log.unified_log import UnifiedLog as Log
from engine.segments.log_config import LogConfig
from bench.curves import peak_kib
path, count, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lg = Log(FileSystem(), path, LogConfig(), SystemClock())
for start in range(0, count, per):
    lg.append_as_leader(engine.encode_batch([(b"%016d" % i, b"v" * 100, None, 1) for i in range(start, min(start + per, count))]))
after_append = peak_kib()
offset = rows = 0
while offset < lg.log_end_offset:
    cols = engine.decode_columnar(lg.read(offset, max_bytes=8 << 20).records)
    rows += len(cols)
    offset = cols.next_offset
assert rows == count
print(json.dumps({"append_kib": after_append, "read_kib": peak_kib()}))
"""


_CLIENT_MEMORY_CHILD = r"""
import json, sys
import engine
from bench.curves import peak_kib
path, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with engine.open(path) as eng:
    eng.create_topic("mem", partitions=3)
    with eng.producer(linger_ms=5) as p:
        send = p.send
        for i in range(count):
            send("mem", b"v" * 100, b"%016d" % i)
    after_send = peak_kib()
    if mode == "group":  # three members, a partition each once the group is stable; each reads key and value
        members = [eng.consumer("mem", group_id="mem", auto_offset_reset="earliest") for _ in range(3)]
        while any(len(m.assignment()) != 1 for m in members):
            for m in members:
                m.poll(10, max_records=1)
                m.seek_to_beginning()
        seen = 0
        while seen < count:
            for m in members:
                for recs in m.poll(0, max_records=500).values():
                    seen += sum(1 for r in recs if r.key is not None and r.value is not None)
        assert seen == count
        for m in members:
            m.close()
    else:
        isolation = "read_committed" if mode == "read_committed" else "read_uncommitted"
        with eng.consumer("mem", auto_offset_reset="earliest", consumer_timeout_ms=0, isolation_level=isolation) as c:
            assert sum(1 for r in c if r.key is not None and r.value is not None) == count
print(json.dumps({"append_kib": after_send, "read_kib": peak_kib()}))
"""


def peak_kib() -> int:
    """This process's own high-water mark (ru_maxrss can inherit the parent's across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def memory_curve(quick: bool, scratch: str) -> dict:
    """Peak RSS (MiB) of a process that appends N records to a log then reads them all back, and of one that
    sends them with a Producer then reads them with a Consumer (one, read_committed, or three in a group)."""
    points = [100_000, 1_000_000] if quick else [1_000_000, 10_000_000]
    series = ["log append path", "log append + read path", "Producer.send() path", "Producer + Consumer path",
              "Producer + Consumer path, read_committed", "Producer + 3 Consumers in a group"]
    runs = [(_MEMORY_CHILD, [str(records_per_batch(16 << 10))], series[0], series[1]),
            (_CLIENT_MEMORY_CHILD, ["one"], series[2], series[3]),
            (_CLIENT_MEMORY_CHILD, ["read_committed"], None, series[4]),
            (_CLIENT_MEMORY_CHILD, ["group"], None, series[5])]
    curve = {"records": points, "series": {name: [] for name in series}}
    for n in points:
        for child, args, sent, read in runs:
            d = tempfile.mkdtemp(dir=scratch)
            out = subprocess.run([sys.executable, "-c", child, os.path.join(d, "mem-0"), str(n), *args],
                                 capture_output=True, text=True, check=True)
            peak = json.loads(out.stdout)
            if sent is not None:
                curve["series"][sent].append(peak["append_kib"] / 1024)
            curve["series"][read].append(peak["read_kib"] / 1024)
            shutil.rmtree(d)
    return curve
