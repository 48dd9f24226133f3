"""scan_to_offset and take_span, the header-only walks of a read (to the batch holding an offset, then over the
batches it returns): both twins give the same answer for any bytes, and whenever they answer, the batch-by-batch
walk (a model built on iter_batches) gives the same answer without an error; where that walk raises, they defer."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.common.clock import ManualClock
from engine.common.errors import CorruptRecordError, KafkaError
from engine.record import twins
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from tests.conftest import IMPLEMENTATIONS
from engine.log.unified_log import UnifiedLog

IMPLS = {name: twins.load("codec", name) for name in IMPLEMENTATIONS}
PY = twins.load("codec", "python")


def segment(counts: list[int], gaps: list[int], base: int) -> bytes:
    """Batches of `counts[i]` records, each starting `gaps[i]` offsets after the previous one ended."""
    out, nxt = [], base
    for count, gap in zip(counts, gaps):
        nxt += gap
        out.append(PY.encode_batch([(b"k", b"v" * count, None, 1)] * count, base_offset=nxt))
        nxt += count
    return b"".join(out)


def model(data: bytes, position: int, offset: int, entry_offset: int, prev_last: int, upper):
    """The batch-by-batch walk: the first batch whose last offset >= offset, each batch checked as a read checks
    it; "error" where that walk raises."""
    try:
        for batch in PY.iter_batches(data, position=position):
            if batch.position == position and position > 0:
                if batch.last_offset != entry_offset:
                    return "error"
            elif batch.base_offset <= prev_last or batch.last_offset < batch.base_offset or (
                    upper is not None and batch.last_offset >= upper):
                return "error"
            if batch.last_offset >= offset:
                return batch.base_offset, batch.position, batch.size_in_bytes, prev_last
            prev_last = batch.last_offset
    except Exception:
        return "error"
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.data())
def test_twins_agree_and_every_answer_is_the_full_walks(counts, data):
    gaps = data.draw(st.lists(st.integers(0, 2), min_size=len(counts), max_size=len(counts)))
    base = data.draw(st.sampled_from([0, 100, 2**62]))
    raw = bytearray(segment(counts, gaps, base))
    for _ in range(data.draw(st.integers(0, 2))):  # damage: a flipped byte anywhere
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(raw)))
    raw = bytes(raw[:data.draw(st.sampled_from([len(raw), cut]))])
    position = data.draw(st.sampled_from([0, 4096]))
    offset = base + data.draw(st.integers(-1, sum(counts) + sum(gaps) + 1))
    entry_offset = base + data.draw(st.integers(-1, sum(counts) + 1))
    prev_last = base - 1 if data.draw(st.booleans()) else base + data.draw(st.integers(0, 3))
    upper = data.draw(st.sampled_from([None, base + sum(counts) + sum(gaps), base + 2]))
    answers = {name: impl.scan_to_offset(raw, position, offset, entry_offset, prev_last, upper)
               for name, impl in IMPLS.items()}
    assert len(set(map(repr, answers.values()))) == 1, answers
    answer = answers["python"]
    if answer is not None:
        assert answer == model(raw, position, offset, entry_offset, prev_last, upper)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_it_finds_the_batch_from_an_index_entry_and_defers_what_it_cannot_check(impl):
    scan = IMPLS[impl].scan_to_offset
    data = segment([3, 3, 3], [0, 0, 5], 10)  # offsets 10-12, 13-15, 21-23
    sizes = [b.size_in_bytes for b in PY.iter_batches(data)]
    assert scan(data, 0, 14, 0, 9, None) == (13, sizes[0], sizes[1], 12)
    assert scan(data, 0, 16, 0, 9, None) == (21, sizes[0] + sizes[1], sizes[2], 15)  # a gap: the next batch
    assert scan(data[sizes[0]:], 800, 22, 15, 9, None) == (21, 800 + sizes[1], sizes[2], 15)  # from an entry
    assert scan(data[sizes[0]:], 800, 22, 14, 9, None) is None  # the entry does not match its batch
    assert scan(data, 0, 22, 0, 9, 20) is None      # a batch at or past `upper`
    assert scan(data, 0, 30, 0, 9, None) is None    # past the end
    assert scan(data[:-1], 0, 22, 0, 9, None) is None  # the batch is cut short
    assert scan(data, 0, 11, 0, 10, None) is None   # the first batch does not follow prev_last


def span_model(data: bytes, max_size: int, min_one: bool, prev_last: int, upper, epochs):
    """The bytes a read returns, batch by batch as LogSegment.read walked them before take_span: "error" where
    that walk raises (a malformed batch, one that does not follow, a leader epoch the entries do not give)."""
    end = 0
    try:
        for batch in PY.iter_batches(data):
            if end + batch.size_in_bytes > max_size and not (min_one and end == 0):
                break
            if end and (batch.base_offset <= prev_last or (upper is not None and batch.last_offset >= upper)):
                return "error"
            if epochs and batch.base_offset >= epochs[0][1]:
                leading = [e for e, start in epochs if start <= batch.base_offset][-1]
                if batch.partition_leader_epoch != leading:
                    return "error"
            prev_last = batch.last_offset
            end += batch.size_in_bytes
    except KafkaError:  # CorruptRecordError, UnsupportedMessageFormatError (a flipped magic)
        return "error"
    return end


def stamped(data: bytes, epochs: list[int]) -> bytes:
    """`data` with each batch's partition leader epoch set (the header field outside the CRC)."""
    out, pos = bytearray(data), 0
    for batch, epoch in zip(PY.iter_batches(data), epochs):
        out[pos + 12:pos + 16] = epoch.to_bytes(4, "big", signed=True)
        pos += batch.size_in_bytes
    return bytes(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.data())
