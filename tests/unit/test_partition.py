"""The pieces a partition is composed of: the leader-epoch cache (kafka-format.md §11's rules, and Kafka's
own `leader-epoch-checkpoint` files), batch headers read for producer state (against the vectors' dumps),
and the one set of visibility rules a live Partition and a directory read from outside share."""
from __future__ import annotations

import os
import shutil

import pytest

import engine
from engine.record import twins
from engine.common.clock import ManualClock
from engine.common.errors import InvalidConfigurationError, InvalidRequiredAcksError
from engine.record import batch_format as bf
from engine.replication.partition import READ_COMMITTED, Partition, PartitionView
from engine.segments import leader_epoch_checkpoint
from engine.segments.fs import FileSystem
from engine.segments.leader_epoch_checkpoint import LeaderEpochCache
from engine.segments.local_log import FetchData
from engine.segments.log_config import LogConfig
from engine.segments.partition_reader import PartitionReader
from engine.segments.segment import WINDOW_BYTES
from tests import vectors
from engine.log import log_read
from engine.log.read_committed import CommittedLog
from engine.log.unified_log import UnifiedLog

T0 = 1_700_000_000_000


def batch(n: int, ts: int = T0, **kw) -> bytes:
    return engine.encode_batch([(b"k%d" % i, b"v%d" % i, None, ts + i) for i in range(n)], **kw)


def checkpoint(directory) -> list[tuple[int, int]]:
    return leader_epoch_checkpoint.parse((directory / leader_epoch_checkpoint.FILE).read_bytes())


# --- the leader-epoch cache -------------------------------------------------------------------
def test_assign_follows_kafkas_rules(tmp_path):
    cache = LeaderEpochCache(FileSystem(), str(tmp_path))
    cache.assign(0, 0)
    cache.assign(0, 10)                   # the latest epoch at a later offset: nothing changes
    cache.assign(2, 40)
    assert cache.entries == checkpoint(tmp_path) == [(0, 0), (2, 40)]
    cache.assign(2, 30)                   # the latest epoch at an earlier offset replaces it
    assert checkpoint(tmp_path) == [(0, 0), (2, 30)]
    cache.assign(1, 20)                   # a lower epoch drops every entry with epoch >= 1 or start >= 20
    assert checkpoint(tmp_path) == [(0, 0), (1, 20)]
    cache.assign(-1, 50)                  # a batch without an epoch says nothing
    assert cache.latest_epoch == 1
    cache.assign_if_newer(0, 60)          # rebuilding from the log never rewrites history
    cache.assign_if_newer(3, 60)
    assert checkpoint(tmp_path) == [(0, 0), (1, 20), (3, 60)]


