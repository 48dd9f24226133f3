"""Every input shape a caller may pass: both twins encode it to the same bytes or refuse it with the same error, and
the native core takes every supported shape without calling the Python validator.

Supported shapes: keys, values and header values as None, bytes, bytearray, memoryview or any C-contiguous
buffer; headers as None, [] or a list or tuple of (str, value) tuples; records as (key, value, headers,
timestamp_ms) tuples or the codec's Records; for send(), the same fields as arguments, and for send_batch()
(key, value) or 4-tuples.
"""
from __future__ import annotations

import array
import re
from collections import namedtuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.clients import accumulator as _registers_the_twin  # noqa: F401
from engine.record import batch_format as bf
from engine.record import twins
from tests.conftest import IMPLEMENTATIONS

IMPLS = {name: twins.load("codec", name) for name in IMPLEMENTATIONS}
Row = namedtuple("Row", "key value headers timestamp")
Pair = namedtuple("Pair", "key value")

# --- recipes: plain data a strategy draws, turned into fresh objects for each implementation ----------------------
FIELD_KINDS = ["none", "bytes", "bytearray", "memoryview", "array", "strided", "sliced", "str", "int", "float"]
SUPPORTED_FIELDS = ["none", "bytes", "bytearray", "memoryview", "array", "sliced"]


def make_field(kind: str, data: bytes):
    return {
        "none": lambda: None, "bytes": lambda: data, "bytearray": lambda: bytearray(data),
        "memoryview": lambda: memoryview(data), "array": lambda: array.array("B", data),
        "strided": lambda: memoryview(data + data)[::2],          # not C-contiguous: the validator copies it
        "sliced": lambda: memoryview(b"<" + data + b">")[1:-1],   # a contiguous view into a larger buffer
        "str": lambda: data.decode("latin-1"), "int": lambda: len(data), "float": lambda: 1.5,
    }[kind]()


def expected_bytes(value):
    """What a field encodes as, worked out without the codec."""
    return None if value is None else memoryview(value).tobytes()


fields = st.tuples(st.sampled_from(FIELD_KINDS), st.binary(max_size=40))
header_keys = st.one_of(st.text(max_size=12), st.sampled_from(["\udcff", "\udc80x", "\ud800", "é"]),
                        st.binary(max_size=4), st.integers(0, 9))
pair_shapes = st.sampled_from(["tuple", "tuple", "tuple", "list", "triple", "row"])
headers = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["list", "tuple"]), st.lists(st.tuples(pair_shapes, header_keys, fields), max_size=4)),
    st.sampled_from(["a string", "dict"]),
)
timestamps = st.one_of(st.none(), st.integers(-1, 2**63 - 1), st.sampled_from([-2, 2**63, True, "now", 1.0]))
containers = st.sampled_from(["tuple", "tuple", "tuple", "record", "row", "triple", "list", "object"])
records = st.tuples(containers, fields, fields, headers, timestamps, st.integers(0, 2))


def make_headers(recipe):
    if recipe is None:
        return None
    if recipe == "a string":
        return recipe
    if recipe == "dict":
        return {"k": b"v"}
    outer, pairs = recipe
    made = []
    for shape, key, (kind, data) in pairs:
        value = make_field(kind, data)
        made.append({"tuple": (key, value), "list": [key, value], "triple": (key, value, value),
                     "row": Pair(key, value)}[shape])
    return made if outer == "list" else tuple(made)


def make_record(recipe, impl, offset: int):
    container, (kkind, kdata), (vkind, vdata), hrecipe, ts, step = recipe
    key, value, hs = make_field(kkind, kdata), make_field(vkind, vdata), make_headers(hrecipe)
    if container == "record":  # a decoded record: keeps its own offset (a step of 0 repeats one: refused)
        return impl.Record(offset + step, ts if type(ts) is int and -2 <= ts < 2**63 else 0, key, value, hs)
    return {"tuple": lambda: (key, value, hs, ts), "row": lambda: Row(key, value, hs, ts),
            "triple": lambda: (key, value, hs), "list": lambda: [key, value, hs, ts],
            "object": lambda: object()}[container]()


