"""`kafkalog handoff`: place a kafkalog directory's topic into a stopped Kafka broker's log directory, so the broker
serves its records.

The topic must already exist on the cluster with at least as many partitions, and the broker must host every
partition (it made `<topic>-<p>/` with its `partition.metadata`) with no record in it yet. For each partition the
segment files (.log, .index, .timeindex, .txnindex) and producer snapshots are copied in; the broker's
`partition.metadata` (its topic id) stays; `leader-epoch-checkpoint` becomes kafkalog's entries followed by the
broker's current epoch starting at the log end; the broker's root checkpoints (recovery point = log end, high
watermark, log start) are updated for the partition. `__cluster_metadata-0`, `meta.properties` and
`.kafka_cleanshutdown` are the broker's and left alone.
Crash policy: every file is copied under a temporary name and renamed, the checkpoints are atomic; a handoff
interrupted part way is re-run (the partition then holds only kafkalog's files, which are replaced again).
Both directories are locked while it runs (`.lock`, as the broker and kafkalog lock them), so a running broker or
an open engine makes it fail before anything is changed. The kafkalog directory is opened and closed cleanly first
(recovered, indexes trimmed, everything flushed), then locked; a process that opened it in between and changed a
handed topic (its recovery points then differ from the log ends just described) makes it fail too. A `--data` that is
not a kafkalog directory is refused, never created; `.handoff` temporaries a crash left are removed on the next run.
"""
from __future__ import annotations

import argparse
import os
import shutil

import engine
from engine import metadata
from engine.common import errors
from engine.log.log_manager import CLEAN_SHUTDOWN
from engine.segments import leader_epoch_checkpoint as epochs
from engine.segments import names, offset_checkpoint, partition_metadata
from engine.segments.fs import FileSystem
from engine.tools.output import Output

COPIED = (*names.SEGMENT_SUFFIXES, names.SNAPSHOT)
TEMPORARY = ".handoff"  # a file being copied in, renamed into place once whole


def add_handoff(sub) -> None:
    p = sub.add_parser("handoff", help="place topics into a stopped Kafka broker's log directory")
    p.add_argument("--broker-dir", required=True, help="the stopped broker's log directory (its log.dirs entry)")
    p.add_argument("--topic", action="append", required=True, help="a topic to hand over (repeatable)")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace, out: Output) -> int:
    rows = handoff(args.data, args.broker_dir, args.topic)
    out.result(rows, "\n".join(f"{r['topic']}-{r['partition']}: {r['segments']} segments, offsets "
                               f"[{r['logStartOffset']}, {r['logEndOffset']}) placed in {r['directory']}"
                               for r in rows))
    return 0


def _lock(fs: FileSystem, directory: str, whose: str):
    try:
        return fs.lock(os.path.join(directory, ".lock"))
    except BlockingIOError:
        raise errors.LogDirectoryLockedError(f"{whose} is in use: stop it first", file=directory) from None


def handoff(data: str, broker_dir: str, topics: list[str]) -> list[dict]:
    """Hand `topics` of the kafkalog directory `data` to the broker whose (stopped) log directory is `broker_dir`."""
    fs = FileSystem()
    if not os.path.isfile(os.path.join(broker_dir, "meta.properties")):
        raise errors.InvalidLogDirectoryError("not a Kafka broker's log directory (no meta.properties)", file=broker_dir)
    if not os.path.isfile(os.path.join(data, metadata.FILE)):
        raise errors.InvalidLogDirectoryError(f"not a kafkalog directory (no {metadata.FILE})", file=data)
    with engine.open(data) as eng:  # recovered and closed cleanly: indexes trimmed, everything flushed
        shapes = {t: eng.describe_topic(t) for t in topics}
    ours = _lock(fs, data, "the kafkalog directory")
    try:
        theirs = _lock(fs, broker_dir, "the broker's log directory")
    except errors.KafkaError:
        ours.close()
        raise
    try:
        plans = [(t, p) for t, d in shapes.items() for p in d.partitions]
        _check_unchanged(fs, data, plans)
        for topic, part in plans:  # every check first: nothing changes unless all partitions can be handed over
            _check(fs, data, broker_dir, topic, part)
        checkpoints = {name: offset_checkpoint.read(fs, os.path.join(broker_dir, name))
                       for name in (offset_checkpoint.RECOVERY_POINT, offset_checkpoint.HIGH_WATERMARK,
                                    offset_checkpoint.LOG_START)}
        rows = []
        for topic, part in plans:
            rows.append(_place(fs, data, broker_dir, topic, part))
            tp = (topic, part.partition)
            checkpoints[offset_checkpoint.RECOVERY_POINT][tp] = part.log_end_offset
            checkpoints[offset_checkpoint.HIGH_WATERMARK][tp] = part.high_watermark
            checkpoints[offset_checkpoint.LOG_START][tp] = part.log_start_offset
        for name, entries in checkpoints.items():
            offset_checkpoint.write(fs, os.path.join(broker_dir, name), entries)
        return rows
    finally:
        theirs.close()
        ours.close()