def test_truncation_from_either_end(tmp_path):
    cache = LeaderEpochCache(FileSystem(), str(tmp_path))
    for epoch, start in [(0, 0), (1, 20), (3, 60)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(60)           # entries starting at or after the new end go
    assert checkpoint(tmp_path) == [(0, 0), (1, 20)]
    cache.truncate_from_start(25)         # the last epoch starting at or before the new start now starts there
    assert checkpoint(tmp_path) == [(1, 25)]
    cache.clear()
    assert checkpoint(tmp_path) == [] and cache.latest_epoch is None
    (tmp_path / leader_epoch_checkpoint.FILE).write_text("garbage\n")
    assert LeaderEpochCache(FileSystem(), str(tmp_path)).entries == []  # unreadable: empty, rebuilt from appends


@pytest.mark.parametrize("case", vectors.CASES)
def test_kafkas_checkpoint_is_kept_and_adopted_appends_continue_its_epoch(case, tmp_path):
    expected = [(e["epoch"], e["startOffset"]) for e in vectors.expected(case) if e["type"] == "epochEntry"]
    shutil.copytree(vectors.case_dir(case), tmp_path / case)
    original = (tmp_path / case / leader_epoch_checkpoint.FILE).read_bytes()
    with engine.open(str(tmp_path), clock=ManualClock(T0), background=False) as eng:
        topic = case.rsplit("-", 1)[0]
        assert eng.log(topic, 0).leader_epochs.entries == expected
        end = eng.partition(topic, 0).log_end_offset
        eng.append(topic, 0, batch(2))
        stored = [b for b in engine.iter_batches(eng.log(topic, 0).read(end).records) if b.base_offset == end]
        assert [b.partition_leader_epoch for b in stored] == [expected[-1][0]]
    assert (tmp_path / case / leader_epoch_checkpoint.FILE).read_bytes() == original  # same epoch: no new entry


def test_a_new_log_records_epoch_zero_and_a_crash_before_the_checkpoint_is_repaired(tmp_path):
    directory = tmp_path / "t-0"
    lg = UnifiedLog(FileSystem(), str(directory), LogConfig(), ManualClock(T0))
    lg.append_as_leader(batch(3))
    lg.append_as_leader(batch(2), leader_epoch=4)
    assert checkpoint(directory) == [(0, 0), (4, 3)]
    lg.close()
    # as if the process had died after the epoch-4 append reached the log but before its checkpoint did
    # (and so before the close's snapshot at the log end)
    (directory / "00000000000000000005.snapshot").unlink()
    (directory / leader_epoch_checkpoint.FILE).write_bytes(leader_epoch_checkpoint.render([(0, 0)]))
    reopened = UnifiedLog(FileSystem(), str(directory), LogConfig(), ManualClock(T0), clean_shutdown=False)
    assert reopened.leader_epochs.entries == checkpoint(directory) == [(0, 0), (4, 3)]
    reopened.truncate_to(2)               # truncation trims the epochs with the log
    assert checkpoint(directory) == [(0, 0)]
    reopened.truncate_fully_and_start_at(100)
    assert checkpoint(directory) == []
    reopened.close()


@pytest.mark.parametrize("stale", ["late start", "lost epoch"])
def test_a_checkpoint_behind_the_log_is_rebuilt_whatever_snapshot_the_replay_starts_at(tmp_path, stale):
    """Batches of an epoch reached the log, but the checkpoint starts that epoch later than they do ("late
    start") or lacks it ("lost epoch"), while a producer snapshot already sits past them (a follower's link
    wrote them unaccounted, and a later life of the log snapshotted its end): the replay from that snapshot
    cannot see where the epoch began, so the load checks every entry's start against the batch before it, and
    the log's last batch against the latest entry, and rebuilds the entries from the batch headers."""
    directory = tmp_path / "t-0"
    lg = UnifiedLog(FileSystem(), str(directory), LogConfig(), ManualClock(T0))
    lg.append_as_leader(batch(3), leader_epoch=1)
    lg.append_as_leader(batch(2), leader_epoch=2)
    lg.roll()  # a snapshot at 5, where the segment the unclean open re-validates (and replays from) begins
    for _ in range(2):
        lg.append_as_leader(batch(2), leader_epoch=2)
    assert checkpoint(directory) == [(1, 0), (2, 3)]
    lg.close()
    entries = [(1, 0), (2, 7)] if stale == "late start" else [(1, 0)]
    (directory / leader_epoch_checkpoint.FILE).write_bytes(leader_epoch_checkpoint.render(entries))
    reopened = UnifiedLog(FileSystem(), str(directory), LogConfig(), ManualClock(T0), recovery_point=5,
                          clean_shutdown=False)
    assert reopened.leader_epochs.entries == checkpoint(directory) == [(1, 0), (2, 3)]
    assert any("does not match the log" in n for n in reopened.recovery.repairs), reopened.recovery.describe()
    reopened.close()


# --- batch headers ----------------------------------------------------------------------------
@pytest.mark.parametrize("case", vectors.CASES)
def test_batch_header_fields_match_kafkas_dump(case):
    for name, seg in vectors.segments(vectors.expected(case)).items():
        data = (vectors.case_dir(case) / name).read_bytes()
        for line, _ in seg["batches"]:
            h = bf.BatchHeader(data[line["position"]:line["position"] + bf.HEADER_SIZE])
            assert (h.base_offset, h.last_offset_delta, h.max_timestamp, h.producer_id, h.producer_epoch,
                    h.base_sequence, h.last_sequence, h.is_transactional, h.is_control) == (
                line["baseOffset"], line["lastOffsetDelta"], line["maxTimestamp"], line["producerId"],
                line["producerEpoch"], line["baseSequence"], line["lastSequence"], line["isTransactional"],
                line["isControl"]), (case, line["baseOffset"])


# --- what readers may see ---------------------------------------------------------------------
def test_live_and_directory_views_apply_the_same_bound(tmp_path):
    """Records past the high watermark are invisible to fetches and ListOffsets, in the engine and to a
    reader of the directory alone (the Spark source's view), and read_committed waits for transactions."""
    directory = tmp_path / "t-0"
    lg = UnifiedLog(FileSystem(), str(directory), LogConfig(), ManualClock(T0))
    part = Partition("t", 0, lg)
    part.make_leader()
    part.append(batch(4))                             # offsets 0-3, timestamps T0..T0+3; the HW follows
    lg.append_as_leader(batch(3, ts=T0 + 100))        # 4-6 appended but not yet visible (HW stays at 4)
    assert (part.high_watermark, part.log_end_offset) == (4, 7)
    fetched = [b.last_offset for b in part.fetch(0, 1 << 20).batches()]
    assert fetched == [3] and part.fetch(4, 1 << 20) is None
    reader = PartitionReader(str(directory), high_watermark=4)
    try:
        for view in (part, PartitionView("t", 0, reader), PartitionView("t", 0, CommittedLog(reader))):
            assert view.fetch_upper_bound() == 4
            assert view.offset_for_timestamp(T0 + 2) == (T0 + 2, 2)
            assert view.offset_for_timestamp(T0 + 50) is None     # only offsets 4-6 are that late
            assert view.offset_for_timestamp(-2) == (-1, 0) and view.offset_for_timestamp(-1) == (-1, 4)
            assert view.offset_for_timestamp(-4) == (-1, 0) and view.offset_for_timestamp(-5) == (-1, -1)
            # the largest timestamp (T0+100, offset 4) is past the bound: Kafka answers nothing rather than an
            # earlier record
            assert view.offset_for_timestamp(-3) is None
            if isinstance(view.log, PartitionReader):
                continue  # a bare directory reader knows no transactions: Spark wraps it in a CommittedLog
            assert view.fetch_upper_bound(READ_COMMITTED) == 4  # no transaction: the LSO is the HW
            with pytest.raises(InvalidConfigurationError):
                view.fetch_upper_bound("read_commited")
    finally:
        reader.close()
    with pytest.raises(InvalidRequiredAcksError):
        part.append(batch(1), acks=2)
    part.append(batch(1, ts=T0 + 200))                # the next leader append makes 4-7 visible
    assert part.high_watermark == 8 and part.offset_for_timestamp(T0 + 50) == (T0 + 100, 4)
    lg.close()
    assert sorted(f for f in os.listdir(directory) if f.endswith(".log")) == ["00000000000000000000.log"]


@pytest.mark.parametrize("path", ["layers", "one call"])
def test_a_read_racing_an_append_returns_what_was_there_when_it_started(tmp_path, path):
    """A batch appended between the read taking the LEO and the read scanning the segment is not read (it used
    to look like a batch past the log end: a CorruptRecordError for a consumer reading while a producer wrote).
    The layers' read is raced inside LogSegment.read; the one-call read (its Python twin, whose steps are the
    native one's) inside the segment's view."""
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        e.append("t", 0, batch(3))
        lg = e.log("t", 0)
        seg = lg.local.active_segment
        hook = "read" if path == "layers" else "view"
        real = getattr(seg, hook)

        def racing(*args, **kwargs):
            e.append("t", 0, batch(2))  # lands after read() took the LEO, before the segment is scanned
            return real(*args, **kwargs)

        setattr(seg, hook, racing)
        if path == "layers":
            lg._reader = twins.load("log_read", "python")(lg, FetchData, WINDOW_BYTES)
            lg._reader.read = lambda *args: None  # the one call declines: the layers read
            got = lg.read(0)
        else:
            got = twins.load("log_read", "python")(lg, FetchData, WINDOW_BYTES).read(0, 1 << 20, None, True)
        delattr(seg, hook)
        assert [b.last_offset for b in got.batches(lg.dir)] == [2] and lg.log_end_offset == 5
