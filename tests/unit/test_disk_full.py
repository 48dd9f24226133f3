"""A full disk for 10 s of engine time: appends fail with a typed error and lose nothing acknowledged, the log says so in
a few lines (once per failing task, once when it recovers) instead of on every retry, `Engine.health()` and
`kafkalog health` show the failing tasks, and appends resume once there is room again.

The disk is a real 8 MiB tmpfs where this process may mount one (root on Linux); elsewhere the file-system seam's
persistent ENOSPC stands in for it."""
from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import subprocess
import time

import pytest

import engine
from engine.common import health
from engine.common.errors import KafkaError, KafkaStorageError
from engine.tools import cli
from engine.segments.fs import FaultyFileSystem


class _RealDisk:
    """An 8 MiB tmpfs, filled by one file and emptied by removing it."""

    def __init__(self, root: str) -> None:
        self.root, self.fs = root, None
        os.makedirs(root)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", root], check=True, capture_output=True)

    def fill(self) -> None:
        with open(os.path.join(self.root, "filler"), "wb", buffering=0) as f:
            for chunk in (65536, 4096, 1):  # to the last byte
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * chunk)

    def free(self) -> None:
        os.remove(os.path.join(self.root, "filler"))

    def close(self) -> None:
        subprocess.run(["umount", "-l", self.root], check=False, capture_output=True)


class _InjectedDisk:
    """The seam's ENOSPC on every write until freed."""

    def __init__(self, root: str) -> None:
        self.root, self.fs = root, FaultyFileSystem(seed=9)

    def fill(self) -> None:
        self.fs.arm("write", error=errno.ENOSPC, persistent=True)

    def free(self) -> None:
        self.fs.clear()


@pytest.fixture
def disk(tmp_path):
    try:
        d = _RealDisk(str(tmp_path / "tmpfs"))
    except (OSError, subprocess.CalledProcessError):
        yield _InjectedDisk(str(tmp_path / "seam"))
        return
    yield d
    d.close()


def _send(eng, i: int):
    return eng.append("t", 0, engine.encode_batch([(b"k", b"record-%d" % i + b"x" * 200, None, 1_000 + i)]))


def test_ten_seconds_of_full_disk(disk, caplog):
    clock = engine.ManualClock()
    path = os.path.join(disk.root, "d")
    caplog.set_level(logging.INFO, logger="kafkalog")
    acked = []
    with engine.open(path, clock=clock, fs=disk.fs, hw_checkpoint_interval_ms=1_000) as eng:
        eng.create_topic("t", config={"segment.bytes": 64 << 10, "flush.ms": 500})
        for i in range(50):
            acked.append((_send(eng, i).first_offset, b"record-%d" % i))
        caplog.clear()
        disk.fill()
        refused = 0
        for step in range(100):  # 10 s of engine time, 100 ms a step: appends and background work meet the full disk
            clock.advance(100)
            time.sleep(0.01)  # the background thread's turn
            try:
                info = _send(eng, 1_000 + step)
                acked.append((info.first_offset, b"record-%d" % (1_000 + step)))
            except KafkaError as exc:
                assert isinstance(exc, KafkaStorageError), exc  # typed, and the storage's
                refused += 1
        failing = eng.health()
        assert refused > 0 and failing, "a full disk went unnoticed"
        assert all(f.attempts >= 1 and f.since_ms <= clock.time_ms() for f in failing)
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        tasks = {f.task for f in failing}
        assert len(said) <= 2 * len(tasks) + 2, "\n".join(r.getMessage() for r in said)
        disk.free()
        caplog.clear()
        for _ in range(200):  # room again: the failing tasks recover within their backoff, and appends resume
            clock.advance(100)
            time.sleep(0.01)
            if not eng.health():
                break
        assert not eng.health()
        recovered = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
        assert len(recovered) == len(tasks), recovered
        for i in range(5):
            acked.append((_send(eng, 2_000 + i).first_offset, b"record-%d" % (2_000 + i)))
    with engine.open(path, fs=disk.fs, background=False) as eng:
        c = eng.consumer(auto_offset_reset="earliest")
        c.assign([engine.TopicPartition("t", 0)])
        got = {}
        while polled := c.poll(max_records=10_000):
            got.update((r.offset, r.value[:len(b"record-0000")].rstrip(b"x")) for rs in polled.values() for r in rs)
        for offset, value in acked:
            assert got.get(offset) == value, f"acked offset {offset} lost after the full disk"


