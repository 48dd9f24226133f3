"""Log compaction: how fast a compacted topic is cleaned, and the memory a clean takes per million distinct keys.

One log is built here: 100 B values under 16 B keys, each key written 4 times on average, 5% of the writes
tombstones, in 16 KiB batches and 64 MiB segments; the log is rolled so every segment is cleanable. Each
repetition cleans a fresh copy of it with `Engine.compact` (the cleaner's one pass; the offset map is sized
for every key) and is compared in the same run with:
- a plain copy of the same segment files (the floor: reading and writing every byte once, no work per record);
- sqlite3, the same rows in a table keyed by offset with an index on (key, offset), its best configuration for
  this job (WAL, synchronous=NORMAL): `DELETE` of every row a later row of its key supersedes, then `VACUUM`.
Throughput is MB of log read per second. Peak memory is measured in a fresh process (so no other workload's
heap counts): the growth of its anonymous resident memory during the clean, sampled every millisecond, per million
distinct keys (file pages of mapped segments, or of sqlite's database, are the page cache's, not counted).
"""
from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import engine
from bench.runner import figure, rotated

VALUE, KEY = 100, 16


def _rows(n: int, seed: int = 1):
    rng = random.Random(seed)
    keys = max(1, n // 4)
    for i in range(n):
        key = b"%016d" % rng.randrange(keys)
        yield key, (None if rng.random() < 0.05 else rng.randbytes(VALUE))


def build(path: str, n: int) -> int:
    """The benchmark's log under `path` (topic `t`); returns the number of distinct keys."""
    with engine.open(path, background=False, cleaner_config={"log_cleaner_enable": False}) as e:
        e.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 64 << 20})
        p = e.producer(linger_ms=5, batch_size=16 << 10, enable_idempotence=False)
        keys = set()
        for key, value in _rows(n):
            p.send("t", key=key, value=value)
            keys.add(key)
        p.flush()
        e.log("t", 0).roll()
        return len(keys)


def _log_bytes(path: str) -> int:
    part = os.path.join(path, "t-0")
    return sum(os.path.getsize(os.path.join(part, f)) for f in os.listdir(part) if f.endswith(".log"))


