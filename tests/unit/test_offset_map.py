"""The cleaner's offset map and its record passes, both twins (segments.offset_map, engine._native._offset_map): Kafka's
SkimpyOffsetMap slot layout, the memory it refuses, a full map, the side-by-side MD5, a batch's keys mapped and
filtered against a model, whole records kept beside the superseded ones a pass steps over, and the rewrite of a batch
against the Kafka-written `compacted-0` vector."""
from __future__ import annotations

import hashlib
import os
import random

import pytest

from engine import InvalidConfigurationError
from engine.record import batch_format as bf
from engine.record import twins
from tests import vectors
from tests.conftest import IMPLEMENTATIONS

T0 = 1_700_000_000_000


# --- the offset map --------------------------------------------------------------------------------------------
def _model_table(entries: list[tuple[bytes, int]], slots: int) -> bytes:
    """The slots Kafka's SkimpyOffsetMap fills for `entries` ((key, offset), put in turn), built here from its rules:
    the n-th probe is |big-endian int32 of the digest at byte min(n, 12)| + max(0, n - 12) (Java int arithmetic,
    abs(MIN_VALUE) = 0) modulo the slot count; the first empty slot (or the key's own) takes it."""
    table = bytearray(slots * 24)
    for key, offset in entries:
        digest = hashlib.md5(key).digest()
        for attempt in range(slots + 12):
            probe = int.from_bytes(digest[min(attempt, 12):min(attempt, 12) + 4], "big", signed=True)
            probe = (probe + max(0, attempt - 12) + 2**31) % 2**32 - 2**31
            slot = (0 if probe == -2**31 else abs(probe)) % slots
            if table[slot * 24:slot * 24 + 24] == bytes(24) or table[slot * 24:slot * 24 + 16] == digest:
                table[slot * 24:slot * 24 + 24] = digest + offset.to_bytes(8, "big")
                break
    return bytes(table)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("slots,count,seed", [(97, 80, 5), (500, 450, 9)])
def test_offset_map_lays_out_md5_slots_as_kafkas_skimpy_offset_map(impl, slots, count, seed):
    """Every implementation fills the slots exactly as a model of Kafka's map does (so the twins agree slot for slot),
    and answers from them."""
    m = twins.load("offset_map", impl)(24 * slots)
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randrange(0, 120)) for _ in range(count)]  # MD5 tails of one and two blocks
    for i, key in enumerate(keys):
        m.put(key, 1000 + i)
    assert m.table() == _model_table([(key, 1000 + i) for i, key in enumerate(keys)], slots)
    latest = {key: 1000 + i for i, key in enumerate(keys)}  # a repeated key keeps its last offset
    assert all(m.get(key) == offset for key, offset in latest.items())
    assert m.get(b"absent") == -1 and m.size == len(latest) and m.latest_offset == 1000 + count - 1
    m.put(keys[0], 5)
    assert m.size == len(latest) and m.get(keys[0]) == 5 and m.latest_offset == 5
    m.clear()
    assert m.size == 0 and m.get(keys[1]) == -1 and m.latest_offset == -1 and not any(m.table())


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("memory,factor", [(23, 0.9), (2**31, 0.9), ("1MB", 0.9), (1024, 0.0), (1024, 1.5)])
def test_offset_map_refuses_a_budget_it_cannot_use(impl, memory, factor):
    with pytest.raises(InvalidConfigurationError):
        twins.load("offset_map", impl)(memory, factor)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_full_offset_map_refuses_a_new_key(impl):
    m = twins.load("offset_map", impl)(24 * 3)
    for key in (b"a", b"b", b"c"):
        m.put(key, 1)
    with pytest.raises(ValueError):
        m.put(b"d", 2)
    assert [m.get(k) for k in (b"a", b"b", b"c", b"d")] == [1, 1, 1, -1]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_maps_kept_records_rebuild_their_batch_and_no_other(impl):
    """filter_batch's kept records (the native map's are pointers into the batch) rebuild the batch as the decoded
    records would; handed another batch, they are refused."""
    codec = twins.load("codec", impl)
    m = twins.load("offset_map", impl)(24 * 16)
    data = codec.encode_batch([(b"a", b"1", [("h", b"x")], 5), (b"b", None, None, 7), (b"a", b"2", None, 9)],
                              base_offset=10)
    (batch,) = codec.iter_batches(data)
    m.add_batch(batch, 0)
    kept, all_kept, tombstones = m.filter_batch(batch, False, 0)
    assert (len(kept), all_kept, tombstones) == (2, False, True)
    assert codec.rebuild_batch(batch, kept) == codec.rebuild_batch(batch, batch.records()[1:])
    (other,) = codec.iter_batches(codec.encode_batch([(b"c", b"3", None, 1)]))
    if impl == "cython":
        with pytest.raises(ValueError):
            codec.rebuild_batch(other, kept)


