"""A read of a log in one call (engine.log.log_read, both twins): whatever it answers is what the layers answer
(segments.local_log.LocalLog.read and segments.segment.LogSegment.read, the model here, run with the one-call read
switched off on the same log), and a read bounded by the log end, of an offset in the log, takes the one call."""
from __future__ import annotations

import errno
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.record import twins
from engine.common.clock import ManualClock
from engine.common.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from engine.segments.fs import FileSystem
from engine.segments.local_log import FetchData, LocalLog
from engine.segments.log_config import LogConfig
from engine.segments.log_segments import MAX_TIMESTAMP
from engine.segments import residency, segment_reads
from engine.segments.residency import RELEASE_BYTES
from engine.segments.segment_reads import WINDOW_BYTES
from tests.conftest import IMPLEMENTATIONS
from engine.log import log_read
from engine.log.unified_log import UnifiedLog as Log

T0 = 1_700_000_000_000


class _Never:
    """A one-call read that always leaves the read to the layers."""

    def read(self, start_offset, max_bytes, upper_bound, min_one_message):
        return None


def _readers(lg: Log) -> dict:
    return {impl: twins.load("log_read", impl)(lg, FetchData, WINDOW_BYTES) for impl in IMPLEMENTATIONS}


def _layers(lg: Log, *args):
    """The layers' answer (or the type of their error)."""
    kept, lg._reader = lg._reader, _Never()
    try:
        return lg.read(*args)
    except OffsetOutOfRangeError as exc:
        return type(exc)
    finally:
        lg._reader = kept


def _same(got: FetchData, want: FetchData) -> bool:
    return got[:3] == want[:3] and bytes(got.records) == bytes(want.records)


def _batch(i: int, count: int) -> bytes:
    return engine.encode_batch([(b"k%d" % i, b"v" * (i % 7 * 60), None, T0 + i)] * count)


# one step: ("append", records) or ("read", offset shift from a random place, max_bytes, min_one_message, bound)
STEPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 6)),
                           st.tuples(st.just("read"), st.integers(-2, 60), st.sampled_from([0, 1, 100, 700, 1 << 20]),
                                     st.booleans(), st.sampled_from([None, "leo", "below", "above"]))),
                 min_size=1, max_size=80)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 50), STEPS, st.sampled_from([1, 150, 4096]), st.sampled_from([3000, 9000, 1 << 20]))
def test_the_one_call_read_answers_as_the_layers_do(tmp_path_factory, first, steps, interval, segment_bytes):
    directory = tmp_path_factory.mktemp("log")
    config = LogConfig.from_dict({"segment.bytes": segment_bytes, "index.interval.bytes": interval})
    lg = Log(FileSystem(), str(directory / "t-0"), config, ManualClock(T0))
    for i in range(first):  # then the steps' appends and reads
        lg.append_as_leader(_batch(i, 1 + i % 6))
    readers = _readers(lg)
    for i, step in enumerate(steps):
        if step[0] == "append":
            lg.append_as_leader(_batch(i, step[1]), leader_epoch=i // 10)
            continue
        _, shift, max_bytes, min_one, bound = step
        leo = lg.log_end_offset
        offset = (leo * shift) // 58 - 1 if shift >= 0 else leo + 1 - shift  # below the start, in the log, past it
        upper = {None: None, "leo": leo, "below": max(0, leo - 3), "above": leo + 5}[bound]
        want = _layers(lg, offset, max_bytes, upper, min_one)
        for impl, reader in readers.items():
            got = reader.read(offset, max_bytes, upper, min_one)
            if got is not None:
                assert isinstance(want, FetchData) and _same(got, want), (impl, step, got, want)
            elif 0 <= offset <= leo and (upper is None or upper >= leo):
                pytest.fail(f"{impl}: a read of {offset} bounded by the log end left the one call ({step})")
        if isinstance(want, FetchData):  # and the log's own read, which tries the one call first
            assert _same(lg.read(offset, max_bytes, upper, min_one), want)
    lg.close()


# one step: ("append", records, timestamp jump), ("start", offset shift), ("find", timestamp shift) or ("scan",), a
# read of the whole log through the one call (lookups then read what it touched through the mapping, else with pread)
LOOKUPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 6), st.integers(-30, 40)),
                             st.tuples(st.just("start"), st.integers(0, 4)),
                             st.tuples(st.just("find"), st.integers(-3, 60)),
                             st.tuples(st.just("scan"))),
                   min_size=1, max_size=60)


