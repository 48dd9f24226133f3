"""`kafkalog handoff` against a broker-shaped log directory (meta.properties, a partition directory with the broker's
partition.metadata, an empty segment, the broker's epoch): the files land with the broker's topic id and the
checkpoints a broker reads, and every refusal happens before anything changes. (A real broker serving a handed
directory: tests/broker, `make interop`.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import engine
from engine.common import errors
from engine.common.structs import TopicPartition
from engine.segments import leader_epoch_checkpoint, offset_checkpoint, partition_metadata
from engine.segments.fs import FileSystem
from engine.tools.handoff import handoff

BROKER_TOPIC_ID = "q2Rz1DLlRcOvfbSjQUg5Rg"


def _broker_dir(path, topic: str, partitions: int, epoch: int = 3, records: bool = False) -> str:
    """What a KRaft broker leaves after creating `topic` and a controlled shutdown."""
    fs = FileSystem()
    os.makedirs(path)
    with open(os.path.join(path, "meta.properties"), "w") as f:
        f.write("version=1\nnode.id=1\ncluster.id=abc\n")
    open(os.path.join(path, ".kafka_cleanshutdown"), "w").close()
    os.makedirs(os.path.join(path, "__cluster_metadata-0"))
    for p in range(partitions):
        d = os.path.join(path, f"{topic}-{p}")
        os.makedirs(d)
        partition_metadata.write(fs, d, BROKER_TOPIC_ID)
        with open(os.path.join(d, "00000000000000000000.log"), "wb") as f:
            f.write(b"x" if records else b"")
        fs.atomic_write(os.path.join(d, leader_epoch_checkpoint.FILE), leader_epoch_checkpoint.render([(epoch, 0)]))
    return str(path)


def _fill(path: str, topic: str, partitions: int, n: int) -> dict[int, list]:
    with engine.open(path) as eng:
        eng.create_topic(topic, partitions)
        with eng.producer() as p:
            for i in range(n):
                p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions, timestamp_ms=1000 + i)
    return {p: [(b"k%d" % i, b"v%d" % i) for i in range(p, n, partitions)] for p in range(partitions)}


def _read(path: str, topic: str, partitions: int) -> dict[int, list]:
    out = {}
    with engine.open(path) as eng:
        with eng.consumer(enable_auto_commit=False) as c:
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                c.assign([tp])
                c.seek_to_beginning(tp)
                out[p] = [(r.key, r.value) for r in c.poll(0, max_records=100_000).get(tp, [])]
    return out


def test_a_handed_topic_keeps_its_offsets_and_the_broker_ids(tmp_path):
    src = str(tmp_path / "src")
    model = _fill(src, "t", 2, 500)
    broker = _broker_dir(tmp_path / "broker", "t", 2)
    out = subprocess.run([sys.executable, "-m", "engine", "handoff", "--data", src, "--broker-dir", broker, "--topic",
                          "t"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "t-0: 1 segments, offsets [0, 250)" in out.stdout
    fs = FileSystem()
    for p in range(2):
        d = os.path.join(broker, f"t-{p}")
        assert partition_metadata.read(fs, d) == BROKER_TOPIC_ID  # the cluster's topic id stays
        assert leader_epoch_checkpoint.LeaderEpochCache(fs, d).entries == [(0, 0), (3, 250)]
    for name in (offset_checkpoint.RECOVERY_POINT, offset_checkpoint.HIGH_WATERMARK):
        assert offset_checkpoint.read(fs, os.path.join(broker, name)) == {("t", 0): 250, ("t", 1): 250}
    assert os.path.exists(os.path.join(broker, ".kafka_cleanshutdown"))
    assert os.listdir(os.path.join(broker, "__cluster_metadata-0")) == []
    assert _read(broker, "t", 2) == model  # kafkalog reads the broker's directory as the broker would
    assert _read(src, "t", 2) == model


def test_refusals_change_nothing(tmp_path):
    src = str(tmp_path / "src")
    _fill(src, "t", 2, 10)
    with pytest.raises(errors.InvalidLogDirectoryError, match="meta.properties"):
        handoff(src, str(tmp_path), ["t"])
    only_one = _broker_dir(tmp_path / "one", "t", 1)
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="does not host t-1"):
        handoff(src, only_one, ["t"])
    assert os.path.getsize(os.path.join(only_one, "t-0", "00000000000000000000.log")) == 0  # t-0 untouched
    full = _broker_dir(tmp_path / "full", "t", 2, records=True)
    with pytest.raises(errors.InvalidLogDirectoryError, match="already holds records"):
        handoff(src, full, ["t"])
    lower = _broker_dir(tmp_path / "lower", "t", 2, epoch=0)
    failed_over = str(tmp_path / "failed-over")  # kafkalog's log written at a later epoch than the broker's
    with engine.open(failed_over, brokers=2) as eng:
        eng.create_topic("t", 2, replication_factor=2)
        with eng.producer() as p:
            p.send("t", b"before", partition=0).get()
            eng.fail_broker(eng.describe_topic("t").partitions[0].leader)
            p.send("t", b"after", partition=0).get()
    with pytest.raises(errors.InvalidLogDirectoryError, match="leader epoch 1, above the broker's 0"):
        handoff(failed_over, lower, ["t"])
    running = _broker_dir(tmp_path / "running", "t", 2, epoch=9)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'a+b'); fcntl.lockf(f.fileno(), fcntl.LOCK_EX)\n"
                               "print('locked', flush=True); time.sleep(60)", os.path.join(running, ".lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"  # as a running broker holds its directory's lock
        with pytest.raises(errors.LogDirectoryLockedError, match="stop it first"):
            handoff(src, running, ["t"])
    finally:
        holder.kill()
        holder.wait()
    for broker in (only_one, full, lower, running):
        assert sorted(os.listdir(os.path.join(broker, "t-0"))) == [
            "00000000000000000000.log", "leader-epoch-checkpoint", "partition.metadata"]


def test_a_mistyped_data_directory_is_refused_and_not_created(tmp_path):
    broker = _broker_dir(tmp_path / "broker", "t", 1)
    with pytest.raises(errors.InvalidLogDirectoryError, match="not a kafkalog directory"):
        handoff(str(tmp_path / "typo"), broker, ["t"])
    assert not os.path.exists(tmp_path / "typo")


def test_a_directory_changed_between_its_description_and_the_lock_is_refused(tmp_path, monkeypatch):
    """Another process opens the directory and appends after handoff described it and before it took the lock."""
    from engine.tools import handoff as module

    src = str(tmp_path / "src")
    _fill(src, "t", 1, 10)
    broker = _broker_dir(tmp_path / "broker", "t", 1)
    real_lock = module._lock

    def lock(fs, directory, whose):
        if directory == src:
            with engine.open(src) as eng, eng.producer() as p:
                p.send("t", b"meanwhile", partition=0).get()
        return real_lock(fs, directory, whose)
    monkeypatch.setattr(module, "_lock", lock)
    with pytest.raises(errors.InvalidLogDirectoryError, match="another process opened the directory"):
        handoff(src, broker, ["t"])
    assert os.path.getsize(os.path.join(broker, "t-0", "00000000000000000000.log")) == 0  # nothing placed


def test_temporaries_of_an_interrupted_handoff_are_removed(tmp_path):
    src = str(tmp_path / "src")
    model = _fill(src, "t", 1, 20)
    broker = _broker_dir(tmp_path / "broker", "t", 1)
    left = os.path.join(broker, "t-0", "00000000000000000000.log.handoff")
    with open(left, "wb") as f:
        f.write(b"half a copy")
    handoff(src, broker, ["t"])
    assert not os.path.exists(left)
    assert _read(broker, "t", 1) == model
