"""`kafkalog verify DIR` and `kafkalog recover DIR`.

verify reads a log directory (or one partition directory) and never writes to it. It checks every file
it knows:
- each `.log` batch by batch: framing, CRC-32C and records; base offsets that grow, within the segment;
  no bytes after the last whole batch, which Kafka's tool reports as "Found N invalid bytes at the end";
- `.index` and `.timeindex`: Kafka's sanity check, and every entry against the log;
- `.txnindex`, `<offset>.snapshot`, `leader-epoch-checkpoint` and `partition.metadata`: that they parse;
- the root checkpoints and `kafkalog.metadata`: that they parse;
- a partition directory set aside as `-stray` is checked as the others are, and reported with the records it
  holds: they are kept but not served until `kafkalog recover --restore-stray` puts it back.
It reports each problem with its file (and, where there is one, its position and offset), and exits 1
if it found any.

recover opens the directory as the engine does, which recovers it after an unclean shutdown, and reports
what that changed and which partitions are set aside. `--full` first removes the clean-shutdown marker, so every
segment is re-validated. `--restore-stray NAME` puts the `-stray` directory NAME back in place of its partition's
empty log (Engine.restore_stray), re-validates it and reports the records it serves again.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import mmap
import os

import engine
from engine import metadata
from engine.common.errors import InvalidConfigurationError, KafkaError
from engine.tools.dump_log import Dumper
from engine.tools.output import Output, progress
from engine.log.log_manager import CLEAN_SHUTDOWN
from engine.segments import leader_epoch_checkpoint, names, offset_checkpoint, partition_metadata
from engine.segments.fs import FileSystem

ROOT_CHECKPOINTS = (offset_checkpoint.RECOVERY_POINT, offset_checkpoint.LOG_START, offset_checkpoint.HIGH_WATERMARK,
                    offset_checkpoint.CLEANER)


def add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check a log directory read-only: CRCs, offsets, indexes, checkpoints")
    p.add_argument("directory", nargs="?", help="a log directory or one partition directory (or --data)")
    p.set_defaults(func=verify)


def add_recover(sub) -> None:
    p = sub.add_parser("recover", help="run the engine's recovery on a log directory and report what it changed")
    p.add_argument("directory", nargs="?", help="the log directory (or --data)")
    p.add_argument("--full", action="store_true", help="re-validate every segment, as after an unclean shutdown")
    p.add_argument("--restore-stray", metavar="NAME",
                   help="put the partition directory NAME, set aside as -stray, back in place of its empty partition")
    p.set_defaults(func=recover)


def _directory(args) -> str:
    path = args.directory or args.data
    if not os.path.isdir(path):
        raise InvalidConfigurationError(f"{path!r} is not a directory")
    return path


class _Checker(Dumper):
    """The dump-log checks, recording problems instead of printing."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), as_json=True, deep=False, print_data=False)
        self.found: list[dict] = []
        self.current = ""
        self.batches: dict[str, dict] = {}  # each .log's batches by position, read once for its index checks
        self.ends: dict[str, int] = {}  # each .log's position after its last whole batch read
        self.active: set[str] = set()  # each partition's last .log (its active segment when the directory is live)

    def emit(self, obj=None, text=None) -> None:
        """Checking prints nothing: only problems are kept."""

    def _batches_by_position(self, log_path: str) -> dict:
        return self.batches.get(log_path, {})

    def read_more(self, log_path: str) -> bool:
        """A live directory: an index entry written after its log was read points past what was read. The batches
        appended since are read (their index checks need them; their own checks are the next run's)."""
        end = self.ends.get(log_path)
        if end is None:
            return False
        with open(log_path, "rb") as f:
            f.seek(end)
            data = f.read()
        found = self.batches.setdefault(log_path, {})
        with contextlib.suppress(KafkaError):  # (a bad batch there is the next run's to report)
            for b in engine.iter_batches(data, position=end, source=log_path):
                found[b.position] = b
                end = b.position + b.size_in_bytes
        grew, self.ends[log_path] = end > self.ends[log_path], end
        return grew

    def unwritten_here(self, log_path: str) -> bool:
        """A live engine writes its active segment's index entries 64 at a time: the file may have none yet."""
        return log_path in self.active

    def problem(self, message: str, **where) -> None:
        self.found.append({"file": where.pop("file", self.current), **where, "message": message})


