"""The log layer's rules, one at a time: names, rolls, flush, retention, checkpoints, locking,
leftovers, bad input. Expected values come from kafka-format.md's rules, computed here."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

import engine
from engine.common.clock import ManualClock
from engine.common.errors import (
    CorruptRecordError,
    InvalidConfigurationError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirectoryLockedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from engine.log.log_manager import LogManager
from engine.segments import names, offset_checkpoint
from engine.segments.fs import FaultyFileSystem, FileSystem
from engine.segments.log_config import LogConfig
from tests.log_checks import read_all, verify_index_files, verify_log
from engine.log.unified_log import UnifiedLog as Log

T0 = 1_700_000_000_000


def batch(n=3, ts=T0, size=20, **kw):
    return engine.encode_batch([(b"k%d" % i, b"v" * size, None, ts + i) for i in range(n)], **kw)


def new_log(tmp_path, clock=None, **config) -> Log:
    return Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict(config), clock or ManualClock(T0))


# --- names and configs ------------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["a/b", "..", ".", "nul\x00l", "x" * 250, "", "sp ace", "ünï"])
def test_bad_topic_names_are_refused(topic, tmp_path):
    with pytest.raises(InvalidTopicError):
        names.validate_topic(topic)
    with LogManager(str(tmp_path), background=False) as manager, pytest.raises(InvalidTopicError):
        manager.create_log(topic, 0)
    assert not [p for p in os.listdir(tmp_path) if p.endswith("-0")]


def test_good_names_and_file_names():
    assert names.validate_topic("x" * 249) and names.validate_topic("a.b_c-D9")
    assert names.file_name(42, ".log") == "00000000000000000042.log"
    assert names.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert names.parse_partition_dir("notapartition") is None


def test_configs_use_kafka_names_and_refuse_the_unknown_or_unimplemented():
    cfg = LogConfig.from_dict({"segment.bytes": "1048576", "retention.ms": -1})
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.index_interval_bytes) == (1 << 20, -1, 4096)
    assert LogConfig().to_dict()["max.message.bytes"] == 1048588
    with pytest.raises(InvalidConfigurationError):
        LogConfig.from_dict({"segment.byte": 1})
    with pytest.raises(InvalidConfigurationError):
        LogConfig.from_dict({"segment.bytes": 0})
    assert LogConfig.from_dict({"cleanup.policy": "delete, compact"}).cleanup_policy == "delete,compact"
    assert LogConfig.from_dict({"cleanup.policy": "compact"}).compact and not LogConfig().compact
    with pytest.raises(InvalidConfigurationError, match="preallocate=true is refused: a segment's .log grows"):
        LogConfig.from_dict({"preallocate": True})


# --- appends and reads ------------------------------------------------------------------------
def test_leader_append_assigns_offsets_and_stamps_the_epoch(tmp_path):
    lg = new_log(tmp_path)
    a = lg.append_as_leader(batch(3, base_offset=500), leader_epoch=7)
    b = lg.append_as_leader(batch(2) + batch(4), leader_epoch=7)
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset, b.batches) == (0, 2, 3, 8, 2)
    got = list(engine.iter_batches(lg.read(0, max_bytes=1 << 20).records))
    assert [(x.base_offset, x.partition_leader_epoch, x.is_valid()) for x in got] == \
        [(0, 7, True), (3, 7, True), (5, 7, True)]
    assert lg.log_end_offset == 9
    lg.close()


def test_log_append_time_topic_stamps_the_clock_and_keeps_the_crc_valid(tmp_path):
    clock = ManualClock(T0 + 5000)
    lg = new_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    info = lg.append_as_leader(batch(3))
    (b,) = engine.iter_batches(lg.read(0).records)
    assert b.is_valid() and b.timestamp_type == "log_append" and b.max_timestamp == T0 + 5000
    assert [r.timestamp for r in b.records()] == [T0 + 5000] * 3 and info.log_append_time == T0 + 5000
    lg.close()


def test_bad_appends_write_nothing(tmp_path):
    lg = new_log(tmp_path, **{"max.message.bytes": 2000, "segment.bytes": 5000})
    with pytest.raises(RecordTooLargeError):
        lg.append_as_leader(batch(1, size=3000))
    with pytest.raises(RecordBatchTooLargeError):
        lg.append_as_leader(b"".join(batch(1, size=1500) for _ in range(4)))
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(batch(2)[:-3])
    flipped = bytearray(batch(2))
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(bytes(flipped))
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(engine.encode_control_batch("commit", base_offset=0, producer_id=1, producer_epoch=0,
                                                        timestamp_ms=T0))
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0
    lg.close()


def test_reads_outside_the_log_are_out_of_range(tmp_path):
    lg = new_log(tmp_path)
    lg.append_as_leader(batch(5))
    lg.update_high_watermark(5)
    lg.delete_records(2)
    with pytest.raises(OffsetOutOfRangeError) as info:
        lg.read(1)
    assert info.value.offset == 1
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(6)
    assert len(lg.read(5).records) == 0
    assert len(lg.read(0 + 2).records) > 0
    lg.close()


def test_read_stops_before_the_upper_bound(tmp_path):
    lg = new_log(tmp_path)
    for _ in range(4):
        lg.append_as_leader(batch(2))
    got = list(engine.iter_batches(lg.read(0, max_bytes=1 << 20, upper_bound=5).records))
    assert [b.last_offset for b in got] == [1, 3]
    lg.close()


def test_follower_keeps_offsets_and_gaps_start_new_segments_at_the_batch_base(tmp_path):
    first, gap, big = batch(3, base_offset=0), batch(3, base_offset=100), batch(10, base_offset=1000)
    lg = new_log(tmp_path, **{"segment.bytes": len(first) + len(gap) + len(big) - 1})
    lg.append_as_follower(first)
    lg.append_as_follower(gap)  # a compaction gap
    lg.append_as_follower(big)  # does not fit the current segment: the new one starts at 1000, not 103
    assert [s.base_offset for s in lg.segments] == [0, 1000]
    assert lg.log_end_offset == 1010
    with pytest.raises(InvalidOffsetError):
        lg.append_as_follower(batch(1, base_offset=5))
    assert [b.base_offset for b in verify_log(lg)] == [0, 100, 1000]
    assert next(iter(engine.iter_batches(lg.read(50).records))).base_offset == 100
    assert next(iter(engine.iter_batches(lg.read(103).records))).base_offset == 1000  # the gap continues
    lg.close()


# --- index files made when first needed ---------------------------------------------------------
@pytest.mark.parametrize("appends", [0, 1, 3])
def test_a_new_log_closed_before_its_indexes_are_written_leaves_them_exact_and_reopens_clean(tmp_path, appends):
    lg = new_log(tmp_path, **{"index.interval.bytes": 4096})
    for i in range(appends):
        lg.append_as_leader(batch(2, ts=T0 + 10 * i))
    d = tmp_path / "t-0"
    assert not (d / names.file_name(0, names.INDEX)).exists()  # nothing written to either index yet: no file
    lg.close()
    # Kafka's shape after a clean close: both index files, trimmed to their entries (the time index's final entry
    # names the largest timestamp, when there is one)
    assert os.path.getsize(d / names.file_name(0, names.INDEX)) == 0
    assert os.path.getsize(d / names.file_name(0, names.TIME_INDEX)) == (12 if appends else 0)
    verify_index_files(d)
    again = Log(FileSystem(), str(d), LogConfig(), ManualClock(T0), clean_shutdown=True,
                recovery_point=2 * appends)
    assert again.recovery.describe() == [] and again.recovery.segments_recovered == []
    assert again.active_segment.time_index.last_entry() == ((T0 + 10 * (appends - 1) + 1, 2 * appends - 1)
                                                            if appends else (-1, 0))
    assert len(read_all(again)) == 2 * appends
    again.close()


# --- rolling -----------------------------------------------------------------------------------
def test_roll_on_segment_bytes_trims_the_old_indexes(tmp_path):
    lg = new_log(tmp_path, **{"segment.bytes": 1000, "index.interval.bytes": 100})
    for _ in range(12):
        lg.append_as_leader(batch(3, size=60))
    segs = lg.segments
    assert len(segs) > 2 and all(s.size <= 1000 for s in segs)
    for old in segs[:-1]:
        assert os.path.getsize(old.offset_index.path) == 8 * old.offset_index.entries
        assert os.path.getsize(old.time_index.path) == 12 * old.time_index.entries
        assert old.time_index.last_entry()[0] == old.max_timestamp_so_far  # final entry written on roll
    assert lg.recovery_point == segs[-1].base_offset  # a roll flushes everything before the new segment
    active = segs[-1].offset_index
    assert active.entries and not os.path.exists(active.path)  # a new index's entries wait in its buffer, no file yet
    lg.flush()
    assert os.path.getsize(active.path) == 10 * 1024 * 1024  # written: the active one is preallocated
    assert [s.base_offset for s in segs[1:]] == [s.read_next_offset() for s in segs[:-1]]
    lg.close()
    verify_index_files(tmp_path / "t-0")


def test_roll_on_segment_ms_uses_record_time(tmp_path):
    lg = new_log(tmp_path, **{"segment.ms": 10_000})
    lg.append_as_leader(batch(1, ts=T0))
    lg.append_as_leader(batch(1, ts=T0 + 10_000))        # waited exactly segment.ms: no roll
    assert len(lg.segments) == 1
    lg.append_as_leader(batch(1, ts=T0 + 10_001))        # record time past segment.ms: roll
    assert [s.base_offset for s in lg.segments] == [0, 2]
    lg.close()


def test_roll_when_an_index_is_full(tmp_path):
    # 48 bytes: 6 offset entries; the time index has 4 slots but equal timestamps add only one entry
    lg = new_log(tmp_path, **{"segment.index.bytes": 48, "index.interval.bytes": 0})
    for _ in range(8):
        lg.append_as_leader(batch(1, ts=T0))
    assert [s.base_offset for s in lg.segments] == [0, 7]  # appends 2..7 filled the offset index
    lg.close()
    # growing timestamps fill the time index first: its last slot is reserved (full at 3 of 4)
    lg = new_log(tmp_path / "b", **{"segment.index.bytes": 48, "index.interval.bytes": 0})
    for i in range(6):
        lg.append_as_leader(batch(1, ts=T0 + i))
    assert [s.base_offset for s in lg.segments] == [0, 4]
    lg.close()


# --- flush and retention ----------------------------------------------------------------------
def test_flush_messages_moves_the_recovery_point(tmp_path):
    lg = new_log(tmp_path, **{"flush.messages": 5})
    lg.append_as_leader(batch(3))
    assert lg.recovery_point == 0
    lg.append_as_leader(batch(3))
    assert lg.recovery_point == 6
    lg.close()


def test_background_flusher_honours_flush_ms_on_the_injected_clock(tmp_path):
    clock = ManualClock(T0)
    config = LogConfig.from_dict({"flush.ms": 10_000})
    with LogManager(str(tmp_path), clock=clock, configs=lambda t: config) as manager:
        lg = manager.create_log("t", 0)
        lg.append_as_leader(batch(3))
        assert lg.recovery_point == 0
        deadline = time.time() + 10
        while lg.recovery_point == 0 and time.time() < deadline:
            clock.advance(1_000)
            time.sleep(0.01)
        assert lg.recovery_point == 3
        assert clock.time_ms() - T0 >= 10_000


def test_retention_ms_deletes_old_segments_after_the_delay_never_past_the_hw(tmp_path):
    clock = ManualClock(T0)
    lg = new_log(tmp_path, clock, **{"segment.bytes": 300, "retention.ms": 60_000, "file.delete.delay.ms": 1000})
    for i in range(6):
        lg.append_as_leader(batch(2, ts=T0 + i * 1000))
    n_segments = len(lg.segments)
    clock.advance(200_000)
    assert lg.delete_old_segments() == 0  # the high watermark is still 0
    lg.update_high_watermark(lg.log_end_offset)
    removed = lg.delete_old_segments()
    assert removed == n_segments and len(lg.segments) == 1 and lg.active_segment.size == 0
    assert lg.log_start_offset == lg.log_end_offset == 12
    deleted = [f for f in os.listdir(tmp_path / "t-0") if f.endswith(".deleted")]
    assert deleted and lg.delete_pending_files() == 0
    clock.advance(1000)
    assert lg.delete_pending_files() == n_segments
    assert not [f for f in os.listdir(tmp_path / "t-0") if f.endswith(".deleted")]
    lg.close()


def _deleted_dirs(directory) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith("gone-") and name.endswith("-delete")]


def test_a_deleted_log_is_set_aside_at_once_and_removed_by_the_background_thread_after_the_delay(tmp_path):
    """Kafka's asyncDelete: delete_log returns with the directory renamed `-delete` (its bytes still there); the
    background thread removes it once `file.delete.delay.ms` has passed on the injected clock, not before."""
    clock = ManualClock(T0)
    config = LogConfig.from_dict({"file.delete.delay.ms": 30_000})
    with LogManager(str(tmp_path), clock=clock, configs=lambda t: config) as manager:
        manager.create_log("gone", 0).append_as_leader(batch(50))
        manager.delete_log("gone", 0)
        assert ("gone", 0) not in manager.slots() and not (tmp_path / "gone-0").exists()
        [moved] = _deleted_dirs(tmp_path)
        assert any(f.endswith(".log") and os.path.getsize(tmp_path / moved / f) for f in os.listdir(tmp_path / moved))
        clock.advance(29_999)
        time.sleep(0.3)  # the thread had its chance: not due yet
        assert _deleted_dirs(tmp_path) == [moved]
        clock.advance(1)
        deadline = time.time() + 10
        while _deleted_dirs(tmp_path) and time.time() < deadline:
            time.sleep(0.01)
        assert _deleted_dirs(tmp_path) == [] and manager.health.failing() == []
        assert manager.create_log("gone", 0).log_end_offset == 0  # the name is free again


def test_close_removes_the_deleted_logs_still_waiting_and_a_crash_leaves_them_to_the_next_open(tmp_path):
    config = LogConfig.from_dict({"file.delete.delay.ms": 3_600_000})
    with LogManager(str(tmp_path), clock=ManualClock(T0), configs=lambda t: config) as manager:
        manager.create_log("gone", 0).append_as_leader(batch(5))
        manager.delete_log("gone", 0)
        assert len(_deleted_dirs(tmp_path)) == 1
    assert _deleted_dirs(tmp_path) == []
    manager = LogManager(str(tmp_path), clock=ManualClock(T0), configs=lambda t: config)
    manager.create_log("gone", 1).append_as_leader(batch(5))
    manager.delete_log("gone", 1)
    manager.crash()
    assert len(_deleted_dirs(tmp_path)) == 1
    manager.release()
    with LogManager(str(tmp_path), background=False) as reopened:
        assert _deleted_dirs(tmp_path) == [] and reopened.slots() == {}


def test_a_deleted_log_that_cannot_be_removed_is_a_failing_task_tried_again(tmp_path):
    fs = FaultyFileSystem(seed=1)
    clock = ManualClock(T0)
    config = LogConfig.from_dict({"file.delete.delay.ms": 0})
    with LogManager(str(tmp_path), fs=fs, clock=clock, configs=lambda t: config) as manager:
        manager.create_log("gone", 0).append_as_leader(batch(5))
        fs.arm("remove", error=errno.EACCES)
        manager.delete_log("gone", 0)
        deadline = time.time() + 10
        while not manager.health.failing() and time.time() < deadline:
            time.sleep(0.01)
        [failure] = manager.health.failing()
        assert failure.task == "delete-logs" and "-delete" in failure.error and len(_deleted_dirs(tmp_path)) == 1
        with pytest.raises(KafkaStorageError):
            manager.check_health()
        fs.clear()
        while _deleted_dirs(tmp_path) and time.time() < deadline:
            clock.advance(LogManager.DELETE_RETRY_MS)
            time.sleep(0.01)
        assert _deleted_dirs(tmp_path) == []
        while manager.health.failing() and time.time() < deadline:
            time.sleep(0.01)
        manager.check_health()


def test_retention_bytes_keeps_the_newest(tmp_path):
    lg = new_log(tmp_path, **{"segment.bytes": 300, "retention.bytes": 600, "retention.ms": -1})
    for _ in range(10):
        lg.append_as_leader(batch(2))
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_old_segments()
    assert lg.size_in_bytes() <= 600 + 300
    assert read_all(lg)[-1][0] == lg.log_end_offset - 1 and lg.log_start_offset == lg.segments[0].base_offset
    lg.close()


# --- the log directory ------------------------------------------------------------------------
def test_checkpoints_clean_shutdown_and_files_are_kafkas(tmp_path):
    clock = ManualClock(T0)
    with LogManager(str(tmp_path), clock=clock, background=False) as manager:
        lg = manager.create_log("orders", 3, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
        lg.append_as_leader(batch(4))
        lg.update_high_watermark(4)
        lg.delete_records(1)
    root = tmp_path
    assert (root / ".kafka_cleanshutdown").read_bytes() == b'{"version":0,"brokerEpoch":0}'
    assert (root / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 4\n"
    assert (root / "replication-offset-checkpoint").read_text() == "0\n1\norders 3 4\n"
    assert (root / "log-start-offset-checkpoint").read_text() == "0\n1\norders 3 1\n"
    assert (root / "orders-3" / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert "node.id=0" in (root / "meta.properties").read_text()
    with LogManager(str(tmp_path), clock=clock, background=False) as manager:
        assert manager.clean_shutdown and not (root / ".kafka_cleanshutdown").exists()
        lg = manager.get_log("orders", 3)
        assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (1, 4, 4)
        assert lg.recovery.segments_recovered == []


def test_unreadable_checkpoint_means_full_recovery(tmp_path):
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_log("t", 0).append_as_leader(batch(3))
    (tmp_path / ".kafka_cleanshutdown").unlink()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage\n")
    with LogManager(str(tmp_path), background=False) as manager:
        assert manager.get_log("t", 0).recovery.segments_recovered == [0]
    assert offset_checkpoint.parse(b"0\n0\n") == {} and offset_checkpoint.parse(b"") == {}


def test_a_second_open_fails_clearly_in_this_and_another_process(tmp_path):
    with LogManager(str(tmp_path), background=False):
        with pytest.raises(LogDirectoryLockedError, match="already open"):
            LogManager(str(tmp_path), background=False)
        code = ("import sys; from engine.log.log_manager import LogManager\n"
                "from engine.common.errors import LogDirectoryLockedError\n"
                f"try: LogManager({str(tmp_path)!r}, background=False)\n"
                "except LogDirectoryLockedError as e: print('LOCKED', e); sys.exit(3)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 3 and "LOCKED" in out.stdout
    LogManager(str(tmp_path), background=False).close()  # released on close


def test_open_removes_leftovers_and_completes_swaps(tmp_path):
    d = tmp_path / "t-0"
    lg = new_log(tmp_path, **{"segment.bytes": 400})
    for _ in range(6):
        lg.append_as_leader(batch(3))
    bases = [s.base_offset for s in lg.segments]
    lg.close()
    (d / "00000000000000009999.log.deleted").write_bytes(b"x")
    (d / "00000000000000009998.log.cleaned").write_bytes(b"x")
    (d / "00000000000000077777.index").write_bytes(b"")  # orphan index
    # a completed cleaning: the first segment's replacement waits as .swap
    first = d / names.file_name(bases[0], ".log")
    os.rename(first, str(first) + ".swap")
    lg = new_log(tmp_path, **{"segment.bytes": 400})
    left = set(os.listdir(d))
    assert not any(f.endswith((".deleted", ".cleaned", ".swap")) for f in left)
    assert "00000000000000077777.index" not in left and first.name in left
    assert [s.base_offset for s in lg.segments] == bases and len(read_all(lg)) == 18
    lg.close()


def test_garbage_in_a_trusted_segment_is_a_typed_error_naming_file_and_position(tmp_path):
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_log("t", 0).append_as_leader(batch(3))
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"garbage!")  # a size below 14
    # after a clean shutdown the segment is trusted, as in Kafka: loading the log (its first use) meets the garbage
    with LogManager(str(tmp_path), background=False) as manager:
        with pytest.raises(CorruptRecordError) as info:
            manager.get_log("t", 0).log_end_offset
    assert info.value.file == str(seg) and info.value.position == good
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # not written again by that close: the next open recovers
    with LogManager(str(tmp_path), background=False) as manager:  # unclean: recovered, tail cut
        lg = manager.get_log("t", 0)
        assert lg.recovery.bytes_truncated == 20 and lg.log_end_offset == 3
    assert seg.stat().st_size == good


def test_views_survive_truncation(tmp_path):
    lg = new_log(tmp_path)
    for _ in range(3):
        lg.append_as_leader(batch(3))
    view = lg.read(0, max_bytes=1 << 20).records
    before = bytes(view)
    lg.truncate_to(3)
    assert bytes(view) == before  # the old bytes stay readable: no SIGBUS, no silent change
    assert lg.log_end_offset == 3 and read_all(lg) == [(i, b"k%d" % i, b"v" * 20) for i in range(3)]
    del view
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0
    lg.close()


def test_large_views_map_their_own_window_and_survive_truncation(tmp_path):
    from engine.segments.segment import WINDOW_BYTES

    lg = new_log(tmp_path)
    for _ in range(40):
        lg.append_as_leader(batch(400, size=200))
    view = lg.read(0, max_bytes=8 << 20).records
    assert len(view) >= WINDOW_BYTES  # a windowed mapping, not the whole-file one
    before = bytes(view)
    lg.truncate_to(400)
    assert bytes(view) == before and lg.log_end_offset == 400
    del view
    assert len(read_all(lg)) == 400
    lg.close()


def test_truncate_fully_and_start_at(tmp_path):
    lg = new_log(tmp_path)
    lg.append_as_leader(batch(3))
    lg.truncate_fully_and_start_at(1000)
    assert (lg.log_start_offset, lg.log_end_offset, [s.base_offset for s in lg.segments]) == (1000, 1000, [1000])
    assert lg.append_as_leader(batch(1)).first_offset == 1000
    lg.close()


def test_jitter_shortens_segment_ms(tmp_path):
    import random as _random

    _random.seed(5)
    lg = new_log(tmp_path, **{"segment.ms": 10_000, "segment.jitter.ms": 4_000})
    jitter = lg.active_segment.roll_jitter_ms
    assert 0 <= jitter < 4_000
    lg.append_as_leader(batch(1, ts=T0))
    lg.append_as_leader(batch(1, ts=T0 + 10_000 - jitter))  # exactly segment.ms - jitter: no roll
    assert len(lg.segments) == 1
    lg.append_as_leader(batch(1, ts=T0 + 10_001 - jitter))
    assert len(lg.segments) == 2
    lg.close()


def test_relative_offset_overflow_rolls(tmp_path):
    lg = new_log(tmp_path)
    lg.append_as_follower(batch(1, base_offset=0))
    lg.append_as_follower(batch(1, base_offset=2**31))  # 2**31 - 0 does not fit the segment's int32
    assert [s.base_offset for s in lg.segments] == [0, 2**31]
    lg.close()


def test_corruption_in_a_middle_segment_drops_the_later_ones(tmp_path):
    lg = new_log(tmp_path, **{"segment.bytes": 400})
    for _ in range(8):
        lg.append_as_leader(batch(3))
    bases = [s.base_offset for s in lg.segments]
    middle = lg.segments[1].log_path
    lg.close()
    with open(middle, "r+b") as f:  # flip a byte inside the middle segment's second batch
        f.seek(150)
        byte = f.read(1)[0]
        f.seek(150)
        f.write(bytes([byte ^ 0xFF]))
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"segment.bytes": 400}), ManualClock(T0))
    assert lg.recovery.bytes_truncated > 0
    assert lg.recovery.segments_dropped == bases[2:]
    assert [s.base_offset for s in lg.segments] == bases[:2]
    assert lg.log_end_offset == verify_log(lg)[-1].next_offset < bases[2]
    lg.close()


def test_an_index_of_partial_entries_is_rebuilt(tmp_path):
    with LogManager(str(tmp_path), background=False) as manager:
        lg = manager.create_log("t", 0)
        for _ in range(5):
            lg.append_as_leader(batch(40))
    index = tmp_path / "t-0" / "00000000000000000000.index"
    good = index.read_bytes()
    index.write_bytes(good + b"\x01\x02\x03")  # not a whole number of 8-byte entries
    with LogManager(str(tmp_path), background=False) as manager:  # even after a clean shutdown
        assert manager.get_log("t", 0).recovery.segments_recovered == [0]
    assert index.read_bytes() == good


def test_dump_log_exit_code_flags_a_mismatched_index(tmp_path):
    import io

    from engine.tools import dump_log

    with LogManager(str(tmp_path), background=False) as manager:
        lg = manager.create_log("t", 0)
        for _ in range(5):
            lg.append_as_leader(batch(40))
    d = tmp_path / "t-0"
    files = [str(d / "00000000000000000000.log"), str(d / "00000000000000000000.index")]
    assert dump_log.dump(files, verify_index_only=True, out=io.StringIO()) == 0
    data = bytearray((d / "00000000000000000000.index").read_bytes())
    data[3] ^= 0x01  # the first entry's relative offset now names another offset
    (d / "00000000000000000000.index").write_bytes(bytes(data))
    out = io.StringIO()
    assert dump_log.dump(files, verify_index_only=True, out=out) == 1
    assert "does not match the log" in out.getvalue()