def _cleaner(keys: int) -> dict:
    """An offset map with room for every key in one pass (at the 0.9 load factor), and no background cleaner."""
    return {"log_cleaner_enable": False, "log_cleaner_dedupe_buffer_size": max(1 << 20, keys * 24 * 10 // 8)}


def clean_once(template: str, keys: int, scratch: str) -> float:
    """Seconds to compact a fresh copy of the template log (the copy is not timed)."""
    work = tempfile.mkdtemp(dir=scratch)
    shutil.copytree(template, work, dirs_exist_ok=True)
    try:
        with engine.open(work, background=False, cleaner_config=_cleaner(keys)) as e:
            start = time.perf_counter()
            e.compact("t")
            return time.perf_counter() - start
    finally:
        shutil.rmtree(work)


def copy_once(template: str, scratch: str) -> float:
    """Seconds to copy the same segment files (read and write every byte once)."""
    part = os.path.join(template, "t-0")
    work = tempfile.mkdtemp(dir=scratch)
    try:
        start = time.perf_counter()
        for f in sorted(os.listdir(part)):
            if f.endswith((".log", ".index", ".timeindex")):
                shutil.copyfile(os.path.join(part, f), os.path.join(work, f))
                with open(os.path.join(work, f), "rb+") as out:
                    os.fsync(out.fileno())  # the cleaner makes its segments durable before the swap too
        return time.perf_counter() - start
    finally:
        shutil.rmtree(work)


def sqlite_db(n: int, scratch: str) -> str:
    """The same rows in a sqlite3 database, indexed for the job (not timed)."""
    path = os.path.join(tempfile.mkdtemp(dir=scratch), "log.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, key BLOB NOT NULL, value BLOB)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO log VALUES (?, ?, ?)", ((i, k, v) for i, (k, v) in enumerate(_rows(n))))
    db.execute("COMMIT")
    db.execute("CREATE INDEX by_key ON log (key, offset)")
    db.close()
    return path


def sqlite_compact(path: str) -> float:
    """Seconds for sqlite3 to drop superseded rows and reclaim their space."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous=NORMAL")
        start = time.perf_counter()
        db.execute("DELETE FROM log WHERE offset < (SELECT MAX(l.offset) FROM log l WHERE l.key = log.key)")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        return time.perf_counter() - start
    finally:
        db.close()


def sqlite_once(n: int, scratch: str) -> float:
    path = sqlite_db(n, scratch)
    try:
        return sqlite_compact(path)
    finally:
        shutil.rmtree(os.path.dirname(path))


def peak_memory_per_million_keys(what: str, path: str, keys: int) -> float:
    """MiB of peak RSS the compaction of `path` adds, per million distinct keys, in a fresh process."""
    out = subprocess.run([sys.executable, "-m", "bench.compaction", what, path, str(keys)], capture_output=True,
                         text=True, check=True, timeout=3600).stdout.split()
    before, after = int(out[-2]), int(out[-1])
    return (after - before) / 1024 / (keys / 1e6)


def figures(quick: bool, scratch: str) -> list[dict]:
    n = 100_000 if quick else 2_000_000
    reps = 1 if quick else 3
    template = tempfile.mkdtemp(dir=scratch)
    keys = build(template, n)
    mb = _log_bytes(template) / 1e6
    runs = [rotated(rep, [lambda: mb / clean_once(template, keys, scratch), lambda: mb / copy_once(template, scratch),
                          lambda: mb / sqlite_once(n, scratch)]) for rep in range(reps)]
    ours, copies, lite = (list(column) for column in zip(*runs))

    def ours_memory() -> float:
        work = tempfile.mkdtemp(dir=scratch)
        shutil.copytree(template, work, dirs_exist_ok=True)
        try:
            return peak_memory_per_million_keys("kafkalog", work, keys)
        finally:
            shutil.rmtree(work)

    def sqlite_memory() -> float:
        db = sqlite_db(n, scratch)
        try:
            return peak_memory_per_million_keys("sqlite", db, keys)
        finally:
            shutil.rmtree(os.path.dirname(db))
    ours_mem, lite_mem = (list(column) for column in zip(*[rotated(rep, [ours_memory, sqlite_memory])
                                                           for rep in range(reps)]))
    shutil.rmtree(template)
    label = f"compaction of {n:,} records ({keys:,} keys, {mb:.0f} MB)"
    return [
        figure(f"{label}, MB/s of log read", ours, "MB/s", "plain copy of the same segment files", copies, False,
                ratio_target=0.5),
        figure(f"{label}, MB/s of log read", ours, "MB/s", "sqlite3 DELETE superseded rows + VACUUM", lite, False),
        figure(f"{label}, peak RSS growth in a fresh process", ours_mem, "MiB per million keys",
                "sqlite3 DELETE superseded rows + VACUUM", lite_mem, True),
    ]


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(field + ":")))


def _sampled_peak(run) -> tuple[int, int]:
    """(anonymous RSS in KiB before `run()`, its peak while it runs, sampled every millisecond): the process's own
    memory, not the file pages a mapped segment or database brings into its RSS."""
    stop, peak = threading.Event(), [0]

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _status("RssAnon"))
            time.sleep(0.001)
    before = _status("RssAnon")
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run()
    finally:
        stop.set()
        sampler.join()
    return before, max(peak[0], _status("RssAnon"))


def _measure(what: str, path: str, keys: int) -> None:
    """In a fresh process: anonymous RSS (KiB) before compacting `path` (a log directory or a database), and its
    peak during the compaction."""
    if what == "sqlite":
        before, peak = _sampled_peak(lambda: sqlite_compact(path))
    else:
        with engine.open(path, background=False, cleaner_config=_cleaner(keys)) as e:
            before, peak = _sampled_peak(lambda: e.compact("t"))
    print(before, peak)


if __name__ == "__main__":
    _measure(sys.argv[1], sys.argv[2], int(sys.argv[3]))
