"""scan_to_offset, the header-only walk a read takes to the batch holding an offset: both twins give the same
answer for any bytes, and whenever they answer, the batch-by-batch walk (a model built on iter_batches) finds the
same batch without an error."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.record import codec as selector
from tests.conftest import IMPLEMENTATIONS

IMPLS = {name: selector.load(name) for name in IMPLEMENTATIONS}
PY = selector.load("python")


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