def _cpu_runs(code: str) -> bool:
    """Whether this CPU runs the side-by-side MD5 code named, from the kernel's CPU flags (not the core's check)."""
    flags = set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    need = {"portable": set(), "avx2": {"avx2"}, "avx512": {"avx512f", "avx512bw"}}[code]
    return need <= flags


@pytest.mark.parametrize("code", ["portable", "avx2", "avx512"])
def test_the_side_by_side_md5_gives_each_keys_digest(code):
    """Up to 16 keys of one MD5 block (0 to 55 bytes) hashed together with each code the core has (the one every CPU
    runs, AVX2, AVX-512): each lane's digest is hashlib's where this CPU runs the code, which is refused elsewhere;
    more keys, or a longer one, are refused; the map uses the last code this CPU runs."""
    try:
        from engine._native._offset_map import md5_code, md5_lanes
    except ImportError:
        pytest.fail("the native core must be built for this test (make test builds it)")
    assert md5_code() == [c for c in ("portable", "avx2", "avx512") if _cpu_runs(c)][-1]
    rng = random.Random(4)
    for count in [*range(1, 17), *(rng.randrange(1, 17) for _ in range(200))]:
        keys = [rng.randbytes(rng.choice([0, 1, 3, 4, 16, 31, 32, 54, 55])) for _ in range(count)]
        if not _cpu_runs(code):
            with pytest.raises(OSError, match=code):
                md5_lanes(keys, code)
            break
        assert md5_lanes(keys, code) == md5_lanes(keys) == [hashlib.md5(k).digest() for k in keys]
    for keys in ([b"k"] * 17, [bytes(56)]):
        with pytest.raises(ValueError):
            md5_lanes(keys, code)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("slots,seed", [(97, 1), (40, 2), (61, 3)])
def test_a_batchs_keys_mapped_and_filtered_together_agree_with_the_model(impl, slots, seed):
    """add_batch and filter_batch hash a batch's keys together (side by side when a key fits one MD5 block, alone
    when not) and fetch slots ahead: the slots, where the map fills, and the records kept are the model's."""
    codec = twins.load("codec", impl)
    rng = random.Random(seed)
    pool = [rng.randbytes(rng.choice([0, 1, 16, 54, 55, 56, 64, 120])) for _ in range(60)]
    records = [(None if rng.random() < 0.05 else rng.choice(pool), None if rng.random() < 0.1 else b"v", None, 1)
               for _ in range(300)]
    data = b"".join(codec.encode_batch(records[lo:hi], base_offset=lo) for lo, hi in ((0, 7), (7, 200), (200, 300)))
    batches = list(codec.iter_batches(data))
    m = twins.load("offset_map", impl)(24 * slots)
    start, limit = 3, int(slots * 0.9)
    model: dict = {}
    mapped = []
    full = False
    for batch in batches:
        filled = m.add_batch(batch, start)
        for offset, (key, _, _, _) in enumerate(records[batch.base_offset:batch.next_offset], batch.base_offset):
            if full or key is None or offset < start:
                continue
            if len(model) >= limit:
                full = True  # the records from here on wait for the next pass
                continue
            model[key] = offset
            mapped.append((key, offset))
        assert filled == full
        if full:
            break
    assert m.table() == _model_table(mapped, slots) and m.size == len(model) and m.latest_offset == mapped[-1][1]
    for batch in batches:
        kept, all_kept, tombstones = m.filter_batch(batch, False, 0)
        want = [r for r in batch.records() if r.offset > mapped[-1][1]
                or (r.key is not None and r.offset >= model.get(r.key, -1))]
        assert (len(kept), all_kept, tombstones) == (len(want), len(want) == batch.records_count,
                                                     any(r.value is None for r in want))
        assert codec.rebuild_batch(batch, kept) == codec.rebuild_batch(batch, want)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("slots,count,starts", [(100, 3000, (0, 1700)), (61, 400, (3, 0)), (400, 2500, (900, 10))])
