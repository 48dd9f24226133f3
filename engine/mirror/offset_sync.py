"""A mirror's progress record: where it is in each source partition and which destination offsets its records got.

The mirror writes one progress record per source partition into the destination in the same transaction as the
records it copied (in the progress topic, default `kafkalog-mirror-progress`: one partition, `cleanup.policy=compact`),
so the destination's own transactions make copying and progress exactly once together (Kafka's MirrorMaker 2 keeps
its source offsets the same way). Byte layout, both UTF-8 JSON so any Kafka client can read them:

    key   = ["<mirror name>", "<source topic>", <partition>, <slot>]
    value = {"from": F, "next": N, "dnext": DN, "runs": [[u, d, n], ...]}  (and "coarse": true, see below)

A record covers the source offsets [F, N) that one transaction read: every record copied from it is in a run
(source offsets u..u+n-1 became destination offsets d..d+n-1; a run [u, d, n, s] of stride s: source offsets u, u+s,
.. u+(n-1)s became d..d+n-1, as a compacted source with every other offset gone gives), everything else in [F, N)
(control batches, aborted transactions, offsets compaction removed) was not copied. A transaction whose records
still make more than MAX_RUNS runs (gaps of no pattern after nearly every record) keeps MAX_RUNS of them, its first
and last included, and says it is coarse: a record is then at most about 40 KB whatever the source's gaps. A group
offset that falls between two runs kept of a coarse record translates to the destination offset after the earlier
one, at or before the exact answer (a group may read a few records twice on the destination; it never skips one), as
MirrorMaker 2 rounds down between its sparse offset syncs. DN is the destination offset after the last record copied
so far (the destination's log end when nothing was copied yet). `slot` counts a partition's transactions modulo
HISTORY, so compaction keeps the last HISTORY records per partition: the offset syncs group offsets are translated
with (MirrorMaker 2's offset-sync/checkpoint role, exact here because every copied record is in a run).
Crash policy: none of its own; a record is only visible (read_committed) once its transaction committed.
Thread-safety: a `PartitionProgress` is owned by one mirror thread.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field

HISTORY = 256  # progress records kept per partition (slots); older syncs are compacted away
MAX_RUNS = 1024  # runs one progress record keeps
PROGRESS_TOPIC = "kafkalog-mirror-progress"
NOT_YET = "not mirrored yet"
TOO_OLD = "older than the offset syncs kept"


def encode_key(name: str, topic: str, partition: int, slot: int) -> bytes:
    return json.dumps([name, topic, partition, slot], separators=(",", ":")).encode()


def _decode_key(key: bytes | None) -> tuple[str, str, int, int] | None:
    """(name, topic, partition, slot), or None for a record that is not a progress record."""
    try:
        name, topic, partition, slot = json.loads(key)
    except (TypeError, ValueError):
        return None
    if not (isinstance(name, str) and isinstance(topic, str) and type(partition) is int and type(slot) is int):
        return None
    return name, topic, partition, slot


def load(name: str, records) -> dict[tuple[str, int], "PartitionProgress"]:
    """Mirror `name`'s progress from the progress topic's (key, value) pairs, in offset order."""
    out: dict[tuple[str, int], PartitionProgress] = {}
    for key, value in records:
        found = _decode_key(key)
        if found is None or found[0] != name or value is None:
            continue
        out.setdefault((found[1], found[2]), PartitionProgress()).add(found[3], Sync.decode(value))
    return out


@dataclass
class Sync:
    """One transaction's progress in one partition."""

    start: int                  # F: the first source offset it read
    next: int                   # N: the source offset after the last it read
    dest_next: int              # DN
    runs: list = field(default_factory=list)  # [(u, d, n) or (u, d, n, stride)], in source order
    coarse: bool = False        # runs were left out between those kept (MAX_RUNS)

    def encode(self) -> bytes:
        doc = {"from": self.start, "next": self.next, "dnext": self.dest_next, "runs": [list(r) for r in self.runs]}
        if self.coarse:
            doc["coarse"] = True
        return json.dumps(doc, separators=(",", ":")).encode()

    def place(self, source_offsets: list[int], spans: list[tuple[int, int]]) -> None:
        """The copied records (their source offsets, in order) landed in `spans` ([(first destination offset,
        count)], in order): record them as runs, and the destination offset after the last."""
        runs: list[list[int]] = []  # [u, d, n, s]
        i = 0
        for first, count in spans:
            part = source_offsets[i:i + count]
            i += count
            if part[-1] - part[0] == count - 1:  # no gap in the source either: one run
                pieces = [(part[0], first, count)]
            else:
                pieces = [(u, first + j, 1) for j, u in enumerate(part)]
            for u, d, n in pieces:
                run = runs[-1] if runs else None
                if run is not None and d == run[1] + run[2]:  # the destination goes on where the run ends
                    if n == 1 and run[2] == 1 and u > run[0]:  # a run's second record sets its stride
                        run[2], run[3] = 2, u - run[0]
                        continue
                    if u == run[0] + run[2] * run[3] and (n == 1 or run[3] == 1):  # the source goes on in step
                        run[2] += n
                        continue
                runs.append([u, d, n, 1])
        kept = [(u, d, n) if step == 1 else (u, d, n, step) for u, d, n, step in runs]
        if len(kept) > MAX_RUNS:  # evenly spaced, the first and the last kept
            last = len(kept) - 1
            kept = [kept[k * last // (MAX_RUNS - 1)] for k in range(MAX_RUNS)]
            self.coarse = True
        self.runs = kept
        if spans:
            self.dest_next = spans[-1][0] + spans[-1][1]

    @classmethod
    def decode(cls, value: bytes) -> "Sync":
        doc = json.loads(value)
        return cls(int(doc["from"]), int(doc["next"]), int(doc["dnext"]), [tuple(r) for r in doc["runs"]],
                   bool(doc.get("coarse", False)))


class PartitionProgress:
    """What the destination says about one source partition: the syncs compaction kept, by slot."""

    def __init__(self) -> None:
        self.by_slot: dict[int, Sync] = {}
        self.seq = -1            # the slot sequence of the latest sync
        self._flat: tuple[list[Sync], list[tuple]] | None = None  # translate's view, made again after an add

    def add(self, slot: int, sync: Sync) -> None:
        self.by_slot[slot] = sync
        self._flat = None
        latest = self.latest
        if latest is None or sync.next >= latest.next:
            self.seq = slot

    @property
    def latest(self) -> Sync | None:
        return self.by_slot.get(self.seq)

    def next_slot(self) -> int:
        self.seq = (self.seq + 1) % HISTORY
        return self.seq

    def translate(self, upstream: int) -> int | str:
        """The destination offset a group committed at source offset `upstream` resumes from: the destination offset
        of the first copied record at or after it (the destination's log end when none is), so the group reads there
        exactly what it had not read here. A string says why there is none: the mirror has not read up to `upstream`
        yet, or `upstream` is older than the syncs compaction kept (MirrorMaker 2 leaves such a group alone too)."""
        latest = self.latest
        if latest is None or upstream > latest.next:
            return NOT_YET
        syncs, runs = self._view()
        if upstream < syncs[0].start:
            return TOO_OLD
        i = bisect.bisect_right(runs, (upstream, float("inf"))) - 1
        if i >= 0:
            u, d, n, step, next_is_exact = runs[i]
            if upstream <= u + (n - 1) * step:
                return d + -(-(upstream - u) // step)  # the run's first record at or after it
            if not next_is_exact:  # a coarse record left runs out after this one: theirs land at d + n or later
                return d + n
        if i + 1 < len(runs):
            return runs[i + 1][1]
        return latest.dest_next

    def _view(self) -> tuple[list[Sync], list[tuple]]:
        """The syncs by start, and every run as (u, d, n, stride, whether the next run is the next copied record)."""
        if self._flat is None:
            syncs = sorted(self.by_slot.values(), key=lambda s: s.start)
            runs = [(r[0], r[1], r[2], r[3] if len(r) > 3 else 1, not s.coarse or k == len(s.runs) - 1)
                    for s in syncs for k, r in enumerate(s.runs)]
            self._flat = syncs, runs
        return self._flat
