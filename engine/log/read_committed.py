"""What a read_committed reader may return (Kafka's fetch isolation, kafka-format.md §10.3).

`AbortedFilter` is the consumer's side of a fetch (Kafka's CompletedFetch): given the aborted transactions the
fetch overlaps, a min-heap by first offset feeds an "aborted producers" set as batches pass; a transactional
batch of a producer in that set is skipped, its ABORT marker takes the producer out again, and control batches
are never data. `scan` is the same knowledge for a reader without the engine's producer state (Spark on a
directory): one pass over batch headers up to the high watermark gives the first unstable offset (the first
offset of a transaction still open) and every aborted transaction, each (producer, first offset, marker offset);
`CommittedLog` wraps such a directory's reader with them.
Pure functions and per-reader objects; a filter belongs to one reader thread.
"""
from __future__ import annotations

import heapq
from typing import Iterable, NamedTuple

from engine.record import batch_format as bf
from engine.record import codec
from engine.segments.partition_reader import PartitionReader
from engine.segments.txn_index import AbortedTxn


def marker_of(batch) -> tuple[int, int | None]:
    """(control type, coordinator epoch) of a control batch's one record; (-1, None) when it has none."""
    records = batch.records()
    return (records[0].control_type, records[0].coordinator_epoch) if records else (-1, None)


class AbortedFilter:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._heap = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._heap)
        self._producers: set[int] = set()

    def visible(self, batch) -> bool:
        """Whether `batch` (offset order, one partition) holds records a read_committed reader returns."""
        pid = batch.producer_id
        if pid >= 0:
            heap = self._heap
            while heap and heap[0][0] <= batch.last_offset:
                self._producers.add(heapq.heappop(heap)[1])
        if batch.is_control:
            if pid in self._producers and marker_of(batch)[0] == bf.ABORT:
                self._producers.discard(pid)
            return False
        return not (batch.is_transactional and pid in self._producers)


class ScanResult(NamedTuple):
    first_unstable_offset: int | None
    aborted: list[AbortedTxn]


def scan(batches: Iterable) -> ScanResult:
    """Open and aborted transactions in `batches` (a partition's, in offset order, from its log start)."""
    open_txns: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    for batch in batches:
        pid = batch.producer_id
        if pid < 0 or not batch.is_transactional:
            continue
        if batch.is_control:
            first = open_txns.pop(pid, None)
            if first is not None and marker_of(batch)[0] == bf.ABORT:
                aborted.append(AbortedTxn(pid, first, batch.base_offset, -1))
        else:
            open_txns.setdefault(pid, batch.base_offset)
    return ScanResult(min(open_txns.values(), default=None), aborted)


class CommittedLog:
    """A partition directory read from outside (segments.partition_reader) as a read_committed reader sees it:
    its LSO and aborted transactions, from one `scan` of its batch headers up to the high watermark."""

    def __init__(self, reader: PartitionReader, chunk_bytes: int = 8 << 20) -> None:
        self.reader, self.dir = reader, reader.dir
        self.log_start_offset, self.high_watermark = reader.log_start_offset, reader.high_watermark
        start, hw = self.log_start_offset, self.high_watermark
        found = scan(b for chunk in reader.chunks(start, hw, chunk_bytes)
                     for b in codec.iter_batches(chunk.data, source=reader.dir)
                     if b.base_offset < hw and b.next_offset > start)
        unstable = found.first_unstable_offset
        self.last_stable_offset = hw if unstable is None else max(start, min(unstable, hw))
        self.aborted = found.aborted

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.reader.offset_for_timestamp(timestamp)
