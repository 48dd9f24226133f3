"""Hypothesis round-trips: random records survive encode -> decode in both implementations,
and both implementations produce the same bytes for the same input."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.record import twins
from tests.conftest import IMPLEMENTATIONS

IMPLS = [twins.load("codec", name) for name in IMPLEMENTATIONS]

blob = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.text(max_size=32).map(lambda t: t.encode("utf-8")),
    st.builds(lambda n, seed: random.Random(seed).randbytes(n), st.integers(0, 1 << 20), st.integers(0, 2**32)),
)
small = st.one_of(st.none(), st.binary(max_size=48), st.text(max_size=16).map(lambda t: t.encode()))
headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=12), small), max_size=4))
ts_offsets = st.integers(-10**9, 10**9)


@st.composite
def batches(draw):
    base_ts = draw(st.integers(0, 2**42))
    n = draw(st.integers(1, 12))
    big = 0
    recs = []
    for _ in range(n):
        value = draw(blob)
        if value is not None and len(value) > 4096:  # keep a batch under ~2 MiB
            big += 1
            if big > 2:
                value = value[:4096]
        ts = draw(st.one_of(st.just(-1), ts_offsets.map(lambda d: max(0, base_ts + d))))
        recs.append((draw(small), value, draw(headers), ts))
    producer = draw(st.one_of(st.none(), st.tuples(st.integers(0, 2**62), st.integers(0, 32767),
                                                   st.integers(0, 2**31 - 1), st.booleans())))
    kwargs = dict(
        base_offset=draw(st.integers(0, 2**62)),
        compression=draw(st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"])),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
    )
    if producer is not None:
        pid, epoch, seq, txn = producer
        kwargs.update(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)
    return recs, kwargs


def _expected_headers(h):
    return [] if h is None else [(k, v) for k, v in h]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches())
def test_round_trip_in_every_implementation(case):
    recs, kwargs = case
    encoded = [impl.encode_batch(recs, **kwargs) for impl in IMPLS]
    assert all(e == encoded[0] for e in encoded), "implementations disagree on bytes"
    for impl in IMPLS:
        (batch,) = list(impl.iter_batches(encoded[0]))
        assert batch.is_valid()
        assert batch.base_offset == kwargs["base_offset"]
        assert batch.last_offset == kwargs["base_offset"] + len(recs) - 1
        assert batch.records_count == len(recs)
        assert batch.compression == kwargs["compression"]
        assert batch.max_timestamp == max(r[3] for r in recs)
        assert batch.producer_id == kwargs.get("producer_id", -1)
        assert batch.is_transactional == kwargs.get("transactional", False)
        for got in (batch.records(), list(batch)):
            assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
                (kwargs["base_offset"] + i, ts, k, v, _expected_headers(h)) for i, (k, v, h, ts) in enumerate(recs)
            ]
        cols = impl.decode_columnar(encoded[0], include_headers=True)
        assert [(d["offset"], d["key"], d["value"], d["headers"] or []) for d in cols.to_pylist()] == [
            (kwargs["base_offset"] + i, k, v, _expected_headers(h)) for i, (k, v, h, ts) in enumerate(recs)
        ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(small, small), min_size=1, max_size=40), st.integers(0, 2**40),
       st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]))
def test_columnar_encode_equals_row_encode(pairs, ts, compression):
    """encode_columnar over Arrow-layout buffers gives the bytes encode_batch gives for the same rows."""
    import pyarrow as pa

    keys = pa.array([k for k, _ in pairs], type=pa.binary())
    values = pa.array([v for _, v in pairs], type=pa.binary())
    rows = [(k, v, None, ts) for k, v in pairs]
    for impl in IMPLS:
        want = impl.encode_batch(rows, compression=compression)
        assert impl.encode_columnar(keys=keys, values=values, timestamps=ts, compression=compression) == want
        # sliced arrays (non-zero Arrow offsets) and raw (data, offsets, validity) tuples
        if len(pairs) > 2:
            sub = impl.encode_batch(rows[1:-1], compression=compression)
            assert impl.encode_columnar(keys=keys.slice(1, len(pairs) - 2), values=values.slice(1, len(pairs) - 2),
                                        timestamps=ts, compression=compression) == sub
        vb = values.buffers()
        tss = pa.array([ts] * len(pairs), type=pa.int64()).buffers()[1]
        assert impl.encode_columnar(values=(vb[2] or b"", vb[1], vb[0]) if values.null_count else (vb[2] or b"", vb[1]),
                                    keys=keys, timestamps=tss, compression=compression) == want


def _headers_come_back(recs: list) -> bytes:
    """The batch of `recs`, after checking every decoder gives each record's headers back as written."""
    data = IMPLS[0].encode_batch(recs)
    for impl in IMPLS:
        (batch,) = impl.iter_batches(data)
        for got in (batch.records(), list(batch)):
            assert [r.headers for r in got] == [h for _, _, h, _ in recs]
    return data


