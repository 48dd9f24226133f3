"""The mirror loop: read a chunk from the source, write it and its progress in one destination transaction, repeat;
translate named groups' committed offsets on the way.

Exactly once: a restarted mirror fences the previous instance (same transactional id: its open transaction is
aborted), reads the committed progress and resumes the source there, so every source record of a committed
transaction is in the destination once, and nothing of an aborted one is. Memory: one chunk (`max_records`,
`max_bytes`) plus the clients' bounded buffers. Errors: a retriable one (a broker away, a timeout) restarts the
mirror from its committed progress after a backoff (100 ms doubling to 5 s) until `retry_timeout_s` has gone by
without progress; any other is raised.
Thread-safety: `run()` is for one thread; `stop()` may be called from any (a signal handler too).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from engine.common import errors
import engine.mirror.offset_sync as offset_sync

log = logging.getLogger("kafkalog.mirror")
GROUP_SYNC_INTERVAL_S = 5.0
LAG_INTERVAL_S = 2.0  # how often a run reporting progress asks the source for its ends


@dataclasses.dataclass
class PartitionStats:
    records: int = 0
    bytes: int = 0
    next: int = 0              # the next source offset to copy
    lag: int = 0               # records (offsets) between it and the source's end, when last asked


@dataclasses.dataclass
class MirrorSummary:
    """What a run did: per partition ("topic-partition") and in total; each group's translated offsets."""

    records: int = 0
    bytes: int = 0
    transactions: int = 0
    restarts: int = 0
    seconds: float = 0.0
    partitions: dict = dataclasses.field(default_factory=dict)
    groups: dict = dataclasses.field(default_factory=dict)
    notes: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        doc = dataclasses.asdict(self)
        doc["seconds"] = round(self.seconds, 3)
        return doc