def _check_unchanged(fs: FileSystem, data: str, plans: list) -> None:
    """The directory is as it was described: closed cleanly, each handed partition's recovery point at its log end."""
    points = offset_checkpoint.read(fs, os.path.join(data, offset_checkpoint.RECOVERY_POINT))
    changed = [f"{t}-{p.partition}" for t, p in plans if points.get((t, p.partition)) != p.log_end_offset]
    if changed or not os.path.exists(os.path.join(data, CLEAN_SHUTDOWN)):
        raise errors.InvalidLogDirectoryError(f"another process opened the directory while it was being handed over "
                                              f"({', '.join(changed) or 'not closed cleanly'}): run the handoff again",
                                              file=data)


def _epochs(fs: FileSystem, data: str, broker_dir: str, topic: str, partition: int) -> tuple[list, int]:
    """kafkalog's leader-epoch entries for the partition, and the broker's current epoch for it."""
    name = names.partition_dir_name(topic, partition)
    broker = epochs.LeaderEpochCache(fs, os.path.join(broker_dir, name)).entries
    return epochs.LeaderEpochCache(fs, os.path.join(data, name)).entries, (broker[-1][0] if broker else 0)


def _check(fs: FileSystem, data: str, broker_dir: str, topic: str, part) -> None:
    target = os.path.join(broker_dir, names.partition_dir_name(topic, part.partition))
    if not os.path.isdir(target) or partition_metadata.read(fs, target) is None:
        raise errors.UnknownTopicOrPartitionError(
            f"the broker does not host {topic}-{part.partition}: create the topic on the cluster with at least "
            f"{part.partition + 1} partitions and start the broker once", file=broker_dir)
    if any(f.endswith(names.LOG) and os.path.getsize(os.path.join(target, f)) for f in os.listdir(target)):
        raise errors.InvalidLogDirectoryError(f"the broker's {topic}-{part.partition} already holds records: only an "
                                              f"empty partition is handed over", file=target)
    ours, broker_epoch = _epochs(fs, data, broker_dir, topic, part.partition)
    if ours and ours[-1][0] > broker_epoch:
        raise errors.InvalidLogDirectoryError(
            f"{topic}-{part.partition} was written at leader epoch {ours[-1][0]}, above the broker's {broker_epoch}: "
            f"the broker would refuse to lead it at its own epoch", file=data)


def _place(fs: FileSystem, data: str, broker_dir: str, topic: str, part) -> dict:
    name = names.partition_dir_name(topic, part.partition)
    source, target = os.path.join(data, name), os.path.join(broker_dir, name)
    ours, broker_epoch = _epochs(fs, data, broker_dir, topic, part.partition)
    for f in os.listdir(target):
        if f.endswith((*COPIED, names.DELETED, names.CLEANED, names.SWAP, TEMPORARY)):
            fs.remove(os.path.join(target, f))
    copied = [f for f in sorted(os.listdir(source)) if f.endswith(COPIED)]
    for f in copied:
        tmp = os.path.join(target, f + TEMPORARY)
        shutil.copyfile(os.path.join(source, f), tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        fs.rename(tmp, os.path.join(target, f))
    entries = [e for e in ours if e[1] < part.log_end_offset]
    if not entries or entries[-1][0] < broker_epoch:
        entries.append((broker_epoch, part.log_end_offset))
    fs.atomic_write(os.path.join(target, epochs.FILE), epochs.render(entries))
    fs.fsync_dir(target)
    return {"topic": topic, "partition": part.partition, "directory": target,
            "segments": sum(f.endswith(names.LOG) for f in copied), "logStartOffset": part.log_start_offset,
            "logEndOffset": part.log_end_offset}