def test_health_command_reports_a_full_disk(disk):
    path = os.path.join(disk.root, "d")
    with engine.open(path, fs=disk.fs) as eng:
        eng.create_topic("t")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["health", "--data", path, "--json"]) == 0
    assert json.loads(out.getvalue()) == {"healthy": True, "failing": []}
    if disk.fs is not None:  # the seam stands in for the disk: ask the engine itself, as the command does
        with engine.open(path, fs=disk.fs, background=False) as eng:
            disk.fill()
            failing = eng.check_storage()
            disk.free()
            assert eng.check_storage() == []  # room again: the tasks recover, and the probe's failure was not kept
            _send(eng, 1)
        assert {f.task for f in failing} >= {"write-probe"}
        return
    disk.fill()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["health", "--data", path, "--json"])
    disk.free()
    assert status == 1
    with engine.open(path) as eng:  # room again: the directory takes appends
        _send(eng, 1)
    report = json.loads(out.getvalue().splitlines()[0])
    assert not report["healthy"] and {f["task"] for f in report["failing"]} >= {"write-probe"}
    assert all("No space left" in f["error"] or "ENOSPC" in f["error"] for f in report["failing"])


def test_backoff_grows_to_its_cap_and_never_passes_the_tasks_interval():
    h = health.Health("here", logging.getLogger("kafkalog.test"))
    delays = [h.failed("t", OSError(errno.ENOSPC, "full"), 0, 60_000) for _ in range(6)]
    assert delays == [1_000, 2_000, 4_000, health.MAX_RETRY_MS, health.MAX_RETRY_MS, health.MAX_RETRY_MS]
    assert h.failed("short", OSError(errno.ENOSPC, "full"), 0, 200) == health.RETRY_MS
    assert health.Health("x", logging.getLogger("kafkalog.test")).failed("u", OSError(5, "io"), 0, 3_000) == 1_000


def test_readers_go_on_while_the_disk_is_full(disk):
    """Appends fail typed on a full disk; a consumer reading from the beginning meanwhile gets every acknowledged
    record (a lookup's index entries still buffered are not written first: reading needs no space)."""
    path = os.path.join(disk.root, "r")
    eng = engine.open(path, fs=disk.fs, background=False)
    try:
        eng.create_topic("t", config={"segment.bytes": 64 << 10, "index.interval.bytes": 256})
        acked = [(_send(eng, i).first_offset, b"record-%d" % i) for i in range(700)]  # segments, entries buffered
        disk.fill()
        with pytest.raises(KafkaStorageError):
            for i in range(700, 100_000):  # the real disk may take a few more into pages it had
                acked.append((_send(eng, i).first_offset, b"record-%d" % i))
        assert eng.log("t", 0).active_segment.offset_index.pending, "no index entry left buffered"
        for _ in range(2):  # twice: a lookup that could not write its buffered entries leaves them for the next
            c = eng.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=4096)
            c.assign([engine.TopicPartition("t", 0)])
            got = {}
            while polled := c.poll(max_records=500):
                got.update((r.offset, r.value.rstrip(b"x")) for rs in polled.values() for r in rs)
            assert [got.get(offset) for offset, _ in acked] == [value for _, value in acked]
            tp, last = engine.TopicPartition("t", 0), acked[-1][0]  # by time: the time index, its entries buffered too
            assert c.offsets_for_times({tp: 1_000 + last}) == {tp: engine.OffsetAndTimestamp(last, 1_000 + last)}
            c.close()
    finally:
        disk.free()
        eng.close()  # room again: the buffered entries are written, the directory closes cleanly
    with engine.open(path, fs=disk.fs, background=False) as eng:
        assert eng.clean_shutdown
