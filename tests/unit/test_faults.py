"""Faults injected through the file-system seam: EIO and ENOSPC (once, torn, or until the disk has room
again) in the middle of an append, a roll and a checkpoint. Each gives a typed error; the log stays
readable, takes appends again once the fault clears, and loses nothing it acknowledged. The background
thread survives a failing task, reports it through the next append or flush, and resumes."""
from __future__ import annotations

import errno
import threading
import time

import pytest

import engine
from engine.common import health
from engine.common.errors import KafkaError, KafkaStorageError
from engine.log.log_manager import LogManager
from engine.segments.fs import FaultyFileSystem

TOPIC = "f"


def _eventually(predicate, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _batch(i: int) -> bytes:
    return engine.encode_batch([(None, b"r%d-%d" % (i, j) * 20, None, 1_000 + i) for j in range(5)])


def _records(e) -> list[tuple[int, bytes]]:
    c = e.consumer(auto_offset_reset="earliest")
    c.assign([engine.TopicPartition(TOPIC, 0)])
    out = []
    while got := c.poll(max_records=10_000):
        out += [(r.offset, r.value) for recs in got.values() for r in recs]
    return out


# (operation, which call of it to fail, errno, torn) around appends that roll every few batches
CASES = [(op, after, code, tear) for op in ("write", "fsync", "open", "truncate", "rename", "mmap")
         for after in (0, 1, 3, 7) for code in (errno.EIO, errno.ENOSPC) for tear in (False, True)
         if not (tear and op != "write")]


@pytest.mark.parametrize("op, after, code, tear", CASES)
def test_a_fault_mid_append_or_roll_is_typed_and_loses_nothing_acknowledged(tmp_path, op, after, code, tear):
    fs = FaultyFileSystem(seed=after)
    acked: dict[int, bytes] = {}
    with engine.open(str(tmp_path), clock=engine.ManualClock(), background=False, fs=fs) as e:
        e.create_topic(TOPIC, config={"segment.bytes": 2500, "flush.messages": 1, "index.interval.bytes": 100})
        failures = 0
        for i in range(30):
            if i == 10:
                fs.arm(op, after=after, error=code, tear=tear, persistent=(i % 2 == 0 and code == errno.ENOSPC))
            if i == 20:
                fs.clear()  # the disk has room again / the device is back
            try:
                info = e.append(TOPIC, 0, _batch(i))
            except KafkaError as exc:
                assert isinstance(exc, KafkaStorageError) and exc.file, repr(exc)
                failures += 1
                continue
            recs = list(engine.iter_batches(_batch(i)))[0].records()
            acked.update({info.first_offset + j: r.value for j, r in enumerate(recs)})
        served = dict(_records(e))
        assert all(served.get(o) == v for o, v in acked.items()), "an acknowledged record is missing"
        for i in range(30, 33):  # appendable once the fault has cleared
            e.append(TOPIC, 0, _batch(i))
    with engine.open(str(tmp_path), background=False) as e:  # and after a reopen
        served = dict(_records(e))
        assert all(served.get(o) == v for o, v in acked.items()), "an acknowledged record was lost on reopen"
        offsets = sorted(served)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_fault_mid_checkpoint_on_close_is_typed_and_the_directory_reopens(tmp_path, code):
    fs = FaultyFileSystem(seed=1)
    e = engine.open(str(tmp_path), clock=engine.ManualClock(), background=False, fs=fs)
    e.create_topic(TOPIC)
    infos = [e.append(TOPIC, 0, _batch(i)) for i in range(5)]
    e.flush()
    fs.arm("rename", error=code)  # the checkpoint's tmp file cannot be renamed into place
    with pytest.raises(KafkaStorageError):
        e.close()
    with engine.open(str(tmp_path), background=False) as again:
        assert len(_records(again)) == 5 * len(infos)


def test_enospc_while_checkpointing_the_thread_survives_and_flushing_resumes(tmp_path):
    fs = FaultyFileSystem(seed=2)
    clock = engine.ManualClock()
    with engine.open(str(tmp_path), clock=clock, fs=fs) as e:
        e.create_topic(TOPIC, config={"flush.ms": 500})
        e.append(TOPIC, 0, _batch(0))
        manager: LogManager = e._logs
        thread = manager._thread
        fs.arm("write", error=errno.ENOSPC, persistent=True)
        clock.advance(LogManager.CHECKPOINT_MS + 1)
        _eventually(lambda: "checkpoint" in manager._failures, "the checkpoint to fail")
        assert thread.is_alive()
        with pytest.raises(KafkaStorageError, match="background checkpoint"):
            e.append(TOPIC, 0, _batch(1))
        with pytest.raises(KafkaStorageError):
            e.flush()
        fs.clear()  # room again: the retry succeeds and appends are accepted
        _eventually(lambda: (clock.advance(health.RETRY_MS), not manager._failures)[1], "the retry")
        assert thread.is_alive()
        lg = e.log(TOPIC, 0)
        before = lg.recovery_point  # (read before the append: the background flush may take it at once)
        e.append(TOPIC, 0, _batch(2))
        _eventually(lambda: (clock.advance(600), lg.recovery_point > before)[1], "flush.ms to flush again")
        assert lg.recovery_point == lg.log_end_offset


def test_a_failing_background_task_never_ends_the_thread(tmp_path):
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("boom")

    clock = engine.ManualClock()
    manager = LogManager(str(tmp_path), clock=clock, tasks={"broken": (100, broken)})
    try:
        for _ in range(3):
            n = len(calls)
            _eventually(lambda: (clock.advance(health.RETRY_MS), len(calls) > n)[1], "another attempt")
        assert manager._thread.is_alive()
        with pytest.raises(KafkaStorageError, match="boom"):
            manager.check_health()
    finally:
        manager.close()


def test_future_get_and_flush_honour_their_timeouts(tmp_path):
    fs = FaultyFileSystem(seed=3)
    clock = engine.ManualClock()
    with engine.open(str(tmp_path), clock=clock, background=False, fs=fs) as e:
        e.create_topic(TOPIC)
        p = e.producer(linger_ms=60_000, retry_backoff_ms=100, delivery_timeout_ms=10**9)
        fs.arm("write", error=errno.ENOSPC, persistent=True)
        future = p.send(TOPIC, b"v", partition=0)
        stop = threading.Event()

        def tick():  # time moves 50 ms per real millisecond
            while not stop.is_set():
                clock.advance(50)
                time.sleep(0.001)
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            with pytest.raises(engine.KafkaTimeoutError):
                future.get(timeout=1)
            with pytest.raises(engine.KafkaTimeoutError):
                p.flush(timeout=1)
            fs.clear()
            assert future.get(timeout=30).offset == 0
            p.send(TOPIC, b"w", partition=0)
            p.flush(timeout=30)
        finally:
            stop.set()
            ticker.join()
            p.close()


def test_a_position_past_the_log_end_follows_auto_offset_reset(tmp_path):
    from engine.common.errors import InvalidConfigurationError, OffsetOutOfRangeError

    with engine.open(str(tmp_path), clock=engine.ManualClock(), background=False) as e:
        e.create_topic(TOPIC)
        for i in range(3):
            e.append(TOPIC, 0, _batch(i))
        tp = engine.TopicPartition(TOPIC, 0)
        for reset, expected in (("earliest", 0), ("latest", 15)):
            c = e.consumer(auto_offset_reset=reset)
            c.assign([tp])
            c.seek(tp, 1000)
            c.poll()
            assert c.position(tp) == expected
        strict = e.consumer(auto_offset_reset="none")
        strict.assign([tp])
        strict.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            strict.poll()
        for bad in (-5, 2**64):
            with pytest.raises(InvalidConfigurationError):
                strict.seek(tp, bad)


def test_a_clean_close_leaves_its_trimmed_indexes_durable(tmp_path):
    """The active segment's indexes are trimmed on close (preallocated to segment.index.bytes before): a power loss
    right after the clean close keeps them trimmed, so the next open trusts and uses them instead of rebuilding."""
    fs = FaultyFileSystem(seed=2)
    with engine.open(str(tmp_path), background=False, fs=fs) as e:
        e.create_topic(TOPIC, config={"index.interval.bytes": 64})
        for i in range(20):
            e.append(TOPIC, 0, _batch(i))
    fs.lose_unsynced()
    part = tmp_path / f"{TOPIC}-0"
    sizes = {p.name: p.stat().st_size for p in part.iterdir() if p.suffix in (".index", ".timeindex")}
    assert sizes and all(0 < size < 1 << 20 for size in sizes.values()), sizes  # not 10 MiB of preallocation
    with engine.open(str(tmp_path), background=False) as again:
        assert again.clean_shutdown and len(_records(again)) == 20 * 5
        assert again.log(TOPIC, 0).recovery.describe() == []  # no index was found wrong and rebuilt