def _check_log(c: _Checker, path: str, base: int, next_base: int | None) -> None:
    size = os.path.getsize(path)
    if size == 0:
        return
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # closed when the batches are gone
    end, prev_last = 0, base - 1
    by_position = c.batches[path] = {}
    try:
        for b in engine.iter_batches(data, source=path):
            by_position[b.position] = b
            where = {"position": b.position, "offset": b.base_offset}
            try:
                b.ensure_valid()
            except KafkaError as exc:
                c.problem(str(exc), **where)
            if b.base_offset <= prev_last:
                c.problem(f"batch base offset {b.base_offset} does not follow the previous batch's last offset "
                          f"{prev_last}", **where)
            if next_base is not None and b.last_offset >= next_base:
                c.problem(f"batch last offset {b.last_offset} reaches the next segment's base {next_base}", **where)
            prev_last, end = b.last_offset, b.position + b.size_in_bytes
    except KafkaError as exc:
        c.problem(str(exc), position=end)
    else:
        c.ends[path] = end
    # a partial batch at the end of a log that grew meanwhile is a write in progress, once a read now finds it whole
    if end < size and not (os.path.getsize(path) > size and c.read_more(path)):
        c.problem(f"Found {size - end} invalid bytes at the end of {os.path.basename(path)}", position=end)


def _check_partition(c: _Checker, directory: str, files: list[str]) -> None:
    c.batches.clear()  # one partition's batches (and their mapped segments) at a time
    stray = names.parse_set_aside(os.path.basename(directory))
    logs = sorted(names.offset_from_file_name(f) for f in files if f.endswith(names.LOG))
    if logs:
        c.active.add(os.path.join(directory, names.file_name(logs[-1], names.LOG)))
    for i, base in enumerate(logs):
        c.current = os.path.join(directory, names.file_name(base, names.LOG))
        _check_log(c, c.current, base, logs[i + 1] if i + 1 < len(logs) else None)
    for f in sorted(files):
        path = c.current = os.path.join(directory, f)
        try:
            if f.endswith((names.INDEX, names.TIME_INDEX, names.TXN_INDEX)):
                base = names.offset_from_file_name(f)
                if base not in logs:
                    c.problem("an index file without its .log")
                elif f.endswith(names.INDEX):
                    c.dump_offset_index(path, base, True)
                elif f.endswith(names.TIME_INDEX):
                    c.dump_time_index(path, base, True)
                else:
                    c.dump_txn_index(path, base)
            elif f.endswith(names.SNAPSHOT):
                c.dump_snapshot(path)
            elif f == leader_epoch_checkpoint.FILE:
                c.dump_epochs(path)
            elif f == partition_metadata.FILE:
                partition_metadata.read(c.fs, directory)
        except (KafkaError, OSError, ValueError) as exc:
            c.problem(str(exc))
    if stray is not None:
        _report_stray(c, directory, stray, len(logs))


def _report_stray(c: _Checker, directory: str, stray: tuple[str, int, str], segments: int) -> None:
    """The records a `-stray` directory holds (data batches read whole), as a problem: they are not served."""
    data = [b for found in c.batches.values() for b in found.values() if not b.is_control]
    span = f" (offsets {min(b.base_offset for b in data)} to {max(b.last_offset for b in data)})" if data else ""
    c.problem(f"partition {stray[0]}-{stray[1]} set aside as -stray: {sum(b.records_count for b in data)} records"
              f"{span} in {segments} segment(s), kept but not served; check them, then `kafkalog recover "
              f"--restore-stray {os.path.basename(directory)}`", file=directory)


def _is_stray(entry: str) -> bool:
    aside = names.parse_set_aside(entry)
    return aside is not None and aside[2] == "stray"


