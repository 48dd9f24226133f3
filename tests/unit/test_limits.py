"""What an engine can hold (engine.limits): a request over a limit is refused with a typed error that names the limit
and the setting, before anything is created; a creation that fails midway removes what it had created."""
from __future__ import annotations

import errno
import os
import resource

import pytest

import engine
from engine import limits
from engine.common.errors import InvalidPartitionsError, KafkaError, KafkaStorageError
from engine.segments.fs import FaultyFileSystem


def _tree(path) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), path) for d, dirs, files in os.walk(path) for n in dirs + files}


def _refused(eng, path, error, words, **create) -> KafkaError:
    before, topics = _tree(path), eng.list_topics()
    with pytest.raises(error) as info:
        eng.create_topic("x", **create)
    for word in words:
        assert word in str(info.value)
    assert _tree(path) == before and eng.list_topics() == topics  # nothing was created
    return info.value


@pytest.mark.parametrize("partitions", [10**6, limits.DEFAULT_MAX_PARTITIONS + 1])
def test_a_huge_partition_count_is_refused_up_front(tmp_path, partitions):
    path = str(tmp_path / "d")
    with engine.open(path, background=False) as eng:
        err = _refused(eng, path, InvalidPartitionsError, [str(partitions), "max.partitions",
                                                             str(limits.DEFAULT_MAX_PARTITIONS)],
                       partitions=partitions)
        assert err.code == 37 and not err.retriable  # Kafka's INVALID_PARTITIONS
        eng.create_topic("ok", partitions=3)  # the engine is unharmed
        assert [p.partition for p in eng.describe_topic("ok").partitions] == [0, 1, 2]


def test_max_partitions_counts_every_replica_and_every_way_to_add_one(tmp_path):
    path = str(tmp_path / "d")
    with engine.open(path, brokers=2, background=False, max_partitions=8) as eng:
        eng.create_topic("a", partitions=3, replication_factor=2)                  # 6 of 8
        _refused(eng, path, InvalidPartitionsError, ["6", "10", "8"], partitions=2, replication_factor=2)
        eng.create_topic("b", partitions=2)                                        # 8 of 8
        with pytest.raises(InvalidPartitionsError, match="max.partitions"):
            eng.create_partitions("b", 3)
        assert eng.describe_topic("b").partitions[-1].partition == 1
        with pytest.raises(InvalidPartitionsError, match="internal topic '__consumer_offsets'"):
            eng.internal.ensure_internal_topic("__consumer_offsets")
        assert "__consumer_offsets" not in eng.internal.internal_topics()


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", None, True])
def test_max_partitions_must_be_a_positive_int(tmp_path, bad):
    with pytest.raises(KafkaError, match="max_partitions"):
        engine.open(str(tmp_path / "d"), max_partitions=bad)


def test_a_pool_larger_than_the_open_file_limit_is_refused(tmp_path, monkeypatch):
    path = str(tmp_path / "d")
    with engine.open(path, background=False, fd_budget=100) as eng:
        monkeypatch.setattr(limits.resource, "getrlimit", lambda which: (120, resource.RLIM_INFINITY))
        _refused(eng, path, KafkaStorageError, ["fd_budget=100", "open-file limit 120", "ulimit -n"], partitions=1)


def test_a_pool_larger_than_the_kernels_map_limit_is_refused(tmp_path, monkeypatch):
    path = str(tmp_path / "d")
    with engine.open(path, background=False, fd_budget=100) as eng:
        monkeypatch.setattr(limits, "max_map_count", lambda: 150)
        _refused(eng, path, KafkaStorageError, ["fd_budget=100", "vm.max_map_count 150"], partitions=1)


def test_too_few_free_inodes_is_refused(tmp_path, monkeypatch):
    path = str(tmp_path / "d")
    with engine.open(path, background=False) as eng:
        real = os.statvfs(path)

        class Few:
            f_favail = 10 * limits.FILES_PER_PARTITION

        monkeypatch.setattr(limits.os, "statvfs", lambda p: Few())
        _refused(eng, path, KafkaStorageError, ["free inodes", str(Few.f_favail)], partitions=11)
        eng.create_topic("fits", partitions=10)
        assert real.f_favail > 0


def test_a_creation_that_fails_midway_removes_what_it_created(tmp_path):
    path = str(tmp_path / "d")
    fs = FaultyFileSystem(seed=4)
    with engine.open(path, background=False, fs=fs) as eng:
        before = _tree(path)
        fs.arm("makedirs", after=5, error=errno.ENOSPC)  # the sixth partition's directory cannot be made
        with pytest.raises(KafkaError):
            eng.create_topic("x", partitions=10)
        fs.clear()
        assert eng.list_topics() == []
        assert {p for p in _tree(path) - before if not p.endswith("-delete")} <= {"kafkalog.metadata"}
        eng.create_topic("x", partitions=10)  # and the same request goes through once the disk has room
        assert len(eng.describe_topic("x").partitions) == 10