def _scan(lg: Log, step_bytes: int = 4096) -> int:
    """Read the whole log, `step_bytes` a read; the records read."""
    offset, count = lg.log_start_offset, 0
    while offset < lg.log_end_offset:
        records = [r for b in engine.iter_batches(lg.read(offset, max_bytes=step_bytes).records) for r in b.records()]
        count += sum(1 for r in records if r.offset >= offset)
        offset = records[-1].offset + 1
    return count


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(LOOKUPS, st.sampled_from([1, 150, 4096]), st.sampled_from([3000, 9000, 1 << 20]), st.booleans())
def test_the_one_call_lookup_by_time_answers_as_the_layers_and_a_model_do(tmp_path_factory, steps, interval,
                                                                          segment_bytes, log_append_time):
    """Records in and out of time order, segments rolled, the log start raised: the native lookup answers what the
    layers (LogSegments.offset_for_timestamp) answer and what a list of the records says; the twin defers."""
    directory = tmp_path_factory.mktemp("log")
    config = LogConfig.from_dict({"segment.bytes": segment_bytes, "index.interval.bytes": interval,
                                  "message.timestamp.type": "LogAppendTime" if log_append_time else "CreateTime"})
    clock = ManualClock(T0)
    lg = Log(FileSystem(), str(directory / "t-0"), config, clock)
    readers = _readers(lg)
    model: list[tuple[int, int]] = []  # (timestamp, offset) of every record, as stored
    ts = T0
    for step in steps:
        if step[0] == "append":
            ts += step[2]
            clock.advance(1)
            first = lg.log_end_offset
            lg.append_as_leader(engine.encode_batch([(b"k", b"v" * 90, None, ts + j) for j in range(step[1])]))
            stored = [clock.time_ms()] * step[1] if log_append_time else [ts + j for j in range(step[1])]
            model += [(t, first + j) for j, t in enumerate(stored)]
        elif step[0] == "start":
            lg.update_high_watermark(lg.log_end_offset)
            lg.delete_records(min(lg.log_start_offset + step[1], lg.log_end_offset))
        elif step[0] == "scan":
            assert _scan(lg) == sum(1 for _, o in model if o >= lg.log_start_offset)
        else:
            target = min((t for t, _ in model), default=T0) + step[1] * 3 - 10
            late = [(t, o) for t, o in model if t >= target and o >= lg.log_start_offset]
            want = late[0] if late else None
            assert lg.local.segments.offset_for_timestamp(target, lg.log_start_offset) == want, (step, want)
            assert lg.offset_for_timestamp(target) == want
            kept = [(t, o) for t, o in model if o >= lg.local.segments.all()[0].base_offset]
            largest = [(t, o) for t, o in kept if t == max(t for t, _ in kept)][:1] if kept else [None]
            assert lg.offset_for_timestamp(MAX_TIMESTAMP) == largest[0]  # Kafka's MAX_TIMESTAMP: not bounded by
            # the log start, but by the segments still held
            for impl, reader in readers.items():
                assert reader.offset_for_timestamp(target) == (want if impl == "cython" else False), impl
    lg.close()


class _CountingFileSystem(FileSystem):
    """Counts the reads made with pread (into a new buffer or a given one); fails them with EIO once `failing`."""

    def __init__(self) -> None:
        super().__init__()
        self.preads, self.failing = 0, False

    def _count(self) -> None:
        self.preads += 1
        if self.failing:
            raise OSError(errno.EIO, "injected")

    def pread(self, f, size: int, offset: int) -> bytes:
        self._count()
        return super().pread(f, size, offset)

    def pread_into(self, f, buffer, offset: int) -> int:
        self._count()
        return super().pread_into(f, buffer, offset)


def _timed_log(fs: FileSystem, path: str, batches: int, records: int, value_bytes: int) -> Log:
    """A log whose record at offset o has timestamp T0 + o (one index entry a batch)."""
    lg = Log(fs, path, LogConfig.from_dict({"index.interval.bytes": 1}), ManualClock(T0))
    for i in range(batches):
        lg.append_as_leader(engine.encode_batch([(b"k", b"v" * value_bytes, None, T0 + i * records + j)
                                                 for j in range(records)]))
    return lg


def _lookup(lg: Log, impl: str):
    """The lookup by time of one implementation: the native reader's one call, or the layers' (the log then reads
    through the twin reader too, which knows no windows)."""
    reader = lg._reader = twins.load("log_read", impl)(lg, FetchData, WINDOW_BYTES)
    if impl == "cython":
        return reader.offset_for_timestamp
    return lambda ts: lg.local.segments.offset_for_timestamp(ts, lg.log_start_offset)


