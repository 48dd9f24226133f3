"""Where syncfs() cannot be trusted (FUSE, or a file system statfs cannot name), creating partitions and closing
logs fsync every file and directory they owe instead of the one sync of the file system: shown here on the
simulated file system told that its syncfs persists nothing, whose power cut keeps only what was fsynced."""
from __future__ import annotations

import subprocess

import pytest

import engine
from engine.segments import fs as fs_module
from engine.segments.fs import FaultyFileSystem


class NoSyncfs(FaultyFileSystem):
    """A simulated file system whose syncfs() returns and persists nothing, as a FUSE mount's."""

    def syncfs_honoured(self, path: str) -> bool:
        return False

    def sync_filesystem(self, path: str) -> None:
        raise AssertionError("syncfs used where it persists nothing")


@pytest.mark.parametrize("fs_class", [FaultyFileSystem, NoSyncfs])
def test_created_topics_and_a_clean_close_survive_a_power_cut(tmp_path, fs_class):
    fs = fs_class(seed=11)
    e = engine.open(tmp_path / "d", fs=fs, background=False)
    e.create_topic("kept", 40)
    with e.producer(acks="all") as producer:
        for i in range(400):
            producer.send("kept", key=b"%d" % i, value=b"v%d" % i, partition=i % 40)
    e.close()
    fs.lose_unsynced()  # the power goes after a clean close: only what was synced is left
    with engine.open(tmp_path / "d", background=False) as reopened:
        assert reopened.closed_cleanly()
        assert sum(p.log_end_offset for p in reopened.describe_topic("kept").partitions) == 400
        assert reopened.recovery_notes() == []


def test_the_file_system_type_is_statfs_s():
    """file_system_type against coreutils' `stat -f` of the same folder."""
    for path in ("/", "/dev/shm", "/proc"):
        expected = int(subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True,
                                      check=True).stdout.strip(), 16)
        assert fs_module.file_system_type(path) == expected
    assert fs_module.file_system_type("/proc") not in fs_module.SYNCFS_HONOURED  # procfs: not a place for data