def make_records(recipes, impl):
    out, offset = [], 0
    for recipe in recipes:
        rec = make_record(recipe, impl, offset)
        offset = rec.offset if isinstance(rec, impl.Record) else offset + 1
        out.append(rec)
    return out


def outcome(call):
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return type(exc).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(exc))  # reprs of the objects themselves


# --- the twins agree ------------------------------------------------------------------------------------------
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=5))
def test_encode_batch_agrees_on_every_shape(recipes):
    results = {name: outcome(lambda impl=impl: impl.encode_batch(make_records(recipes, impl)))
               for name, impl in IMPLS.items()}
    assert len(set(results.values())) == 1, results
    kind, batch = next(iter(results.values()))
    if kind == "ok":  # the bytes hold what the inputs held, read back without the encoder
        impl = next(iter(IMPLS.values()))
        inputs = make_records(recipes, impl)
        decoded = impl.RecordBatch(batch).records()
        assert [r.key for r in decoded] == [expected_bytes(getattr(i, "key", None) if not isinstance(i, tuple)
                                                           else i[0]) for i in inputs]
        assert [r.value for r in decoded] == [expected_bytes(i.value if isinstance(i, impl.Record) else i[1])
                                              for i in inputs]
        assert [[(k, v) for k, v in r.headers] for r in decoded] == [
            [(k, expected_bytes(v)) for k, v in ((i.headers if isinstance(i, impl.Record) else i[2]) or [])]
            for i in inputs]


class FixedClock:
    def time_ms(self) -> int:
        return 1_700_000_000_000


def accumulator(impl_name: str, sealed: list):
    acc_impl = twins.load("accumulator", impl_name)
    holder = {}
    acc = acc_impl.RecordAccumulator(batch_size=1 << 14, max_request_size=1 << 20, lookup=lambda topic: (3, 1 << 20),
                                     drain=lambda batch: None, on_full=lambda: sealed.extend(holder["a"].take_sealed()),
                                     seed=5, clock=FixedClock())
    holder["a"] = acc
    return acc


def built(acc, sealed) -> list:
    acc.seal_all()
    sealed.extend(acc.take_sealed())
    return [(b.partition, b.records.build()) for b in sealed]


def accumulators_agree(feed) -> None:
    """Run feed(accumulator, impl) on a fresh accumulator of each implementation: what it returns and the batches
    built must be the same."""
    results = {}
    for name, impl in IMPLS.items():
        sealed = []
        acc = accumulator(name, sealed)
        results[name] = (feed(acc, impl), built(acc, sealed))
    assert len({repr(r) for r in results.values()}) == 1, results


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=5))
def test_send_agrees_on_every_shape(recipes):
    def feed(acc, impl):
        steps = []
        for _, (kkind, kdata), (vkind, vdata), hrecipe, ts, _ in recipes:
            steps.append(outcome(lambda: acc.send("t", value=make_field(vkind, vdata), key=make_field(kkind, kdata),
                                                  headers=make_headers(hrecipe), timestamp_ms=ts).index))
        return steps
    accumulators_agree(feed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=5), st.booleans())
def test_send_batch_agrees_on_every_shape(recipes, pairs):
    def feed(acc, impl):
        items = [make_record(recipe, impl, 0) for recipe in recipes]
        items = [rec[:2] if pairs and isinstance(rec, tuple) else rec for rec in items]
        return outcome(lambda: len(acc.send_many("t", items)))
    accumulators_agree(feed)


# --- supported shapes never leave the native path ------------------------------------------------------------
VALIDATORS = ("unpack_record", "check_bytes", "normalize_headers", "check_timestamp", "check_send", "sent_fields")


