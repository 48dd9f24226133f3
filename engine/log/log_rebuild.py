"""What a partition's log rebuilds from its own batches, on open and after a truncation: the producer state (Kafka's
rebuildProducerState) and the leader epochs a crash left behind the log.

Producer state: the newest usable snapshot, then a replay of the batches after it (kafka-format.md §7 step 7), which
also restores an epoch whose checkpoint a crash cut off; a clean shutdown without snapshots had no producers to
remember (Kafka's shortcut). When segments were recovered (their `.txnindex` emptied), the replay starts at or before
the first of them (newer snapshots are deleted) and writes their aborted-transaction entries again from the markers.
Leader epochs: checked on open against the batch headers: the batch holding an entry's start carries its epoch (a
later epoch starts at a batch's base); after an unclean shutdown also the batch before that start an earlier epoch,
and the log's last batch the latest one. Only then can a checkpoint lag the log (a follower's link wrote batches that
were never accounted), and a replay that starts at a snapshot past where an epoch began sees it late, or not at all.
Entries that fail a check are rebuilt from the headers, with a recovery note.
On disk: `<offset>.snapshot` files (engine.log.producer_state: one at the log end once rebuilt) and `leader-epoch-checkpoint`
(segments.leader_epoch_checkpoint), each written whole. Crash policy: those files' own; a crash during a rebuild
leaves what the next open rebuilds again.
Each function takes the partition's engine.log.unified_log.UnifiedLog (which imports this module).
Thread-safety: called before the log is shared (on open) or with its lock held (a truncation).
"""
from __future__ import annotations


def rebuild_producer_state(log, clean_shutdown: bool, reindexed: frozenset[int] = frozenset()) -> None:
    """The producer state from the newest usable snapshot and the batches after it, snapshotted at the log end;
    `reindexed`: the bases of the segments whose `.txnindex` the replay writes again."""
    ps = log.producer_state
    ps.remove_stray_snapshots([s.base_offset for s in log.segments])
    if reindexed:
        first = min(reindexed)
        for off in ps.snapshot_offsets():
            if off > first:
                ps.delete_snapshot(off)
    end = log.log_end_offset
    if not ps.snapshot_offsets() and clean_shutdown:
        ps.load(log.log_start_offset, end)
        for seg in log.segments[-2:]:
            ps.map_end_offset = seg.base_offset
            ps.take_snapshot()
    else:
        start = ps.load(log.log_start_offset, end)
        replay(log, max(start if start is not None else 0, log.log_start_offset), end, True, reindexed)
    ps.map_end_offset = end
    ps.on_high_watermark(log.high_watermark)
    ps.take_snapshot()


def replay(log, offset: int, end: int, producers: bool, reindexed: frozenset[int] = frozenset()) -> None:
    """Feed the batches in [offset, end) to the leader-epoch cache and (with `producers`) the producer state, as a
    follower append would."""
    for segment_base, batch in log.batches(offset, end):
        log.leader_epochs.assign_if_newer(batch.partition_leader_epoch, batch.base_offset)
        if producers and batch.producer_id >= 0:
            log.update_producer(batch, batch.base_offset, batch.max_timestamp, index=segment_base in reindexed)


def check_leader_epochs(log, may_lag: bool) -> None:
    """Rebuild the leader-epoch entries from the batch headers unless the batch holding each entry's start carries its
    epoch; when the checkpoint `may_lag` the log (the log was not closed cleanly), also unless each epoch begins at its
    entry and the last batch carries the latest epoch (see above)."""
    cache = log.leader_epochs
    wrong = next(((e, o) for i, (e, o) in enumerate(cache.entries) if not _epoch_begins(log, e, o, i > 0, may_lag)),
                 None)
    if wrong is None and may_lag:
        last = _batch_holding(log, log.log_end_offset - 1)
        if last is not None and last.partition_leader_epoch >= 0 and last.partition_leader_epoch != cache.latest_epoch:
            wrong = (last.partition_leader_epoch, last.base_offset)
    if wrong is None:
        return
    log.recovery.note(f"rebuilt {cache.path}: epoch {wrong[0]} at offset {wrong[1]} does not match the log")
    cache.clear()
    replay(log, log.log_start_offset, log.log_end_offset, producers=False)


def _epoch_begins(log, epoch: int, start: int, later: bool, look_before: bool) -> bool:
    """The batch holding `start` carries `epoch` (a `later` entry's at a batch's base; compaction may since have removed
    that batch, never moved it) and, if asked to `look_before`, the batch before it carries an earlier epoch."""
    batch = _batch_holding(log, start)
    if batch is None or batch.partition_leader_epoch != epoch or (later and batch.base_offset < start):
        return False
    before = _batch_holding(log, start - 1) if look_before and start > log.log_start_offset else None
    return before is None or before.base_offset >= start or before.partition_leader_epoch < epoch


def _batch_holding(log, offset: int):
    """The first batch whose last offset is at or past `offset` (None past the log end or before its start)."""
    if not log.log_start_offset <= offset < log.log_end_offset:
        return None
    return next(iter(log.local.read(offset, 1, log.log_end_offset, True).batches(log.dir)), None)
