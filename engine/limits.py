"""What one engine can hold, checked before a topic or partitions are created (nothing is created when it says no).

A partition replica costs the engine a directory of files (`partition.metadata`, the active segment's `.log`,
`.index` and `.timeindex`, its checkpoints) and, until it is used, about a kilobyte of memory (partitions load on
first use: docs/architecture.md, Lazy partitions; a loaded one costs some tens of kilobytes); descriptors and mappings
are not per partition: the descriptor pool (segments.fs) keeps at most `fd_budget` of both open, whatever the
partition count.
So the limits are:
- `max_partitions` (engine option `max_partitions`, default DEFAULT_MAX_PARTITIONS): partition replicas hosted by the
  engine's brokers, internal topics included;
- free inodes of the log directory's file system: FILES_PER_PARTITION for each new replica;
- the descriptor pool against the process's open-file limit and `vm.max_map_count` (every pooled entry may be a
  mapping): a budget that either cannot hold would fail at some later open or mmap instead of now.
Byte layout: none. Crash policy: none (it only reads). Thread-safety: pure functions.
"""
from __future__ import annotations

import os
import resource

from engine.common.errors import InvalidConfigurationError, InvalidPartitionsError, KafkaStorageError

DEFAULT_MAX_PARTITIONS = 200_000  # twice the 100,000 that `make soak` opens under ulimit -n 1024 (test_many_partitions)
FILES_PER_PARTITION = 8     # the directory, partition.metadata, .log/.index/.timeindex, checkpoint files, a spare
RESERVED_DESCRIPTORS = 64   # the interpreter's own, sockets, the CLI's files: never the pool's
MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"


def check_max_partitions(value) -> int:
    if type(value) is not int or value < 1:
        raise InvalidConfigurationError(f"max_partitions={value!r} must be an int >= 1")
    return value


def max_map_count() -> int | None:
    """The kernel's limit on mappings per process (None where the system does not say)."""
    try:
        with open(MAX_MAP_COUNT) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def check_capacity(path: str, hosted: int, adding: int, max_partitions: int, fd_budget: int, what: str) -> None:
    """Raise before `adding` partition replicas are created beside the `hosted` ones, when the engine cannot hold
    them: InvalidPartitionsError over `max_partitions`, KafkaStorageError when the file system or the process cannot;
    `what` names the request in the message."""
    total = hosted + adding
    if total > max_partitions:
        raise InvalidPartitionsError(
            f"{what} needs {adding} partition replicas; with the {hosted} this engine hosts that is {total}, over its "
            f"limit of {max_partitions} (the engine setting max.partitions: engine.open(path, max_partitions=N))",
            file=path)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and fd_budget + RESERVED_DESCRIPTORS > soft:
        raise KafkaStorageError(
            f"the descriptor pool (fd_budget={fd_budget}) and {RESERVED_DESCRIPTORS} reserved descriptors exceed the "
            f"process's open-file limit {soft} (ulimit -n): raise the limit or lower fd_budget", file=path)
    maps = max_map_count()
    if maps is not None and fd_budget + RESERVED_DESCRIPTORS > maps:
        raise KafkaStorageError(
            f"the descriptor pool (fd_budget={fd_budget}) may hold as many mappings, over the kernel's "
            f"vm.max_map_count {maps}: raise vm.max_map_count or lower fd_budget", file=path)
    try:
        free = os.statvfs(path).f_favail
    except OSError:
        return
    if free and adding * FILES_PER_PARTITION > free:  # 0: a file system without inode accounting
        raise KafkaStorageError(
            f"{what} needs about {adding * FILES_PER_PARTITION} files, and the file system of {path} has {free} "
            f"free inodes", file=path)
