"""Lazy partitions: opening a directory loads no partition's log until something uses it, idle partitions hold no
descriptor or mapping, creating and closing many partitions costs a bounded number of fsyncs, and after an unclean
shutdown recovery completes before a partition serves anything. The scale test (a child under `ulimit -n 1024`)
runs at KAFKALOG_SCALE_PARTITIONS partitions: 10,000 in `make test`, 100,000 in `make soak`."""
from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import engine
from engine.common.errors import KafkaStorageError
from engine.replication.partition import LazyPartition, Partition
from engine.segments import partition_metadata
from engine.segments.fs import FaultyFileSystem, FileSystem

ROOT = Path(__file__).resolve().parents[2]
SCALE = int(os.environ.get("KAFKALOG_SCALE_PARTITIONS", "10000"))


class CountingFS(FileSystem):
    """Counts the syncs that reach the device: fsyncs of files and directories, and whole-file-system syncs."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0

    def fsync(self, f) -> None:
        self.syncs += not self._deferring()
        super().fsync(f)

    def fsync_dir(self, path: str) -> None:
        self.syncs += not self._deferring()
        super().fsync_dir(path)

    def sync_filesystem(self, path: str) -> None:
        self.syncs += 1
        super().sync_filesystem(path)

    def _deferring(self) -> bool:
        return getattr(self._local, "owed", None) is not None


class ListingFS(FileSystem):
    """Notes the directories listed and the files opened (name, mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []
        self.opened: list[tuple[str, str]] = []

    def listdir(self, path: str) -> list[str]:
        self.listed.append(os.path.basename(os.path.normpath(path)))
        return super().listdir(path)

    def open(self, path: str, mode: str = "rb"):
        self.opened.append((os.path.basename(path), mode))
        return super().open(path, mode)


def _loaded(e) -> list:
    return e._logs.loaded_logs()


def _fill(path, partitions: int, records: dict[int, int]) -> dict[int, list[bytes]]:
    """A clean directory of one topic; `records[p]` values in partition p. What each partition holds."""
    held = {p: [b"%d-%d" % (p, i) for i in range(records.get(p, 0))] for p in range(partitions)}
    with engine.open(path) as e:
        e.create_topic("t", partitions)
        with e.producer(linger_ms=0) as prod:
            for p, values in held.items():
                for v in values:
                    prod.send("t", v, partition=p)
    return held


def _read(e, p: int) -> list[bytes]:
    with e.consumer(auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        c.assign([engine.TopicPartition("t", p)])
        return [r.value for r in c]


def test_a_clean_open_loads_no_log_and_a_use_loads_only_that_one(tmp_path):
    held = _fill(tmp_path / "d", 40, {3: 5, 7: 2, 39: 1})
    fs = CountingFS()
    with engine.open(tmp_path / "d", fs=fs) as e:
        assert _loaded(e) == [] and fs.open_handles() == 0
        assert e.describe_topic("t").partitions[3].log_end_offset == 5  # (a description loads what it describes)
        assert _read(e, 7) == held[7]
        assert {os.path.basename(lg.dir) for lg in _loaded(e)} == {f"t-{p}" for p in range(40)}
    with engine.open(tmp_path / "d") as e:
        assert _read(e, 39) == held[39] and [os.path.basename(lg.dir) for lg in _loaded(e)] == ["t-39"]
        assert e.partition("t", 12).log_end_offset == 0
        assert len(_loaded(e)) == 2


def test_a_partition_made_here_loads_without_listing_its_directory_and_opens_its_log_once(tmp_path):
    """A partition created in this process holds only its partition.metadata until it loads, so its first load lists
    nothing, and its first segment's `.log` is created and appended to through one descriptor; its indexes are made
    by the close (a few appends add no entry); a partition found on open is listed as it loads."""
    fs = ListingFS()
    with engine.open(tmp_path / "d", fs=fs) as e:
        e.create_topic("t", 3)
        fs.listed.clear()
        fs.opened.clear()
        with e.producer(linger_ms=0) as prod:
            for p in range(3):
                assert prod.send("t", b"v%d" % p, partition=p).get().offset == 0
        assert not [d for d in fs.listed if d.startswith("t-")], fs.listed
        assert [o for o in fs.opened if o[0].endswith(".log")] == [("00000000000000000000.log", "ab+")] * 3
        assert not [o for o in fs.opened if o[0].endswith(("index", ".snapshot"))], fs.opened  # (made on close)
    for p in range(3):  # a clean close made each file a load expects
        assert {f for f in os.listdir(tmp_path / "d" / f"t-{p}") if f.startswith("0")} == {
            "00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
            "00000000000000000001.snapshot"}
    with engine.open(tmp_path / "d", fs=fs) as e:
        fs.listed.clear()
        assert _read(e, 1) == [b"v1"] and "t-1" in fs.listed


def test_a_drain_or_a_poll_that_first_uses_many_partitions_loads_them_with_the_collector_paused(tmp_path, monkeypatch):
    """Each first use loads a log (a few dozen long-lived objects): a producer's drain and a consumer's assignment that
    make many at once do it with CPython's cyclic collector paused (engine.common.gc_pause), which runs again after;
    the appends, which may wait (acks, retries), run with it as it was."""
    from engine.engine import Engine
    from engine.replica_manager import ReplicaManager
    seen, appending = [], []
    made, append = ReplicaManager.made, Engine.append
    monkeypatch.setattr(ReplicaManager, "made", lambda self, part: (seen.append(gc.isenabled()), made(self, part))[1])
    monkeypatch.setattr(Engine, "append",
                        lambda self, *a, **k: (appending.append(gc.isenabled()), append(self, *a, **k))[1])
    assert gc.isenabled()
    with engine.open(tmp_path / "d") as e:
        e.create_topic("t", 50)
        with e.producer(linger_ms=60_000) as prod:
            for p in range(50):
                prod.send("t", b"v", partition=p)
            prod.flush()
        assert seen == [False] * 50 and appending == [True] * 50 and gc.isenabled()
    seen.clear()
    with engine.open(tmp_path / "d") as e:
        with e.consumer(auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
            c.assign([engine.TopicPartition("t", p) for p in range(50)])
            assert len(list(c)) == 50
        assert seen[:50] == [False] * 50 and gc.isenabled()


def test_checkpoints_of_unloaded_logs_survive_opens_that_never_load_them(tmp_path):
    """The recovery point, the log start (after delete_records) and the high watermark of a log no one loads are
    written back as they were read, open after open; then a load finds them."""
    _fill(tmp_path / "d", 3, {0: 10, 1: 10})
    with engine.open(tmp_path / "d") as e:
        e.partition("t", 1).delete_records(4)
        before = [(p.log_start_offset, p.log_end_offset, p.high_watermark) for p in e.describe_topic("t").partitions]
    for i in range(2):
        with engine.open(tmp_path / "d") as e:
            e.create_topic(f"other{i}", 2)  # a change that writes every checkpoint again
            assert _loaded(e) == []
    with engine.open(tmp_path / "d") as e:
        after = [(p.log_start_offset, p.log_end_offset, p.high_watermark) for p in e.describe_topic("t").partitions]
        assert after == before == [(0, 10, 10), (4, 10, 10), (0, 0, 0)]
        assert e.recovery_notes() == []  # every log was closed clean: nothing was recovered
        assert _read(e, 1) == [b"1-%d" % i for i in range(4, 10)]


def test_a_new_topic_is_described_without_loading_and_as_a_loaded_one_would_be(tmp_path):
    with engine.open(tmp_path / "d") as e:
        fresh = e.create_topic("t", 5, config={"cleanup.policy": "compact"})
        assert _loaded(e) == []
        assert e.describe_topic("t") == fresh  # (this one loads every partition)
        assert len(_loaded(e)) == 5


def _syncs_to_create_and_close(path, partitions: int) -> tuple[int, int]:
    fs = CountingFS()
    e = engine.open(path, fs=fs, background=False)
    fs.syncs = 0
    e.create_topic("t", partitions)
    created = fs.syncs
    with e.producer(linger_ms=0) as prod:
        for p in range(partitions):
            prod.send("t", b"v", partition=p)
    fs.syncs = 0
    e.close()
    return created, fs.syncs


def test_creating_and_closing_partitions_costs_the_same_syncs_whatever_their_count(tmp_path):
    """Creating: one sync of the file system for the partitions, then the catalogue's file and directory. Closing:
    the logs' fsyncs as one sync, then each checkpoint file and the clean-shutdown marker, file and directory."""
    few, many = _syncs_to_create_and_close(tmp_path / "few", 20), _syncs_to_create_and_close(tmp_path / "many", 400)
    assert few == many and many[0] == 3 and many[1] <= 1 + 2 * 5, (few, many)


def test_a_partition_directory_of_another_topic_id_is_set_aside_when_first_used(tmp_path):
    """A directory whose partition.metadata names another topic id (a topic of that name deleted while a crash kept
    its directory) is set aside as `-stray` when its log first loads, as KRaft brokers do on open, and the partition
    starts empty; a missing partition.metadata is written again from the catalogue, the records kept."""
    held = _fill(tmp_path / "d", 3, {0: 3, 1: 3, 2: 4})
    partition_metadata.write(FileSystem(), str(tmp_path / "d" / "t-1"), partition_metadata.new_topic_id())
    os.remove(tmp_path / "d" / "t-2" / "partition.metadata")
    with engine.open(tmp_path / "d") as e:
        assert _read(e, 0) == held[0] and e.recovery_notes() == []
        assert _read(e, 1) == [] and _read(e, 2) == held[2]
        notes = e.recovery_notes()
        assert [n for n in notes if "t-1" in n and "aside" in n and "-stray" in n], notes
        assert [n for n in notes if "t-2" in n and "missing partition.metadata" in n and "4 records" in n], notes
        topic_id = e.describe_topic("t").topic_id
    strays = [d for d in os.listdir(tmp_path / "d") if d.startswith("t-1.") and d.endswith("-stray")]
    assert len(strays) == 1 and os.path.getsize(tmp_path / "d" / strays[0] / "00000000000000000000.log") > 0
    for p in (1, 2):
        assert partition_metadata.read(FileSystem(), str(tmp_path / "d" / f"t-{p}")) == topic_id


def test_a_partition_set_aside_is_loud_until_it_is_checked_and_restored(tmp_path):
    """A flipped bit in a partition.metadata makes the partition look like another topic's: it is set aside as -stray
    and served empty, as KRaft brokers do, but never silently: health(), `kafkalog health`, describe_topic,
    `kafkalog verify` (with the records it holds) and `kafkalog recover` name it, and `kafkalog recover
    --restore-stray` puts it back (only in place of an empty partition that has not been used)."""
    from engine.common.errors import InvalidRequestError
    from engine.replica_manager import STRAY
    from tests.unit.test_cli import run

    d = tmp_path / "d"
    held = _fill(d, 3, {0: 2, 1: 343, 2: 1})
    meta = d / "t-1" / "partition.metadata"
    text = meta.read_bytes()
    flipped = bytearray(text)
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    # one bit of the topic id's text that keeps it in base64's alphabet (for "-" only the 64s bit does)
    flipped[-3] ^= next(bit for bit in (1, 2, 4, 8, 16, 32, 64) if flipped[-3] ^ bit in alphabet)
    meta.write_bytes(bytes(flipped))
    with engine.open(d) as e:
        assert e.health() == []  # (a lazy partition is checked as it first loads)
        assert _read(e, 1) == [] and _read(e, 0) == held[0]
        [stray] = e.health()
        assert stray.task == STRAY and "t-1" in stray.error and "restore-stray" in stray.error
        parts = e.describe_topic("t").partitions
        name = os.path.basename(parts[1].set_aside[0])
        assert name.startswith("t-1.") and name.endswith("-stray") and parts[0].set_aside == parts[2].set_aside == ()
        with e.producer(linger_ms=0) as prod:
            prod.send("t", b"new", partition=1).get()
        with pytest.raises(InvalidRequestError, match="holds records"):  # (it would hide what was written since)
            e.restore_stray(str(d / name))
    out = run("health", "--data", d, check=1).stdout
    assert "SET ASIDE" in out and name in out
    problems = json.loads(run("verify", d, "--json", check=1).stdout)["problems"]
    assert [p["message"] for p in problems if "343 records (offsets 0 to 342)" in p["message"]
            and name in p["message"]], problems
    assert len(problems) == 1, problems  # its files are checked like the others: nothing else is wrong
    assert "holds records" in run("recover", d, "--restore-stray", name, check=1).stderr
    # the record written to the empty partition meanwhile goes; then the stray goes back
    with engine.open(d) as e:
        e.delete_topic("t")
        e.create_topic("t", 3)
    meta_dir = d / name
    report = json.loads(run("recover", d, "--restore-stray", name, "--json").stdout)
    assert report["restored"] == {"topic": "t", "partition": 1, "logStartOffset": 0, "logEndOffset": 343}
    assert not os.path.exists(meta_dir) and report["setAside"] == []
    with engine.open(d) as e:
        assert _read(e, 1) == held[1] and e.health() == []
        assert e.describe_topic("t").partitions[1].set_aside == ()
        with pytest.raises(InvalidRequestError, match="not a partition"):
            e.restore_stray(str(d / name))
    run("verify", d)


TORN = b"\x00torn tail of a batch that never completed"
KILLED = """
import os, signal, sys
import engine
e = engine.open(sys.argv[1])
e.create_topic("t", int(sys.argv[2]))
with e.producer(linger_ms=0) as p:
    for i in range(3 * int(sys.argv[2])):
        p.send("t", b"%d" % i, partition=i % int(sys.argv[2]))
lg = e.log("t", 0)
with open(lg.active_segment.log_path, "ab") as f:
    f.write(TORN_BYTES)
os.kill(os.getpid(), signal.SIGKILL)
""".replace("TORN_BYTES", repr(TORN))


def test_after_kill_9_each_partition_is_recovered_before_it_serves_and_the_marker_waits_for_all(tmp_path):
    n = 300
    out = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "d"), str(n)], cwd=ROOT, capture_output=True)
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    e = engine.open(tmp_path / "d", background=False)  # (no recovery threads: only uses load, and recover, logs)
    assert not e.closed_cleanly() and _loaded(e) == []
    assert _read(e, 0) == [b"%d" % i for i in range(0, 3 * n, n)]  # the torn tail is cut before the read
    assert len(_loaded(e)) == 1 and _loaded(e)[0].recovery.bytes_truncated == len(TORN)
    # loading a partition's log alone settles its HW, which the checkpoint may lag; the partition is not made by it
    lazy = e.replicas.leaders[("t", 1)]
    assert type(lazy) is LazyPartition and lazy.loaded_log is None
    log = lazy.load_log()
    assert log.high_watermark == log.log_end_offset == 3 and e.replicas.leaders[("t", 1)] is lazy
    # its first use through the engine makes it: one Partition over that log, in the place of the placeholder
    part = e.partition("t", 1)
    assert type(part) is Partition and part.log is log and part.fetch_upper_bound() == 3 and part.leader_epoch == 0
    assert e.replicas.leaders[("t", 1)] is part and e.replicas.brokers[0].partitions[("t", 1)] is part
    assert type(lazy) is LazyPartition and e.partition("t", 1) is part  # (the placeholder stays what it was)
    e.close()
    assert not (tmp_path / "d" / ".kafka_cleanshutdown").exists()  # 299 logs were never recovered
    with engine.open(tmp_path / "d") as e:
        assert not e.closed_cleanly()
        notes = e.recovery_notes()  # recovers what the recovery threads did not reach yet
        assert all(slot.loaded for slot in e._logs.slots().values())
        assert "t-0: re-validated segments [0], cutting 0 bytes" in notes, notes  # cut by the first open already
        assert [_read(e, p) for p in (1, n - 1)] == [[b"%d" % i for i in range(p, 3 * n, n)] for p in (1, n - 1)]
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()