def test_a_pass_keeps_the_records_a_lookup_of_their_keys_finds_latest(impl, slots, count, starts):
    """The native map answers the filter pass from the offsets its map pass saw superseded, not by looking keys up,
    for the records from the pass's start up to memory / 2 of them: before, within and beyond that, after a clear()
    and for another start, and after a put out of offset order, a record is kept exactly when a lookup of its key
    (and a model) finds it latest."""
    codec = twins.load("codec", impl)
    rng = random.Random(slots)
    pool = [b"k%d" % i for i in range(int(slots * 0.6))] + [rng.randbytes(60) for _ in range(3)]
    records = [(None if rng.random() < 0.03 else rng.choice(pool), None if rng.random() < 0.1 else b"v", None, 1)
               for _ in range(count)]
    bounds = sorted({0, count, *rng.sample(range(1, count), count // 50)})
    data = b"".join(codec.encode_batch(records[lo:hi], base_offset=lo) for lo, hi in zip(bounds, bounds[1:]))
    batches = list(codec.iter_batches(data))
    m = twins.load("offset_map", impl)(24 * slots)
    for start in (*starts, None):
        if start is None:  # a put out of offset order: the record put becomes its key's latest again
            offset, key = next((o, r[0]) for o, r in enumerate(records) if r[0] and o > starts[-1] and model[r[0]] > o)
            m.put(key, offset)
            model[key] = latest = offset
        else:
            m.clear()
            for batch in batches:
                assert not m.add_batch(batch, start)
                m.update_latest_offset(batch.last_offset)
            if impl == "cython":  # the bitset covers what the pass put, within its bound
                assert min(count - start, 24 * slots // 2) <= m.superseded_span <= 24 * slots // 2 + 7
            model = {k: o for o, (k, _, _, _) in enumerate(records) if o >= start and k is not None}
            latest = count - 1
        assert all(m.get(key) == model.get(key, -1) for key in pool)
        for batch in batches:
            kept, all_kept, _ = m.filter_batch(batch, False, 0)
            want = [r for r in batch.records() if r.offset > m.latest_offset
                    or (r.key is not None and r.offset >= m.get(r.key))]
            assert want == [r for r in batch.records() if r.offset > latest
                            or (r.key is not None and r.offset >= model.get(r.key, -1))]
            assert (len(kept), all_kept) == (len(want), len(want) == batch.records_count)
            assert codec.rebuild_batch(batch, kept) == codec.rebuild_batch(batch, want)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("compression,timestamp_type", [("none", "create"), ("zstd", "create"), ("none", "log_append")])
def test_a_filter_pass_keeps_whole_records_beside_the_superseded_it_steps_over(impl, compression, timestamp_type):
    """After a map pass over every batch, the native filter pass knows a superseded record by its offset alone and
    steps over it by its length; the records it keeps (with headers, tombstones before their delete horizon, none
    past it, no keyless one) rebuild each batch exactly as the decoded records a model keeps, compressed or with
    LogAppendTime, with the same all-kept and tombstone answers; a batch no map pass checked is read whole."""
    codec = twins.load("codec", impl)
    rng = random.Random(compression + timestamp_type)
    pool = [b"key-%d" % i for i in range(60)]
    records = [(None if rng.random() < 0.04 else rng.choice(pool), None if rng.random() < 0.15 else rng.randbytes(9),
                rng.choice([None, [], [("trace", rng.randbytes(5)), ("n", None)]]), T0 + i) for i in range(700)]
    bounds = sorted({0, len(records), *rng.sample(range(1, len(records)), 25)})
    horizon = T0 + 50
    data = b""
    for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        batch = codec.encode_batch(records[lo:hi], base_offset=lo, compression=compression,
                                   timestamp_type=timestamp_type,
                                   log_append_time_ms=T0 + 7 if timestamp_type == "log_append" else None)
        if n % 3 == 1:  # an earlier clean gave its tombstones a delete horizon
            (decoded,) = codec.iter_batches(batch)
            batch = codec.rebuild_batch(decoded, decoded.records(), horizon)
        data += batch
    batches = list(codec.iter_batches(data))
    m = twins.load("offset_map", impl)(24 * 200)
    for batch in batches[:-1]:  # the last batch: no map pass reads it (its records are past the latest offset)
        assert not m.add_batch(batch, 0)
        m.update_latest_offset(batch.last_offset)
    latest = batches[-2].last_offset
    last = {r[0]: o for o, r in enumerate(records[:latest + 1]) if r[0] is not None}
    for now in (horizon - 1, horizon):
        for batch in batches:
            kept, all_kept, tombstones = m.filter_batch(batch, False, now)
            past = batch.has_delete_horizon and now >= batch.delete_horizon_ms
            want = [r for r in batch.records() if r.offset > latest or (
                r.key is not None and r.offset == last[r.key] and not (r.value is None and past))]
            assert (len(kept), all_kept, tombstones) == (len(want), len(want) == batch.records_count,
                                                         any(r.value is None for r in want))
            assert codec.rebuild_batch(batch, kept) == codec.rebuild_batch(batch, want)


# --- the rewrite of a batch -----------------------------------------------------------------------------------
def test_rebuild_batch_reproduces_the_cleaners_batches_of_the_kafka_vector(codec):
    """compacted-0 holds Kafka's own cleaner output: keeping every record (and the horizon) rebuilds the same
    records, byte for byte where uncompressed; an empty batch is exactly writeEmptyHeader's."""
    data = (vectors.case_dir("compacted-0") / "00000000000000000000.log").read_bytes()
    for batch in codec.iter_batches(data):
        original = bytes(batch.buffer)
        if batch.records_count == 0:
            assert codec.rebuild_batch(batch, []) == original
            continue
        rebuilt = codec.rebuild_batch(batch, batch.records(), batch.delete_horizon_ms)
        again = next(codec.iter_batches(rebuilt))
        # every header field but the length and CRC; a LogAppendTime batch's records carry the append time, so its
        # rebuilt base timestamp is that time (as Kafka's builder makes it), not the vector's stored one
        skip = {1, 4, 7} if batch.timestamp_type == "log_append" else {1, 4}
        fields = [f for i, f in enumerate(bf.HEADER.unpack_from(original)) if i not in skip]
        assert [f for i, f in enumerate(bf.HEADER.unpack_from(rebuilt)) if i not in skip] == fields
        assert again.records() == batch.records()
        if batch.compression == "none" and batch.timestamp_type == "create":
            assert rebuilt == original
        if batch.records_count > 1 and not batch.is_control:
            fewer = codec.rebuild_batch(batch, batch.records()[1:], 1_900_000_000_000)
            got = next(codec.iter_batches(fewer))
            assert (got.base_offset, got.last_offset, got.records_count) == (batch.base_offset, batch.last_offset,
                                                                             batch.records_count - 1)
            assert got.delete_horizon_ms == 1_900_000_000_000 and got.records() == batch.records()[1:]
            assert got.compression == batch.compression and got.timestamp_type == batch.timestamp_type


def test_first_keyless_offset_names_the_first_record_without_a_key(codec):
    batch = next(codec.iter_batches(codec.encode_batch([(b"k", b"v", None, 1), (None, b"v", None, 2),
                                                        (None, None, None, 3)], base_offset=10)))
    assert batch.first_keyless_offset() == 11
    keyed = next(codec.iter_batches(codec.encode_batch([(b"k", None, None, 1)])))
    assert keyed.first_keyless_offset() is None