def _native_impls() -> list:
    return [impl for name, impl in zip(IMPLEMENTATIONS, IMPLS) if name == "cython"]


def test_header_keys_shared_within_a_batch_keep_their_own_text():
    """The native decoder shares one str per repeated header key: keys that take turns in its cache (more keys than
    it has slots), non-ASCII, empty, long and invalid UTF-8 keys all come back as written, in both decoders; the
    (key, value) pairs it builds are out of the cyclic GC."""
    import gc

    keys = ["ab", "ba", "aab", "abb", "", "é", "ключ", "k" * 65, "k" * 64, "a\udcff"]
    keys += [f"k{i}" for i in range(30)]
    recs = [(b"k", b"v", [(keys[(i + j) % len(keys)], b"%d" % j) for j in range(3)], 1_000 + i) for i in range(120)]
    data = _headers_come_back(recs)
    for impl in _native_impls():
        (batch,) = impl.iter_batches(data)
        pairs = [pair for r in batch for pair in r.headers]
        assert not any(gc.is_tracked(pair) for pair in pairs)
        (batch,) = impl.iter_batches(impl.encode_batch([(None, b"v", [("trace-id", b"%d" % i)], 0) for i in range(9)]))
        assert len({id(k) for r in batch for k, _ in r.headers}) == 1  # one str for a key every record repeats


def test_repeated_header_pairs_are_shared_and_keep_their_own_bytes():
    """A header the native decoder meets again verbatim (same key, same value of at most 64 bytes or None) is the same
    tuple; every other one comes back as written, in both decoders: values one byte or one length apart, None beside
    b"", 65-byte values, keys taking turns in the key cache (more keys than it has slots)."""
    values = [b"svc", b"svd", b"sv", b"", None, b"x" * 64, b"x" * 63 + b"y", b"x" * 65, b"x" * 64 + b"y"]
    keys = ["source", "ab", "ba", "é"] + [f"k{i}" for i in range(20)]
    rng = random.Random(7)
    recs = [(b"k", b"v", [(rng.choice(keys), rng.choice(values)) for _ in range(rng.randrange(4))], i)
            for i in range(1000)]
    _headers_come_back(recs)
    for impl in _native_impls():
        cases = [([b"svc"] * 9, 1), ([None] * 9, 1), ([b"x" * 64] * 9, 1), ([b"x" * 65] * 9, 9),
                 ([b"%d" % i for i in range(9)], 9)]
        for values, tuples in cases:
            (batch,) = impl.iter_batches(impl.encode_batch([(None, b"v", [("source", v)], 0) for v in values]))
            for got in (batch.records(), list(batch)):
                assert len({id(r.headers[0]) for r in got}) == tuples
                assert [r.headers for r in got] == [[("source", v)] for v in values]
        # W3C trace context: the two keys every record carries keep their own slots (one str each, the fixed pair
        # shared)
        recs = [(None, b"v", [("traceparent", b"00-%032d-01" % i), ("tracestate", b"k=v")], 0) for i in range(9)]
        (batch,) = impl.iter_batches(impl.encode_batch(recs))
        got = list(batch)
        assert len({id(r.headers[0][0]) for r in got}) == 1 and len({id(r.headers[1]) for r in got}) == 1
        assert [r.headers for r in got] == [h for _, _, h, _ in recs]


def test_a_decode_large_enough_to_stream_its_values_keeps_every_byte():
    """A columnar decode of more than 4 MiB of uncompressed batches writes its value column with stores that bypass
    the cache, line by line after a partial first line: values of every length and start alignment around those
    edges (and nulls, empty values, a window that drops records at both ends) come back byte for byte."""
    rng = random.Random(7)
    lengths = [0, 1, 63, 64, 65, 127, 255, 256, 257, 319, 320, 1023, 1024, 1025, 4095, 4097, 70000]
    recs = []
    for i in range(6000):
        n = rng.choice(lengths) if i % 3 else rng.randrange(2000)
        recs.append((b"k%d" % i, None if i % 97 == 0 else rng.randbytes(n), None, i))
    chunks = [recs[i:i + 40] for i in range(0, len(recs), 40)]
    log = b"".join(IMPLS[0].encode_batch(c, base_offset=i * 40) for i, c in enumerate(chunks))
    assert len(log) > 5 << 20
    lo, hi = 13, len(recs) - 21
    want = [(i, k, v) for i, (k, v, _h, _ts) in enumerate(recs) if lo <= i < hi]
    for impl in IMPLS:
        for window in ({}, {"start_offset": lo, "end_offset": hi}):
            got = [(d["offset"], d["key"], d["value"]) for d in impl.decode_columnar(log, **window).to_pylist()]
            assert got == (want if window else [(i, k, v) for i, (k, v, _h, _ts) in enumerate(recs)])