SCALED = """
import json, os, resource, sys, time
import engine
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
path, n = sys.argv[1], int(sys.argv[2])
def maps():
    return sum(1 for _ in open("/proc/self/maps"))
out = {}
with engine.open(path) as e:
    out["budget"] = e.fs.fd_budget
    e.create_topic("many", n)
    with e.producer() as p:
        for i in range(2 * n):
            p.send("many", b"%d" % i, key=b"k%d" % i)
    out["high_watermarks"] = sum(part.high_watermark for part in e.describe_topic("many").partitions)
base_maps = maps()
with engine.open(path) as e:
    out["loaded_on_open"] = len(e._logs.loaded_logs())
    out["fds_on_open"] = len(os.listdir("/proc/self/fd"))
    out["maps_added_on_open"] = maps() - base_maps
    with e.consumer(auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        c.assign([engine.TopicPartition("many", n // 2)])
        out["one_read"] = len(list(c))
    out["loaded_after_one_read"] = len(e._logs.loaded_logs())
    out["one_high_watermark"] = e.partition("many", n // 2).high_watermark
    with e.consumer("many", auto_offset_reset="earliest") as c:
        seen = 0
        while got := c.poll(max_records=20000):
            seen += sum(map(len, got.values()))
        out["read_all"] = seen
        out["fds_after_all"] = len(os.listdir("/proc/self/fd"))
print(json.dumps(out))
"""