def _preads_per_lookup(lg: Log, fs: _CountingFileSystem, find, targets: list[int]) -> list[int]:
    """The preads each lookup made, each answer checked against the log's model (offset o at T0 + o)."""
    made = []
    for ts in targets:
        before = fs.preads
        assert find(ts) == (ts, ts - T0)
        made.append(fs.preads - before)
    return made


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_lookup_by_time_reads_with_pread_until_a_read_touched_the_mapping_there(tmp_path, impl):
    """A lookup maps nothing: it reads its batch with pread (one a lookup) where no read through the mapping is known
    to have touched it, which only the native reader knows; once the one call read the log, the native lookup reads
    through the mapping, until a new mapping replaces the one the reads touched. The answers are the model's."""
    fs = _CountingFileSystem()
    lg = _timed_log(fs, str(tmp_path / "t-0"), batches=40, records=10, value_bytes=900)
    seg = lg.active_segment
    find = _lookup(lg, impl)
    if impl == "cython":  # the sizes it works with are the segment layer's
        from engine._native import _log_read
        from engine._native import _residency
        assert (_residency.FAULT_AROUND, _log_read.LOOKUP_READ) == (residency.FAULT_AROUND, segment_reads.LOOKUP_READ_BYTES)
    targets = [T0 + o for o in range(3, 400, 13)]
    assert _preads_per_lookup(lg, fs, find, targets) == [1] * len(targets)
    assert seg.reads.map is None  # the lookups mapped nothing
    assert _scan(lg) == 400
    assert seg.reads.map is not None
    made = _preads_per_lookup(lg, fs, find, targets)
    assert made == ([0] * len(targets) if impl == "cython" else [1] * len(targets)), made
    lg.append_as_leader(engine.encode_batch([(b"k", b"v", None, T0 + 400)]))
    lg.read(400)  # maps the grown segment anew: this read touched only the new mapping's pages near the end
    early = targets[:len(targets) // 2]
    assert _preads_per_lookup(lg, fs, find, early) == [1] * len(early)
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_released_range_is_read_with_pread_again(tmp_path, impl):
    """Pages a moving reader released (RELEASE_BYTES behind it) are cold again: the native lookup reads them with
    pread, and what the reader touched since through the mapping (the layers, which do not know, read both with
    pread)."""
    fs = _CountingFileSystem()
    lg = _timed_log(fs, str(tmp_path / "t-0"), batches=160, records=16, value_bytes=4000)  # ~10 MiB
    assert lg.active_segment.size > RELEASE_BYTES + (1 << 20)
    find = _lookup(lg, impl)
    assert _scan(lg, step_bytes=256 << 10) == 160 * 16
    released = [T0 + o for o in range(5, 16 * 100, 37)]  # batches below 6.5 MiB: released by the scan
    kept = [T0 + o for o in range(16 * 150 + 5, 16 * 160, 7)]  # the last ten batches, read since
    assert _preads_per_lookup(lg, fs, find, released) == [1] * len(released)
    assert _preads_per_lookup(lg, fs, find, kept) == [0 if impl == "cython" else 1] * len(kept)
    lg.close()


class _NestingFileSystem(_CountingFileSystem):
    """Runs `inside()` once right after the next pread, before the lookup that made it goes on."""

    inside = None

    def _then(self, done):
        run, self.inside = self.inside, None
        if run is not None:
            run()
        return done

    def pread(self, f, size: int, offset: int) -> bytes:
        return self._then(super().pread(f, size, offset))

    def pread_into(self, f, buffer, offset: int) -> int:
        return self._then(super().pread_into(f, buffer, offset))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_lookup_that_starts_inside_another_keeps_its_own_bytes(tmp_path, impl):
    """A lookup starting while another one holds the bytes it read (here between that read and the decode, as another
    thread would) reads into a buffer of its own: each answers as the model says."""
    fs = _NestingFileSystem()
    lg = _timed_log(fs, str(tmp_path / "t-0"), batches=30, records=10, value_bytes=500)
    find = _lookup(lg, impl)
    inner = []
    fs.inside = lambda: inner.append(find(T0 + 207))
    assert find(T0 + 33) == (T0 + 33, 33)
    assert inner == [(T0 + 207, 207)] and fs.preads == 2
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_failed_pread_of_a_lookup_is_a_storage_error_naming_the_segment(tmp_path, impl):
    fs = _CountingFileSystem()
    lg = _timed_log(fs, str(tmp_path / "t-0"), batches=4, records=10, value_bytes=100)
    fs.failing = True
    with pytest.raises(KafkaStorageError) as caught:
        _lookup(lg, impl)(T0 + 15)
    assert caught.value.file == lg.active_segment.log_path and "injected" in caught.value.message
    fs.failing = False
    assert _lookup(lg, impl)(T0 + 15) == (T0 + 15, 15)
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_the_native_lookup_reads_the_append_handle_itself_unless_the_file_system_reads(tmp_path, impl):
    """On the real file system the native lookup preads the append handle's descriptor itself (no pread_into), maps
    nothing, leaves the handle's pins as it found them and answers as the model says (the layers read through the
    file system); a file system that does its own reads (fault injection, the counting one) is read through."""
    assert FileSystem().direct_reads() and not _CountingFileSystem().direct_reads()
    calls = []

    class _Watched(FileSystem):
        def pread(self, f, size: int, offset: int) -> bytes:
            calls.append(offset)
            return super().pread(f, size, offset)

    fs = _Watched()
    assert fs.direct_reads()  # pread_into is the real one
    fs.pread_into = lambda *a: calls.append(a) or FileSystem.pread_into(fs, *a)  # seen if the lookup took it
    lg = _timed_log(fs, str(tmp_path / "t-0"), batches=40, records=10, value_bytes=900)
    handle = lg.active_segment.appender.handle
    pins = handle.pins
    find = _lookup(lg, impl)
    targets = [T0 + o for o in range(0, 400, 7)] + [T0 + 399]
    assert [find(ts) for ts in targets] == [(ts, ts - T0) for ts in targets]
    assert find(T0 + 400) is None
    assert (calls == []) == (impl == "cython") and handle.pins == pins and lg.active_segment.reads.map is None
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_lookup_of_bytes_cut_from_the_file_behind_the_logs_back_is_a_storage_error(tmp_path, impl):
    """Another process cut the `.log` short: a lookup whose batches are gone raises KafkaStorageError naming the
    segment and where the read began (nothing crashes); one whose batches remain still answers."""
    lg = _timed_log(FileSystem(), str(tmp_path / "t-0"), batches=30, records=10, value_bytes=400)
    seg = lg.active_segment
    os.truncate(seg.log_path, seg.size // 2)
    find = _lookup(lg, impl)
    with pytest.raises(KafkaStorageError) as caught:
        find(T0 + 285)
    assert caught.value.file == seg.log_path and "short read" in caught.value.message
    assert seg.size // 3 <= caught.value.position < seg.size
    assert find(T0 + 15) == (T0 + 15, 15)
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_corrupt_header_where_a_lookup_starts_is_the_layers_typed_error(tmp_path, impl):
    """The batch a lookup starts from (the one it reads only the header of, when it cannot hold the answer) has a bad
    magic: both the one call and the layers raise CorruptRecordError naming the segment and the batch's position."""
    lg = _timed_log(FileSystem(), str(tmp_path / "t-0"), batches=30, records=10, value_bytes=400)
    seg = lg.active_segment
    target = T0 + 155  # in the sixteenth batch: the time index floor is the fifteenth's
    position = seg.offset_index.lookup(149)[1]
    with open(seg.log_path, "r+b") as f:
        f.seek(position + 16)
        f.write(b"\x07")
    find = _lookup(lg, impl)
    errors = []
    for lookup in (find, lambda ts: lg.local.segments.offset_for_timestamp(ts, lg.log_start_offset)):
        with pytest.raises(CorruptRecordError) as caught:
            lookup(target)
        errors.append((type(caught.value), caught.value.file, caught.value.position))
    assert errors == [(CorruptRecordError, seg.log_path, position)] * 2
    lg.close()


def test_reads_take_the_one_call(tmp_path, monkeypatch):
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"segment.bytes": 3000}), ManualClock(T0))
    for i in range(40):
        lg.append_as_leader(_batch(i, 3))
    assert len(lg.segments) > 3
    calls = []
    real = LocalLog.read
    monkeypatch.setattr(LocalLog, "read", lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    for offset in range(0, lg.log_end_offset + 1, 5):
        fetched = lg.read(offset, max_bytes=1)
        records = [r for b in engine.iter_batches(fetched.records) for r in b.records()]
        assert offset == lg.log_end_offset or records[0].offset <= offset <= records[-1].offset
    assert calls == []
    lg.read(0, upper_bound=lg.log_end_offset - 2)  # a bound below the log end: the layers read
    assert len(calls) == 1
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(lg.log_end_offset + 1)
    lg.close()


def test_a_corrupt_index_entry_is_left_to_the_layers_which_rebuild_it(tmp_path):
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"index.interval.bytes": 1}), ManualClock(T0))
    for i in range(20):
        lg.append_as_leader(_batch(i, 2))
    want = {offset: bytes(_layers(lg, offset, 1, None, True).records) for offset in range(40)}
    index = lg.active_segment.offset_index
    index.write_pending()
    index.mapping[8 * 5 + 4:8 * 5 + 8] = index.mapping[8 * 2 + 4:8 * 2 + 8]  # the sixth entry points at the third batch
    notes = []
    lg.active_segment.on_repair = notes.append
    steered = int.from_bytes(index.mapping[8 * 5:8 * 5 + 4], "big")  # an offset that entry names
    for impl, reader in _readers(lg).items():
        assert reader.read(steered, 1, None, True) is None, impl
    assert {offset: bytes(lg.read(offset, 1).records) for offset in range(40)} == want
    assert notes and "rebuilt the indexes" in notes[0]
    lg.close()


