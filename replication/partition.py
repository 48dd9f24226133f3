"""One topic-partition as its leader serves it (Kafka's Partition): the one path for appends and fetches.

`PartitionView` holds the rules of what a reader may see: offsets from the log start up to the fetch
bound (the high watermark; the last stable offset under read_committed once transactions exist), and
ListOffsets answers (earliest, latest, by timestamp) within that bound. A live `Partition` applies
them to an engine's log; the Spark source applies the same rules to a directory read from outside
(segments.partition_reader), so the bound is defined once.
`Partition.append` appends a producer's batches as leader and then moves the high watermark: with one
replica the ISR is the leader alone, so the HW follows the log end after every append (Kafka's
maybeIncrementLeaderHW), and every acks setting is satisfied once the append returns.
On-disk: nothing of its own (the log's files; the HW reaches `replication-offset-checkpoint` through the
log manager).
Thread-safety: appends are serialised by the log's lock; fetches and offset queries take none.
"""
from __future__ import annotations

from typing import Protocol

from engine.common.errors import InvalidConfigurationError, InvalidRequiredAcksError, not_supported_yet
from segments.local_log import FetchData
from txn.unified_log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AppendInfo, UnifiedLog

READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ACKS = (0, 1, -1)


class ReadableLog(Protocol):
    """What a view needs of a log: a live UnifiedLog and a read-only PartitionReader both provide it."""

    log_start_offset: int
    high_watermark: int

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None: ...


def check_isolation(level: str) -> str:
    """`level` if it is one this engine serves; read_committed waits for transactions."""
    if level == READ_COMMITTED:
        raise not_supported_yet("isolation_level='read_committed' (transactions)")
    if level != READ_UNCOMMITTED:
        raise InvalidConfigurationError(f"isolation_level={level!r} must be 'read_uncommitted'")
    return level


class PartitionView:
    def __init__(self, topic: str, index: int, log: ReadableLog) -> None:
        self.topic, self.index, self.log = topic, index, log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def fetch_upper_bound(self, isolation: str = READ_UNCOMMITTED) -> int:
        """The offset after the last record a reader at `isolation` may see."""
        check_isolation(isolation)
        return self.log.high_watermark

    def offset_for_timestamp(self, timestamp: int, isolation: str = READ_UNCOMMITTED) -> tuple[int, int] | None:
        """ListOffsets: (timestamp, offset) of the first visible record whose timestamp is >= `timestamp`,
        None when there is none; -2 gives the log start and -1 the fetch bound (timestamp -1)."""
        bound = self.fetch_upper_bound(isolation)
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, self.log.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return -1, bound
        found = self.log.offset_for_timestamp(timestamp)
        return found if found is not None and found[1] < bound else None


class Partition(PartitionView):
    log: UnifiedLog

    leader_epoch = 0

    def make_leader(self) -> None:
        """Become the leader of the partition's only replica: the HW moves to the log end, and appends carry
        the latest leader epoch the log has seen (0 for a new log; a broker's own for a directory it wrote),
        so epochs never go down in the log."""
        self.leader_epoch = max(self.log.leader_epochs.latest_epoch or 0, 0)
        self.log.update_high_watermark(self.log.log_end_offset)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, data, acks: int = -1) -> AppendInfo:
        """Append a producer's batches (bytes of whole RecordBatch v2 batches) as leader; the HW follows.
        `acks` (0, 1 or -1) is met on return: the leader is the whole ISR."""
        if acks not in ACKS:
            raise InvalidRequiredAcksError(f"acks={acks!r} must be 0, 1 or -1", file=self.log.dir)
        try:
            return self.log.append_as_leader(data, leader_epoch=self.leader_epoch)
        finally:  # an append that failed after writing (its fsync, a checkpoint) still moved the LEO
            self.log.update_high_watermark(self.log.log_end_offset)

    def fetch(self, offset: int, max_bytes: int, isolation: str = READ_UNCOMMITTED) -> FetchData | None:
        """Whole batches from `offset` (at least one, however large), none past the fetch bound; None when
        `offset` is at or past the bound; OffsetOutOfRangeError below the log start."""
        bound = self.fetch_upper_bound(isolation)
        if offset >= bound:
            return None
        return self.log.read(offset, max_bytes, upper_bound=bound)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset` (-1: the HW); never past the HW."""
        return self.log.delete_records(offset)