def test_take_span_twins_agree_and_every_answer_is_the_full_walks(counts, data):
    gaps = data.draw(st.lists(st.integers(0, 2), min_size=len(counts), max_size=len(counts)))
    base = data.draw(st.sampled_from([0, 100, 2**62]))
    raw = stamped(segment(counts, gaps, base),
                  data.draw(st.lists(st.integers(0, 3), min_size=len(counts), max_size=len(counts))))
    raw = bytearray(raw)
    for _ in range(data.draw(st.integers(0, 2))):  # damage: a flipped byte anywhere
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    raw = bytes(raw[:data.draw(st.sampled_from([len(raw), data.draw(st.integers(0, len(raw)))]))])
    max_size = data.draw(st.integers(0, len(raw) + 10))
    min_one = data.draw(st.booleans())
    prev_last = base - 1 if data.draw(st.booleans()) else base + data.draw(st.integers(0, 3))
    upper = data.draw(st.sampled_from([None, base + sum(counts) + sum(gaps), base + 2]))
    starts = sorted(set(data.draw(st.lists(st.integers(0, sum(counts) + sum(gaps)), max_size=3))))
    epochs = data.draw(st.sampled_from([None, [(i, base + s) for i, s in enumerate(starts)]]))
    answers = {name: impl.take_span(raw, max_size, min_one, prev_last, upper, epochs) for name, impl in IMPLS.items()}
    assert len(set(map(repr, answers.values()))) == 1, answers
    answer, expected = answers["python"], span_model(raw, max_size, min_one, prev_last, upper, epochs)
    assert answer == expected if expected != "error" else answer is None


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_take_span_stops_where_a_read_stops_and_refuses_bad_epoch_entries(impl):
    take = IMPLS[impl].take_span
    data = stamped(segment([3, 3, 3], [0, 0, 5], 10), [0, 0, 1])  # offsets 10-12, 13-15, 21-23; epoch 1 from 21
    sizes = [b.size_in_bytes for b in PY.iter_batches(data)]
    epochs = [(0, 10), (1, 21)]
    assert take(data, 1, True, 9, None, epochs) == sizes[0]               # one batch, however small max_size
    assert take(data, 1, False, 9, None, epochs) == 0
    assert take(data, sizes[0] + sizes[1], True, 9, None, epochs) == sizes[0] + sizes[1]
    assert take(data, 10**6, True, 9, None, epochs) == sum(sizes)
    assert take(data[:-1], 10**6, True, 9, None, epochs) == sizes[0] + sizes[1]  # a partial tail ends the read
    assert take(data, 10**6, True, 9, 20, epochs) is None                 # a batch at or past `upper`
    overlap = PY.encode_batch([(b"k", b"v", None, 1)] * 3, base_offset=10) + PY.encode_batch(
        [(b"k", b"v", None, 1)] * 3, base_offset=12)
    assert take(overlap, 10**6, True, 9, None, None) is None              # the second starts at the first's last
    assert take(overlap, 1, True, 9, None, None) == len(overlap) // 2    # (unless the read ends before it)
    assert take(data, 10**6, True, 9, None, [(0, 10), (1, 16)]) == sum(sizes)  # epoch 1 from 16: 21-23 has it
    assert take(data, 10**6, True, 9, None, [(0, 10), (1, 13)]) is None    # 13-15 should carry epoch 1
    assert take(data, 10**6, True, 9, None, [(0, 10), (2, 21)]) is None    # the third batch carries 1, not 2
    for bad in ((1, 2), [(1, "2")], [(1, 2, 3)], [[1, 2]], [(1, 2**63)], [(True, 2)]):
        with pytest.raises(TypeError, match="epochs must be None or a list of .epoch, start offset. int64 tuples"):
            take(data, 1, True, 9, None, bad)


def test_a_read_refuses_a_batch_whose_leader_epoch_was_flipped(tmp_path):
    """The header's epoch is outside the CRC: a read names the segment file, the position and the offset."""
    lg = UnifiedLog(FileSystem(), str(tmp_path / "t-0"), LogConfig(), ManualClock())
    for epoch in (0, 0, 3):
        lg.append_as_leader(PY.encode_batch([(b"k", b"v", None, 1)] * 2), leader_epoch=epoch)
    lg.update_high_watermark(lg.log_end_offset)
    seg = lg.active_segment
    second = [b.position for b in PY.iter_batches(seg.view())][1]
    lg.close()
    path = tmp_path / "t-0" / "00000000000000000000.log"
    raw = bytearray(path.read_bytes())
    raw[second + 15] ^= 1  # epoch 0 becomes 1
    path.write_bytes(bytes(raw))
    lg = UnifiedLog(FileSystem(), str(tmp_path / "t-0"), LogConfig(), ManualClock(),
                    clean_shutdown=True, recovery_point=6)
    assert [b.base_offset for b in lg.read(0, 1).batches()] == [0]
    with pytest.raises(CorruptRecordError, match="carries leader epoch 1, but epoch 0 leads from offset 0") as err:
        lg.read(2, 1)
    assert (err.value.file, err.value.position, err.value.offset) == (str(path), second, 2)
    assert [b.partition_leader_epoch for b in lg.read(4, 1).batches()] == [3]
    lg.close()