def test_reads_racing_appends_see_whole_batches(tmp_path):
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"segment.bytes": 20_000,
                                                                     "index.interval.bytes": 500}), ManualClock(T0))
    lg.append_as_leader(_batch(0, 2))
    done, seen, errors = threading.Event(), [], []

    def reader():
        try:
            while not done.is_set():
                leo = lg.log_end_offset
                offset = leo // 2
                batches = list(engine.iter_batches(lg.read(offset, max_bytes=3000).records))
                assert batches and all(b.is_valid() for b in batches)
                assert batches[0].base_offset <= offset <= batches[-1].last_offset
                seen.append(batches[-1].last_offset)
        except Exception as exc:  # the main thread reports it
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(1, 1500):
        lg.append_as_leader(_batch(i, 1 + i % 3))
    done.set()
    for t in threads:
        t.join()
    assert errors == [] and len(seen) > 10
    lg.close()


@pytest.mark.parametrize("args", [(2**70, 1, None, True), (-2**70, 1, None, True), (0, 2**70, None, True),
                                  (0, 1, 2**70, True), (0, 1, -2**70, True), (True, 1, None, True)])
def test_arguments_beyond_int64_are_answered_as_the_layers_answer_them(tmp_path, args):
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig(), ManualClock(T0))
    for i in range(5):
        lg.append_as_leader(_batch(i, 2))
    want = _layers(lg, *args)
    handed = (args[0], min(args[1], 2**31 - 1), *args[2:])  # UnifiedLog.read caps max_bytes at a segment's size
    for impl, reader in _readers(lg).items():
        got = reader.read(*handed)
        assert got is None or isinstance(want, FetchData) and _same(got, want), impl
    got = lg.read(*args) if isinstance(want, FetchData) else pytest.raises(want, lg.read, *args).type
    assert got is want or _same(got, want)
    lg.close()