@pytest.fixture
def validator_calls(monkeypatch):
    """Counts calls into the shared Python validator."""
    calls = []
    for name in VALIDATORS:
        original = getattr(bf, name)
        monkeypatch.setattr(bf, name, lambda *a, _f=original, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    return calls


def supported_records(impl):
    out = []
    for i, kind in enumerate(SUPPORTED_FIELDS):
        for hs in (None, [], (), [("trace-id", make_field(kind, b"abc")), ("é", None)], (("src", b"x"),),
                   [("\udcff", b"undecodable key bytes")]):
            out.append((make_field(kind, b"key%d" % i), make_field(kind, b"value" * i), hs, 1_700_000_000_000 + i))
            out.append((None, make_field(kind, b"v"), hs, None))
    n = len(out)
    out += [impl.Record(n + j, 1_700_000_000_000, make_field(kind, b"k"), make_field(kind, b"v"),
                        [("h", make_field(kind, b"hv"))] if j % 2 else None)
            for j, kind in enumerate(SUPPORTED_FIELDS)]
    return out


def test_supported_shapes_stay_native(validator_calls):
    native = twins.load("codec", "cython")
    records = supported_records(native)
    batch = native.encode_batch(records)
    assert validator_calls == []
    assert len(native.RecordBatch(batch).records()) == len(records)
    sealed = []
    acc = accumulator("cython", sealed)
    for key, value, hs, ts in records[:-len(SUPPORTED_FIELDS)]:
        acc.send("t", value=value, key=key, headers=hs, timestamp_ms=ts)
    acc.send_many("t", [(b"k", b"v"), (bytearray(b"k"), memoryview(b"v")), (b"k", b"v", [("h", b"1")], 5),
                        (None, b"v", [], None)])
    assert validator_calls == []
    assert sum(len(native.RecordBatch(b).records()) for _, b in built(acc, sealed)) == len(records) - 2


def test_the_validator_counter_sees_a_shape_the_native_pass_hands_over(validator_calls):
    native = twins.load("codec", "cython")
    native.encode_batch([Row(b"k", b"v", None, 1)])  # a tuple subclass: valid, but read by the shared validator
    assert "unpack_record" in validator_calls
    with pytest.raises(Exception, match="key must be bytes-like"):
        accumulator("cython", []).send("t", value=b"v", key="text")
    assert "check_send" in validator_calls


def test_decoded_records_pass_back_to_the_encoder_and_send_natively(validator_calls):
    native = twins.load("codec", "cython")
    batch = native.encode_batch([(b"k", b"v", None, 1), (b"k2", b"v2", [("h", b"1")], 2)])
    decoded = native.RecordBatch(batch).records()
    assert decoded[0].headers is bf.NO_HEADERS
    assert native.encode_batch(decoded) == batch
    acc = accumulator("cython", [])
    for r in decoded:
        acc.send("t", value=r.value, key=r.key, headers=r.headers, timestamp_ms=r.timestamp)
    assert validator_calls == []


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_record_without_headers_shares_one_read_only_empty_list(impl):
    import copy
    import pickle
    codec = IMPLS[impl]
    batch = codec.encode_batch([(b"k", b"v", None, 1), (None, b"v", [], 2), (b"k", b"v", [("h", None)], 3)])
    records = codec.RecordBatch(batch).records()
    consumed, _ = codec.RecordBatch(batch).consumer_records("t", 0, 0, 10)
    empty = [r.headers for r in records[:2] + consumed[:2]] + [codec.Record(0, 0, None, None).headers]
    assert all(h is bf.NO_HEADERS for h in empty)
    assert empty[0] == [] and isinstance(empty[0], list) and list(empty[0]) == [] and not empty[0]
    for change in (lambda h: h.append(("h", b"1")), lambda h: h.extend([]), lambda h: h.__setitem__(slice(0, 0), [1]),
                   lambda h: h.__iadd__([("h", b"1")]), lambda h: h.insert(0, 1), lambda h: h.clear()):
        with pytest.raises(TypeError, match="read-only empty list"):
            change(empty[0])
    assert bf.NO_HEADERS == []
    assert pickle.loads(pickle.dumps(records[0])) == records[0]
    assert pickle.loads(pickle.dumps(bf.NO_HEADERS)) is bf.NO_HEADERS
    assert copy.copy(bf.NO_HEADERS) is bf.NO_HEADERS and copy.deepcopy(records[0].headers) is bf.NO_HEADERS
    own = records[2].headers
    own.append(("mine", b"2"))  # a record's own headers are its own list
    assert codec.RecordBatch(batch).records()[2].headers == [("h", None)]
