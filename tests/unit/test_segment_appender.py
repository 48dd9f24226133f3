"""The segment appender's twins (segments.segment_appender and engine._native._segment_appender): the same appends
give the same `.log`, `.index` and `.timeindex` bytes and the same rolls, and the native one's own write path
(writev on the pooled descriptor) turns a failed write into a typed error that loses nothing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from engine.record import twins
from engine.common.clock import ManualClock
from engine.common.errors import KafkaStorageError, RecordBatchTooLargeError
from engine.segments import segment_appender
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from tests.conftest import IMPLEMENTATIONS
from tests.log_checks import read_all, verify_index_files, verify_log
from engine.log.unified_log import UnifiedLog as Log

T0 = 1_700_000_000_000

# one append: (records, value size, timestamp step from the previous append, clock advance in ms, batches; 0 batches:
# one batch of an idempotent producer)
APPENDS = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 300), st.integers(-50, 400), st.integers(0, 900),
                             st.integers(0, 3)), min_size=1, max_size=40)
CONFIGS = st.fixed_dictionaries({"segment.bytes": st.sampled_from([600, 2000, 1 << 20]),
                                 "index.interval.bytes": st.sampled_from([0, 100, 4096]),
                                 "segment.index.bytes": st.sampled_from([40, 4096]),
                                 "segment.ms": st.sampled_from([500, 10**9])})


def _write(path, impl: str, config: dict, appends: list) -> dict:
    """Run the appends on a fresh log with one implementation; the closed directory's files."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
        return _append_all(path / impl / "t-0", config, appends)


def _append_all(directory, config: dict, appends: list) -> dict:
    clock = ManualClock(T0)
    lg = Log(FileSystem(), str(directory), LogConfig.from_dict(config), clock)
    ts, refused, accepted, sequence = T0, [], 0, 0
    for n, size, step, advance, batches in appends:
        clock.advance(advance)
        ts += step
        records = [(b"k%d" % i, b"v" * size, None, ts + i) for i in range(n)]
        if batches:
            data = b"".join(engine.encode_batch(records) for _ in range(batches))
        else:
            data = engine.encode_batch(records, producer_id=7, producer_epoch=0, base_sequence=sequence)
        try:
            lg.append_as_leader(data)
            accepted += n * max(batches, 1)
            sequence += 0 if batches else n
        except RecordBatchTooLargeError:  # more than segment.bytes in one append
            refused.append(len(data))
    assert all(size > config["segment.bytes"] for size in refused)
    verify_log(lg)
    records = read_all(lg)
    assert [r[0] for r in records] == list(range(accepted))
    lg.close()
    verify_index_files(directory)
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix != ".snapshot"}
    return {"files": files, "records": records, "refused": refused}


@settings(max_examples=25, deadline=None)
@given(config=CONFIGS, appends=APPENDS)
def test_both_appenders_write_the_same_files(tmp_path_factory, config, appends):
    path = tmp_path_factory.mktemp("appenders")
    got = {impl: _write(path, impl, config, appends) for impl in IMPLEMENTATIONS}
    first = got[IMPLEMENTATIONS[0]]
    for impl in IMPLEMENTATIONS[1:]:
        assert got[impl] == first, impl


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_the_roll_check_is_kafkas(impl, tmp_path):
    """should_roll as Kafka's LogSegment.shouldRoll: full by size, by segment.ms from the first batch's timestamp
    (or from creation without timestamps), and an offset past an int32 of the base."""
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"segment.ms": 1000}), ManualClock(T0))
    app = twins.load("segment_appender", impl)(lg.active_segment, 0, T0, 1000)
    assert app.should_roll(10, T0, 5, T0, 100) is False            # empty: nothing waited
    app.size, app.rolling_ts, app.rolling_ts_loaded = 50, T0, True
    assert app.should_roll(51, T0, 5, T0, 100) is True             # 50 + 51 bytes > segment.bytes
    assert app.should_roll(50, T0 + 1000, 5, T0, 100) is False     # exactly segment.ms waited
    assert app.should_roll(50, T0 + 1001, 5, T0, 100) is True
    assert app.should_roll(50, T0, 2**31, T0, 100) is True         # offset - base > int32
    app.rolling_ts = -1                                            # no timestamps: the creation time counts
    assert app.should_roll(50, -1, 5, T0 + 1000, 100) is False
    assert app.should_roll(50, -1, 5, T0 + 1001, 100) is True
    lg.close()


class _ReadOnlyAppends(FileSystem):
    """Opens append handles read-only: a writev on their descriptor fails (EBADF) and so does the cut after it,
    while `write`/`writev` are not overridden, so the native appender writes the descriptor itself."""

    broken = True

    def open(self, path, mode="rb"):
        return super().open(path, "rb" if self.broken and mode == "ab+" else mode)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("index_bytes", [12, 23, 24])
def test_a_time_index_with_room_for_one_entry_rolls_before_every_append(impl, index_bytes, tmp_path, monkeypatch):
    """Kafka's TimeIndex.isFull keeps the last slot for the entry a roll writes: with one slot (12 to 23 bytes) the
    index is full from the start, so each append rolls first, a new segment's first too (its indexes not made yet)."""
    monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
    config = LogConfig.from_dict({"segment.index.bytes": index_bytes, "index.interval.bytes": 0})
    lg = Log(FileSystem(), str(tmp_path / "t-0"), config, ManualClock(T0))
    for i in range(4):
        lg.append_as_leader(engine.encode_batch([(b"k", b"v", None, T0 + i)]))
    assert [s.base_offset for s in lg.segments] == ([0, 1, 2, 3] if index_bytes < 24 else [0, 2])
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_failed_write_is_typed_and_loses_nothing(impl, tmp_path, monkeypatch):
    monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
    fs = _ReadOnlyAppends()
    fs.broken = False
    seam_writes = []
    fs.writev = lambda f, buffers, total: (seam_writes.append(total), FileSystem.writev(fs, f, buffers, total))
    lg = Log(fs, str(tmp_path / "t-0"), LogConfig(), ManualClock(T0))
    first = engine.encode_batch([(b"k", b"v", None, T0)])
    lg.append_as_leader(first)
    assert seam_writes == ([] if impl == "cython" else [len(first)])  # the native one writes the descriptor
    lg.active_segment.release_handle()  # the next append takes a new handle: a read-only one
    fs.broken = True
    with pytest.raises(KafkaStorageError) as info:
        lg.append_as_leader(engine.encode_batch([(b"k", b"lost", None, T0)]))
    assert info.value.file == lg.active_segment.log_path and "append failed" in str(info.value)
    assert lg.log_end_offset == 1 and lg.active_segment.size == len(first)
    lg.active_segment.release_handle()
    fs.broken = False
    lg.append_as_leader(engine.encode_batch([(b"k", b"kept", None, T0)]))
    assert [r[2] for r in read_all(lg)] == [b"v", b"kept"]
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_appends_take_a_new_handle_whenever_the_pool_let_the_last_one_go(impl, tmp_path, monkeypatch):
    monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
    fs = FileSystem()
    lg = Log(fs, str(tmp_path / "t-0"), LogConfig(), ManualClock(T0))
    seg = lg.active_segment
    values = []
    for step in range(4):
        values.append(b"v%d" % step)
        lg.append_as_leader(engine.encode_batch([(b"k", values[-1], None, T0)]))
        seg.release_handle()  # the pool closes the append handle
        if step % 2:
            seg.flush()       # the segment's Python path takes a new one, which the pool then closes too
            seg.release_handle()
    assert [r[2] for r in read_all(lg)] == values
    lg.close()