def _resident_kib(path: str) -> int:
    """How much of `path` this process has resident through its mappings (the Rss of each, from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if not head[0].endswith(":"):  # a mapping's first line: range, perms, offset, device, inode, path
                inside = head[-1] == path
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.parametrize("impl", [*IMPLEMENTATIONS, "layers"])
def test_a_reader_moving_through_a_segment_keeps_a_bounded_part_of_it_resident(tmp_path, impl):
    """Reading a 32 MiB segment 64 KiB at a time leaves no more than RELEASE_BYTES (and a read's span) of its
    mapping resident, and every byte read, including through a view taken before the pages were released, is the
    file's."""
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig(), ManualClock(T0))
    batch = engine.encode_batch([(b"k", b"v" * 1000, None, T0)] * 60)
    while lg.size_in_bytes() < 4 * RELEASE_BYTES:
        lg.append_as_leader(batch)
    path = lg.local.active_segment.log_path
    with open(path, "rb") as f:
        expected = f.read()
    reader = _readers(lg).get(impl)

    def read(offset: int) -> FetchData:
        return _layers(lg, offset, 64 << 10) if reader is None else reader.read(offset, 64 << 10, None, True)

    first = read(0)  # kept while the pages under it are released
    offset, got, peak = 0, [], 0
    while offset < lg.log_end_offset:
        records = read(offset).records
        got.append(bytes(records))
        offset += 60 * (len(records) // len(batch))
        if len(got) % 16 == 0:
            peak = max(peak, _resident_kib(path))
    assert b"".join(got) == expected
    assert bytes(first.records) == expected[:len(first.records)]
    assert 0 < peak <= (RELEASE_BYTES + (1 << 20)) >> 10, f"{peak} KiB resident"
    lg.close()
