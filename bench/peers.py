"""Peers that are not Kafka clients: sqlite3 in WAL mode (a durable local log) and raw file I/O."""
from __future__ import annotations

import os
import sqlite3


class SqliteLog:
    """A log as most Python services would keep one: a WAL-mode sqlite table keyed by offset."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # fsync at checkpoints: Kafka's default durability
        self.db.execute("CREATE TABLE IF NOT EXISTS log (offset INTEGER PRIMARY KEY, ts INTEGER, key BLOB, value BLOB)")
        self.db.execute("CREATE INDEX IF NOT EXISTS log_ts ON log (ts)")
        self.next = 0

    def append(self, records: list[tuple]) -> None:
        """One transaction per batch, as a batching producer would write."""
        rows = [(self.next + i, ts, k, v) for i, (k, v, _h, ts) in enumerate(records)]
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO log VALUES (?, ?, ?, ?)", rows)
        self.db.execute("COMMIT")
        self.next += len(rows)

    def read(self, offset: int, count: int = 1) -> list:
        return self.db.execute("SELECT offset, ts, key, value FROM log WHERE offset >= ? ORDER BY offset LIMIT ?",
                               (offset, count)).fetchall()

    def offset_for_timestamp(self, ts: int):
        return self.db.execute("SELECT ts, offset FROM log WHERE ts >= ? ORDER BY ts, offset LIMIT 1",
                               (ts,)).fetchone()

    def close(self) -> None:
        self.db.close()


def raw_read(path: str, chunk: int = 1 << 20) -> int:
    """Read a file sequentially with read(); return the bytes read."""
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            n = len(os.read(fd, chunk))
            if not n:
                return total
            total += n
    finally:
        os.close(fd)


def stat_all(directory: str) -> int:
    """List a directory and stat every file in it (the floor for opening a log of many segments)."""
    return sum(os.stat(os.path.join(directory, f)).st_size for f in os.listdir(directory))
