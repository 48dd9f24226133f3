"""segments.residency: the pages a sequential reader passed are released RELEASE_BYTES behind it (and its touched
windows forgotten), random reads release nothing, and a mapping no read flagged is never reported touched, with either
twin of TouchedWindows (the native one knows the mapping's address)."""
from __future__ import annotations

import mmap
import random

import pytest

from engine.record import twins
from engine.segments.residency import FAULT_AROUND, READERS, RELEASE_BYTES, Residency
from tests.conftest import IMPLEMENTATIONS

SIZE = 48 << 20
_PAGE = mmap.PAGESIZE


class _Mapping:
    """A mapping of SIZE bytes that records its madvise calls."""

    def __init__(self) -> None:
        self.real = mmap.mmap(-1, SIZE)
        self.advised: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return SIZE

    def madvise(self, option: int, start: int, length: int) -> None:
        assert option == mmap.MADV_DONTNEED
        self.advised.append((start, start + length))
        self.real.madvise(option, start, length)


class _Windows:
    """A TouchedWindows that records what it is told."""

    def __init__(self) -> None:
        self.cleared: list[tuple[int, int]] = []

    def clear(self, mapping, start: int, end: int) -> None:
        self.cleared.append((start, end))


def _resident_behind(advised: list[tuple[int, int]], start: int, position: int) -> int:
    """Bytes of [start, position) no release covered."""
    covered = 0
    for lo, hi in sorted(advised):
        lo, hi = max(lo, start), min(hi, position)
        covered += max(0, hi - lo)
    return position - start - covered


@pytest.mark.parametrize("step", [4 << 10, 256 << 10, 3 << 20])
def test_a_sequential_reader_keeps_about_release_bytes_behind_it(step):
    r, mapping = Residency(), _Mapping()
    r.windows = windows = _Windows()
    position = start = 5000
    while position + step < SIZE:
        r.note_read(mapping, position, step)
        position += step
        assert _resident_behind(mapping.advised, start, position) <= RELEASE_BYTES + FAULT_AROUND + step + _PAGE
    assert mapping.advised, "nothing released"
    assert all(lo % _PAGE == 0 and hi % _PAGE == 0 and hi <= position + FAULT_AROUND for lo, hi in mapping.advised)
    assert windows.cleared == mapping.advised  # what was released is no longer touched


def test_random_reads_and_more_readers_than_followed_release_nothing_they_did_not_read_on():
    rng = random.Random(7)
    r, mapping = Residency(), _Mapping()
    r.windows = _Windows()
    for _ in range(2000):
        r.note_read(mapping, rng.randrange(0, SIZE - (1 << 20)) // _PAGE * _PAGE, rng.randrange(1, 64 << 10))
    assert mapping.advised == [] and len(r.ranges) <= READERS


def test_without_a_mapping_nothing_is_released():
    r = Residency()
    for i in range(200):
        r.note_read(None, i << 20, 1 << 20)
    assert len(r.ranges) == 1


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_no_window_is_touched_before_a_read_flags_it(impl):
    w = twins.load("touched_windows", impl)()
    mapping = mmap.mmap(-1, 1 << 20)
    assert w.all_touched(mapping, 0, 100) is False
    w.mapped(mapping)
    assert w.all_touched(mapping, 0, 4096) is False  # (only the native reader flags what it read)
    w.clear(mapping, 0, 1 << 20)
    assert w.all_touched(mapping, 0, 4096) is False and w.all_touched(None, 0, 4096) is False
    w.unmapped()
    assert w.all_touched(mapping, 0, 4096) is False


def test_a_residency_uses_the_twin_the_process_uses():
    assert type(Residency().windows) is twins.selected("touched_windows")