class Mirror:
    def __init__(self, source, sink, *, name: str, topics: list[str] | None = None, groups: list[str] = (),
                 follow: bool = False, max_records: int = 50_000, max_bytes: int = 16 << 20,
                 commit_interval_s: float = 1.0, retry_timeout_s: float = 300.0,
                 on_progress: Callable[[MirrorSummary], None] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise errors.InvalidConfigurationError(f"a mirror needs a non-empty name, got {name!r}")
        for what, value in (("max_records", max_records), ("max_bytes", max_bytes)):
            if type(value) is not int or value < 1:
                raise errors.InvalidConfigurationError(f"{what} must be an int >= 1, got {value!r}")
        self.source, self.sink = source, sink
        self.name, self.wanted, self.groups = name, topics, list(groups)
        self.follow = follow
        self.max_records, self.max_bytes = max_records, max_bytes
        self.commit_interval_s, self.retry_timeout_s = commit_interval_s, retry_timeout_s
        self.on_progress = on_progress
        self.summary = MirrorSummary()
        self._stop = threading.Event()
        self._progress: dict[tuple[str, int], offset_sync.PartitionProgress] = {}
        self._tps: list[tuple[str, int]] = []
        self._lagged = 0.0

    def stop(self) -> None:
        """Finish the transaction under way and return from run()."""
        self._stop.set()

    def run(self) -> MirrorSummary:
        started = time.monotonic()
        topics = self.source.topics(self.wanted)
        wanted = {}
        for topic, partitions in topics.items():
            configs, why = self.source.configs(topic)
            if why:
                self.summary.notes[topic] = f"configs not copied: {why}"
            wanted[topic] = (partitions, configs)
        for topic, note in self.sink.prepare(wanted).items():
            self.summary.notes[topic] = note
        self._tps = [(t, p) for t, (n, _) in sorted(wanted.items()) for p in range(n)]
        backoff, self._committed_at, done_before = 0.1, time.monotonic(), 0
        while True:
            try:
                self._resume()
                self._copy()
                break
            except errors.KafkaError as exc:
                if not exc.retriable or time.monotonic() - self._committed_at > self.retry_timeout_s:
                    raise
                log.warning("mirror %s: %s: restarting from its committed progress in %.1f s", self.name, exc,
                            backoff)
                self.summary.restarts += 1
                if self.summary.transactions != done_before:  # it got somewhere since the last failure
                    backoff, done_before = 0.1, self.summary.transactions
                if self._stop.wait(backoff):
                    break
                backoff = min(backoff * 2, 5.0)
        self._sync_groups()
        self._lags()
        self.summary.seconds = time.monotonic() - started
        return self.summary

    def _resume(self) -> None:
        self._progress = self.sink.begin()
        positions = {}
        for tp in self._tps:
            prog = self._progress.get(tp)
            latest = prog.latest if prog is not None else None
            positions[tp] = latest.next if latest is not None else -1
            stats = self.summary.partitions.setdefault(f"{tp[0]}-{tp[1]}", PartitionStats())
            stats.next = max(positions[tp], 0)
        self.source.assign(positions)

    def _copy(self) -> None:
        synced = time.monotonic()
        while not self._stop.is_set():
            chunk, ends, sizes = self._read_chunk()
            if chunk or self._advanced(ends):
                self._write(chunk, ends, sizes)
            elif not self.follow and self.source.at_end(self._tps):
                return
            if self.groups and time.monotonic() - synced > GROUP_SYNC_INTERVAL_S:
                self._sync_groups()
                synced = time.monotonic()

    def _read_chunk(self) -> tuple[dict, dict, dict]:
        """(records by partition, positions reached by partition, key and value bytes by partition)."""
        chunk: dict = {}
        ends: dict = {}
        sizes: dict = {}
        count = size = 0
        deadline = time.monotonic() + self.commit_interval_s
        while count < self.max_records and size < self.max_bytes and not self._stop.is_set():
            got, got_ends = self.source.poll(min(self.max_records - count, 10_000), 0.1)
            ends.update(got_ends)
            for tp, (offsets, records) in got.items():
                have = chunk.get(tp)
                if have is None:
                    chunk[tp] = (offsets, records)
                else:
                    have[0].extend(offsets)
                    have[1].extend(records)
                count += len(offsets)
                nbytes = sum([len(k) for k, _, _, _ in records if k] + [len(v) for _, v, _, _ in records if v])
                sizes[tp] = sizes.get(tp, 0) + nbytes
                size += nbytes
            if not got and (count or time.monotonic() > deadline or not self.follow):
                break
        return chunk, ends, sizes

    def _advanced(self, ends: dict) -> bool:
        """Whether a partition's position moved past its progress with nothing copied (control batches, aborted
        transactions at its end)."""
        return any(pos > self._next(tp) for tp, pos in ends.items())

    def _next(self, tp) -> int:
        prog = self._progress.get(tp)
        latest = prog.latest if prog is not None else None
        return latest.next if latest is not None else 0

    def _write(self, chunk: dict, ends: dict, sizes: dict) -> None:
        syncs = {}
        for tp in set(chunk) | {tp for tp, pos in ends.items() if pos > self._next(tp)}:
            prog = self._progress.setdefault(tp, offset_sync.PartitionProgress())
            latest = prog.latest
            offsets = chunk[tp][0] if tp in chunk else []
            start = latest.next if latest is not None else 0  # a first run reads from the log start
            nxt = max(ends.get(tp, 0), offsets[-1] + 1 if offsets else 0, start)
            dest_next = latest.dest_next if latest is not None else self.sink.end_offset(*tp)
            syncs[tp] = (prog.next_slot(), offset_sync.Sync(start, nxt, dest_next))
        self.sink.write(chunk, syncs)
        self._committed_at = time.monotonic()
        self.summary.transactions += 1
        for tp, (slot, sync) in syncs.items():
            self._progress[tp].add(slot, sync)
            stats = self.summary.partitions.setdefault(f"{tp[0]}-{tp[1]}", PartitionStats())
            stats.next = sync.next
        for tp, (offsets, _) in chunk.items():
            stats = self.summary.partitions[f"{tp[0]}-{tp[1]}"]
            size = sizes[tp]
            stats.records += len(offsets)
            stats.bytes += size
            self.summary.records += len(offsets)
            self.summary.bytes += size
        if self.on_progress is not None:
            if time.monotonic() - self._lagged > LAG_INTERVAL_S:
                self._lags()
            self.on_progress(self.summary)

    def _sync_groups(self) -> None:
        """Move each named group's destination offsets to the translation of its source offsets: only forward,
        only where the mirror has copied up to them, only while the group has no member on the destination."""
        for group in self.groups:
            done: dict = {}
            report = self.summary.groups.setdefault(group, {})
            try:
                source = self.source.committed(group, self._tps)
                current = self.sink.committed(group, self._tps)
            except errors.KafkaError as exc:
                report["error"] = str(exc)
                continue
            for tp, upstream in source.items():
                prog = self._progress.get(tp)
                dest = prog.translate(upstream) if prog is not None else offset_sync.NOT_YET
                name = f"{tp[0]}-{tp[1]}"
                if isinstance(dest, str):
                    report[name] = {"source": upstream, "status": dest}
                    continue
                report[name] = {"source": upstream, "destination": dest}
                if dest > current.get(tp, -1):
                    done[tp] = dest
            if done:
                try:
                    self.sink.commit(group, done)
                except (errors.UnknownMemberIdError, errors.RebalanceInProgressError, errors.IllegalGenerationError):
                    report["status"] = "active on the destination: offsets not moved"
                    continue
                except errors.KafkaError as exc:
                    report["error"] = str(exc)
                    continue
            report["status"] = "synced"

    def _lags(self) -> None:
        self._lagged = time.monotonic()
        for (topic, partition) in self._tps:
            stats = self.summary.partitions.setdefault(f"{topic}-{partition}", PartitionStats())
            try:
                stats.lag = max(self.source.end_offset(topic, partition) - stats.next, 0)
            except errors.KafkaError:
                stats.lag = -1
