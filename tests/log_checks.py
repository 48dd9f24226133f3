"""Invariant checks for an open or closed log, shared by the log, crash and property tests, and the log the
one-call append model tests run their appends on."""
from __future__ import annotations

import io
from contextlib import contextmanager

import pytest

import engine
from engine.record import twins
from engine.segments import segment_appender
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.tools import dump_log
from engine.log.unified_log import UnifiedLog


def verify_index_files(directory) -> None:
    """kafkalog dump-log --verify-index-only --index-sanity-check over a closed partition directory."""
    import glob
    import os

    files = sorted(glob.glob(os.path.join(str(directory), "*.log")) + glob.glob(os.path.join(str(directory), "*index")))
    out = io.StringIO()
    assert dump_log.dump(files, verify_index_only=True, index_sanity_check=True, out=out) == 0, out.getvalue()


def _verify_indexes(seg) -> None:
    """Every in-memory index entry points where Kafka guarantees it does."""
    by_pos = {b.position: b for b in seg.batches()}
    by_last = {b.last_offset: b for b in by_pos.values()}
    prev = None
    for i in range(seg.offset_index.entries):
        offset, position = seg.offset_index.entry(i)
        assert position in by_pos and by_pos[position].last_offset == offset, (seg.log_path, i, offset, position)
        assert prev is None or offset > prev
        prev = offset
    prev_ts = -1
    for i in range(seg.time_index.entries):
        ts, offset = seg.time_index.entry(i)
        assert offset in by_last and by_last[offset].max_timestamp == ts, (seg.log_path, i, ts, offset)
        assert ts > prev_ts
        prev_ts = ts


def verify_log(lg) -> list:
    """Check an open Log's invariants; return every batch (each CRC-valid) in offset order."""
    batches, prev_end = [], None
    for seg in lg.segments:
        _verify_indexes(seg)
        for b in seg.batches():
            assert b.is_valid(), f"corrupt batch at {b.position} in {seg.log_path}"
            assert b.base_offset >= seg.base_offset
            assert prev_end is None or b.base_offset >= prev_end
            prev_end = b.next_offset
            batches.append(b)
    assert lg.log_end_offset == (batches[-1].next_offset if batches else lg.active_segment.base_offset)
    assert lg.log_start_offset <= lg.log_end_offset and lg.recovery_point <= lg.log_end_offset
    return batches


def records_of(batches) -> list[tuple]:
    return [(r.offset, r.key, r.value) for b in batches for r in b.records()]


def read_all(lg) -> list[tuple]:
    """Every record reachable through Log.read, from the log start to the end."""
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        batches = list(engine.iter_batches(lg.read(offset, max_bytes=8192).records))
        assert batches, f"read made no progress at {offset}"
        out += [(r.offset, r.key, r.value) for b in batches for r in b.records() if r.offset >= offset]
        offset = batches[-1].next_offset
    return out


def read_log(e, topic: str, isolation: str = "read_committed", partition: int = 0,
             start: int | None = None) -> list[tuple]:
    """(offset, key, value) of everything a consumer at `isolation` reads from `start` (default: the earliest) to
    the partition's end: polls until its position reaches the end offset, as a fetch of only empty or aborted
    batches returns no records yet moves on."""
    from engine import TopicPartition

    c = e.consumer(isolation_level=isolation, auto_offset_reset="earliest", enable_auto_commit=False)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    if start is not None:
        c.seek(tp, start)
    end = c.end_offsets([tp])[tp]
    out = []
    for _ in range(100_000):
        if c.position(tp) >= end:
            c.close()
            return out
        for r in c.poll(timeout_ms=0, max_records=100_000).get(tp, []):
            out.append((r.offset, r.key, r.value))
    raise AssertionError(f"{topic}-{partition}: the consumer did not reach the end offset {end}")


@contextmanager
def model_log(directory, impl: str, config: dict, clock):
    """A fresh UnifiedLog at `directory` whose segments use `impl`'s segment appender (a one-call append and the
    general path then run on the same implementation), closed on exit."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
        lg = UnifiedLog(FileSystem(), str(directory), LogConfig.from_dict(config), clock)
        try:
            yield lg
        finally:
            lg.close()


def appended_state(lg) -> dict:
    """What an append leaves besides the files: the producer state, the LEO, the leader epochs, the recovery point."""
    return {"producers": {pid: (e.epoch, list(e.batches), e.coordinator_epoch, e.last_timestamp, e.txn_first_offset)
                          for pid, e in lg.producer_state.producers.items()},
            "leo": lg.log_end_offset, "map_end": lg.producer_state.map_end_offset,
            "epochs": list(lg.leader_epochs.entries), "recovery_point": lg.local.recovery_point}


def files_of(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


class GeneralPathOnly:
    """A one-call follower append that always leaves the append to the general path (the model of the tests that
    check a faster path against that one)."""

    def append(self, data):
        return None