def check(path: str) -> tuple[int, list[dict]]:
    """(files checked, problems) for a log directory or a single partition directory."""
    fs, c = FileSystem(), _Checker()
    entries = sorted(os.listdir(path))
    if any(e.endswith(names.LOG) for e in entries):
        partitions, root = [(path, entries)], []
    else:
        partitions = [(os.path.join(path, e), sorted(os.listdir(os.path.join(path, e)))) for e in entries
                      if (names.parse_partition_dir(e) or _is_stray(e)) and os.path.isdir(os.path.join(path, e))]
        root = [e for e in entries if e in ROOT_CHECKPOINTS or e == metadata.FILE]
    total = len(root) + sum(len(files) for _, files in partitions)
    bar = progress(range(total), total=total, desc="verify")
    for name in root:
        c.current = os.path.join(path, name)
        try:
            if name == metadata.FILE:
                metadata.read(fs, path)
            else:
                offset_checkpoint.read(fs, c.current)
        except (KafkaError, OSError, ValueError) as exc:
            c.problem(str(exc))
        bar.update(1)
    for directory, files in partitions:
        _check_partition(c, directory, files)
        bar.update(len(files))
    bar.close()
    return total, c.found


def verify(args: argparse.Namespace, out: Output) -> int:
    path = _directory(args)
    files, problems = check(path)
    lines = [" ".join([p["file"]] + [f"{k} {p[k]}" for k in ("position", "offset") if k in p]) + f": {p['message']}"
             for p in problems]
    verdict = (f"{path}: {files} files checked, " + (f"{len(problems)} problem(s)" if problems else "no problems"))
    out.result({"directory": path, "files": files, "problems": problems, "ok": not problems},
               "\n".join(lines + [verdict]))
    return 1 if problems else 0


def recover(args: argparse.Namespace, out: Output) -> int:
    path = _directory(args)
    marker = os.path.join(path, CLEAN_SHUTDOWN)
    if args.full and os.path.exists(marker):
        os.remove(marker)
    rows, restored = [], None
    with engine.open(path, background=False) as eng:
        clean = eng.clean_shutdown
        if args.restore_stray:  # (first: the partition must not have been used since the directory was opened)
            tp = eng.restore_stray(os.path.join(path, os.path.basename(os.path.normpath(args.restore_stray))))
            part = eng.describe_topic(tp.topic).partitions[tp.partition]  # (its load re-validates it)
            restored = {"topic": tp.topic, "partition": tp.partition, "logStartOffset": part.log_start_offset,
                        "logEndOffset": part.log_end_offset}
        notes = eng.recovery_notes()
        for topic in eng.list_topics():
            for p in progress(range(eng.partitions_for(topic)), desc=f"recover {topic}"):
                r = eng.log(topic, p).recovery
                if r.segments_recovered or r.bytes_truncated or r.segments_dropped or r.files_removed:
                    rows.append({"topic": topic, "partition": p, "segmentsRecovered": r.segments_recovered,
                                 "bytesTruncated": r.bytes_truncated, "segmentsDropped": r.segments_dropped,
                                 "filesRemoved": r.files_removed})
        set_aside = [{"directory": os.path.basename(s.path), "topic": s.topic, "partition": s.partition, "why": s.why}
                     for b in eng.replicas.live_brokers() for s in b.logs.strays()]
    text = [f"{r['topic']}-{r['partition']}: re-validated segments {r['segmentsRecovered']}, truncated "
            f"{r['bytesTruncated']} bytes, dropped segments {r['segmentsDropped']}, removed {r['filesRemoved']}"
            for r in rows] + [f"set aside as -stray, not served: {s['directory']} ({s['why']}); restore it with "
                              f"--restore-stray {s['directory']}" for s in set_aside] + notes
    if restored:
        text.append(f"restored {restored['topic']}-{restored['partition']}: offsets {restored['logStartOffset']} to "
                    f"{restored['logEndOffset']} served again")
    summary = ("the last shutdown was clean: nothing to recover (--full re-validates anyway)"
               if clean and not rows and not set_aside and not notes else f"{len(rows)} partition(s) changed")
    out.result({"directory": path, "cleanShutdown": clean, "partitions": rows, "setAside": set_aside,
                "restored": restored, "repairs": notes},
               "\n".join(text + [summary]))
    return 0
