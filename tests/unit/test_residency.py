"""segments.residency and its native twin: the same ranges for the same reads, the same pages released (counted by the
madvise calls each makes on a mapping), and a mapping whose windows no read flagged is never reported touched."""
from __future__ import annotations

import mmap
import random

import pytest

from engine.record import twins
from engine.segments import residency
from tests.conftest import IMPLEMENTATIONS

SIZE = 48 << 20


class _Mapping:
    """A mapping of SIZE bytes that records its madvise calls."""

    def __init__(self) -> None:
        self.real = mmap.mmap(-1, SIZE)
        self.advised: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return SIZE

    def madvise(self, option: int, start: int, length: int) -> None:
        self.advised.append((option, start, length))
        self.real.madvise(option, start, length)


def _replay(impl: str, reads: list[tuple[int, int]]):
    r = twins.load("residency", impl)()
    mapping = _Mapping()
    seen = []
    for position, nbytes in reads:
        r.note_read(mapping, position, nbytes)
        seen.append(list(r.ranges))
    return seen, mapping.advised


def _reads(rng: random.Random) -> list[tuple[int, int]]:
    """A few sequential readers interleaved with random reads."""
    cursors = [rng.randrange(0, SIZE // 2) for _ in range(rng.randint(1, 4))]
    out = []
    for _ in range(400):
        if rng.random() < 0.2:
            out.append((rng.randrange(0, SIZE - (1 << 20)), rng.randrange(1, 1 << 20)))
        else:
            i = rng.randrange(len(cursors))
            n = rng.randrange(1, 1 << 20)
            if cursors[i] + n < SIZE:
                out.append((cursors[i], n))
                cursors[i] += n
    return out


@pytest.mark.parametrize("seed", range(6))
def test_both_twins_keep_the_same_ranges_and_release_the_same_pages(seed):
    reads = _reads(random.Random(seed))
    python = _replay("python", reads)
    assert python[1], "the reads released nothing: the test would not compare releases"
    for impl in IMPLEMENTATIONS:
        assert _replay(impl, reads) == python, impl


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_no_window_is_touched_before_a_read_flags_it(impl):
    r = twins.load("residency", impl)()
    mapping = mmap.mmap(-1, 1 << 20)
    assert r.all_touched(mapping, 0, 100) is False
    r.mapped(mapping)
    r.note_read(mapping, 0, 4096)  # reported, not flagged: only the native reader flags what it read
    assert r.all_touched(mapping, 0, 4096) is False
    assert r.all_touched(None, 0, 4096) is False
    r.unmapped()
    assert r.all_touched(mapping, 0, 4096) is False


def test_the_twin_registered_is_the_one_segment_reads_uses():
    from engine.segments.segment_reads import MappedReads
    assert type(MappedReads(None).residency) is residency.selected
