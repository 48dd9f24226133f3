"""prepare_leader_append: both implementations patch the same bytes and refuse the same input."""
from __future__ import annotations

import pytest

import engine.common.errors as E
from engine.record import twins
from tests.conftest import IMPLEMENTATIONS

IMPLS = [twins.load("codec", name) for name in IMPLEMENTATIONS]
T0 = 1_700_000_000_000


def _produced(impl):
    return b"".join(impl.encode_batch([(b"k", b"v" * i, None, T0 + i) for i in range(1, n + 1)],
                                      compression=c, base_offset=0)
                    for n, c in ((3, "none"), (2, "zstd"), (5, "lz4")))


@pytest.mark.parametrize("append_time", [-1, T0 + 999])
def test_offsets_epoch_and_log_append_time_are_stamped(codec, append_time):
    data = _produced(codec)
    pieces, end, max_ts, off_max, count = codec.prepare_leader_append(data, 100, 7, append_time, 1 << 20)
    assert (end, count) == (110, 3)
    # the offset of the max timestamp is the last offset of the first batch that reached it (as recovery
    # computes it): with LogAppendTime every batch has the same maximum, so that is the first batch
    assert (max_ts, off_max) == ((append_time, 102) if append_time >= 0 else (T0 + 5, 109))
    stamped = b"".join(bytes(p) for p in pieces)
    assert len(stamped) == len(data)
    batches = list(codec.iter_batches(stamped))
    assert [(b.base_offset, b.partition_leader_epoch, b.is_valid()) for b in batches] == \
        [(100, 7, True), (103, 7, True), (105, 7, True)]
    assert all(b.timestamp_type == ("log_append" if append_time >= 0 else "create") for b in batches)
    records = [r for b in batches for r in b.records()]
    assert [r.offset for r in records] == list(range(100, 110))
    others = [impl.prepare_leader_append(data, 100, 7, append_time, 1 << 20) for impl in IMPLS]
    assert all(b"".join(bytes(p) for p in o[0]) == stamped and o[1:] == (end, max_ts, off_max, count) for o in others)


def _same_error(cls, *args, **kwargs):
    messages = set()
    for impl in IMPLS:
        with pytest.raises(cls) as info:
            impl.prepare_leader_append(*args, **kwargs)
        messages.add(info.value.message)
    assert len(messages) == 1, messages


def test_bad_input_is_refused_alike():
    data = _produced(IMPLS[0])
    _same_error(E.CorruptRecordError, data[:-1], 0, 0, -1, 1 << 20)
    _same_error(E.CorruptRecordError, b"", 0, 0, -1, 1 << 20)
    _same_error(E.RecordTooLargeError, data, 0, 0, -1, 50)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    _same_error(E.CorruptRecordError, bytes(flipped), 0, 0, -1, 1 << 20)
    marker = IMPLS[0].encode_control_batch("abort", base_offset=0, producer_id=1, producer_epoch=0, timestamp_ms=T0)
    _same_error(E.InvalidRecordError, marker, 0, 0, -1, 1 << 20)
    for impl in IMPLS:
        assert impl.prepare_leader_append(marker, 5, 0, -1, 1 << 20, True)[1] == 6
    gappy = IMPLS[0].encode_batch([IMPLS[0].Record(0, T0, None, b"a"), IMPLS[0].Record(2, T0, None, b"b")])
    _same_error(E.InvalidRecordError, gappy, 0, 0, -1, 1 << 20)


def test_an_append_of_many_batches_indexes_each_batch(tmp_path):
    """Kafka's LogSegment.append walks the batches: an index entry names the batch at its position (one entry
    for the whole append would name a later batch's offset there, which the verifier rightly reports)."""
    import engine as eng_pkg
    from engine.tools import verify

    with eng_pkg.open(str(tmp_path), background=False) as e:
        e.create_topic("t", config={"index.interval.bytes": 100})
        data = b"".join(eng_pkg.encode_batch([(None, b"x" * 200, None, 1)]) for _ in range(10))
        for _ in range(5):
            e.append("t", 0, data)
        index = e.log("t", 0).active_segment.offset_index
        assert index.entries >= 20  # an entry every batch or so, not one per append
    assert verify.check(str(tmp_path))[1] == []