def test_many_partitions_open_lazily_under_ulimit_1024(tmp_path):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCALED), str(tmp_path / "many"), str(SCALE)],
                         cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["high_watermarks"] == got["read_all"] == 2 * SCALE, got
    assert got["loaded_on_open"] == 0 and got["loaded_after_one_read"] == 1, got
    assert got["one_read"] == got["one_high_watermark"] > 0, got
    # no descriptor or mapping per idle partition: what any process holds, and the pool's bounded set after a read
    assert got["fds_on_open"] <= 16 and got["maps_added_on_open"] <= 16, got
    assert got["fds_after_all"] <= got["budget"] + 16, got


def test_a_power_cut_after_a_creation_keeps_the_topic_whole_and_a_failed_sync_leaves_it_absent(tmp_path):
    """The partitions a creation writes without fsyncs are made durable by its one sync of the file system, before
    the catalogue names them: a power cut right after it leaves every partition whole; a sync that fails undoes the
    creation, so the topic is absent whatever the cut keeps."""
    fs = FaultyFileSystem(seed=3)
    e = engine.open(tmp_path / "d", fs=fs, background=False)
    e.create_topic("kept", 30)
    fs.arm("fsync")  # the creation's sync of the file system fails
    with pytest.raises(KafkaStorageError):
        e.create_topic("lost", 30)
    e._logs._release_lock()  # the process dies: the kernel drops its lock
    fs.lose_unsynced()  # and the power goes: only what was synced is left
    with engine.open(tmp_path / "d", background=False) as reopened:
        assert reopened.list_topics() == ["kept"]
        assert [p.log_end_offset for p in reopened.describe_topic("kept").partitions] == [0] * 30
        assert reopened.recovery_notes() == []  # no partition.metadata had to be written again
        topic_id = reopened.describe_topic("kept").topic_id
    for p in range(30):
        assert partition_metadata.read(FileSystem(), str(tmp_path / "d" / f"kept-{p}")) == topic_id
    assert not [d for d in os.listdir(tmp_path / "d") if d.startswith("lost-")]
