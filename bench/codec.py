"""Codec workloads: RecordBatch encode, decode and CRC-32C, against aiokafka's Cython builder/reader, kafka-python's
pure-Python ones and the `crc32c` package.

Records have 16-byte keys and 100-byte or 1-KiB values; batches are 16 KiB or 1 MiB, as a producer would fill them.
Every contender gets the same input objects: the same (key, value, headers, timestamp) tuples, headers `[]` (what
kafka-python and aiokafka callers pass), two (str, bytes) headers per record, or either in turn. A narrower row
encodes headers None, which the peers' builders refuse: they get the same records with `[]`. Decoding reads every field of every
record (key, value, offset, timestamp, headers) through one shared loop, and every side verifies the batch CRCs,
as each consumer does by default. Each input set is one suite: built just before it is timed, freed after.
"""
from __future__ import annotations

import random
from typing import Callable

import engine
from bench.runner import Contender, Workload

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TWO_HEADERS = "2 headers"
MIXED = "mixed"  # half the records with two headers, half with []


def make_records(n: int, value_size: int, seed: int = 1, headers: str | None = None) -> list[tuple]:
    """n records: 16-byte keys, values of `value_size` bytes (half random, half text: compressible); headers None,
    `[]` ("[]"), two (str, bytes) pairs (TWO_HEADERS) or either in turn (MIXED), a new list per record as a caller
    builds them."""
    rng = random.Random(seed)
    words = [b"kafka", b"log", b"segment", b"offset", b"batch", b"index", b"record", b"topic"]
    out = []
    for i in range(n):
        text = b" ".join(rng.choice(words) for _ in range(value_size // 6 + 1))
        value = (rng.randbytes(value_size // 2) + text)[:value_size]
        two = headers == TWO_HEADERS or (headers == MIXED and i % 2)
        hs = None if headers is None else [("trace-id", rng.randbytes(16)), ("source", b"bench-service")] if two else []
        out.append((b"%016d" % rng.randrange(10**15), value, hs, 1_700_000_000_000 + i))
    return out


def chunk(records: list, batch_bytes: int, value_size: int) -> list[list]:
    per = max(1, batch_bytes // (16 + value_size + 10))
    return [records[i:i + per] for i in range(0, len(records), per)]


def _peers():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
    from aiokafka.record.memory_records import MemoryRecords as AioMemory
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
    from kafka.record.memory_records import MemoryRecords as KpMemory

    return {"aiokafka": (AioBuilder, AioMemory), "kafka-python": (KpBuilder, KpMemory)}


def _peer_encode(builder_cls, chunks, codec_id):
    def call():
        out = []
        for recs in chunks:
            b = builder_cls(2, codec_id, 0, -1, -1, -1, 1 << 30)
            for i, (k, v, h, ts) in enumerate(recs):
                b.append(i, ts, k, v, h)
            out.append(b.build())
        return out
    return call


def read_fields(records) -> int:
    """What a consumer's loop does: read every field of every record."""
    n = 0
    for r in records:
        key, value, offset, timestamp, headers = r.key, r.value, r.offset, r.timestamp, r.headers  # noqa: F841
        n += 1
    return n


def _peer_batches(memory_cls, log):
    """The peer's batches of `log`, each CRC-checked as its consumer does (check_crcs=True by default)."""
    mr = memory_cls(log)
    while (batch := mr.next_batch()) is not None:
        if not batch.validate_crc():
            raise ValueError("CRC mismatch")
        yield batch


def _peer_read(memory_cls, log):
    return lambda: sum(read_fields(batch) for batch in _peer_batches(memory_cls, log))


def _peer_list(memory_cls, log):
    return lambda: [list(batch) for batch in _peer_batches(memory_cls, log)]


def _ours_read(log):
    """Iterate each batch, as the peer's side does: records are decoded as the loop reaches them."""
    return lambda: sum(read_fields(b) for b in engine.iter_batches(log))


def _ours_list(log):
    return lambda: [b.records() for b in engine.iter_batches(log)]


def _ours_encode(chunks, codec="none"):
    return lambda: [engine.encode_batch(c, compression=codec) for c in chunks]


def _size_suite(quick: bool, value_size: int) -> list[Workload]:
    """Encode and decode at 16 KiB and 1 MiB batches. At 100 B values: headers [] and two headers at both sizes,
    headers None at 1 MiB (encode; the peers' builders take no None, so they get [] for it: a narrower row), and
    mixed headers at 1 MiB (decode); at 1 KiB values: headers [] at both sizes and mixed headers at 16 KiB (decode)."""
    peers = _peers()
    total = (2 << 20) if quick else (16 << 20)
    n = total // (value_size + 26)
    raw = n * (16 + value_size)
    out = []
    shapes = [None, "[]", TWO_HEADERS, MIXED] if value_size == 100 else ["[]", MIXED]
    for shape in shapes:
        records = make_records(n, value_size, headers=shape)
        peer_records = make_records(n, value_size, headers="[]") if shape is None else records
        for batch_bytes, label in ((16 << 10, "16 KiB"), (1 << 20, "1 MiB")):
            big = batch_bytes == 1 << 20
            if shape is None and not big or shape == MIXED and big != (value_size == 100):
                continue  # headers None at 1 MiB only; mixed at 1 MiB for 100 B values, at 16 KiB for 1 KiB ones
            chunks, peer_chunks = chunk(records, batch_bytes, value_size), chunk(peer_records, batch_bytes, value_size)
            log = b"".join(engine.encode_batch(c) for c in chunks)
            name = f"{value_size} B values, {label} batches, headers {shape}"
            name += " (peers: [])" if shape is None else ""
            if value_size != 100:
                encode_target = {}
            elif big:
                encode_target = {"aiokafka": 3.0}
            else:
                encode_target = {"aiokafka": 3.0 if shape == "[]" else 2.5}
            if shape != MIXED:
                out.append(Workload("codec encode", name, n, raw, [
                    Contender("kafkalog", _ours_encode(chunks)),
                    *(Contender(p, _peer_encode(peers[p][0], peer_chunks, 0)) for p in peers)], targets=encode_target))
            if shape is not None:
                read_target = {"aiokafka": 2.0} if (shape == "[]" and not big) or shape == MIXED else {}
                out.append(Workload("codec decode, read every field", name, n, len(log), [
                    Contender("kafkalog", _ours_read(log)),
                    *(Contender(p, _peer_read(peers[p][1], log)) for p in peers)], targets=read_target))
            if shape == "[]":
                out.append(Workload("codec decode to a list (fields not read)", name, n, len(log), [
                    Contender("kafkalog", _ours_list(log)),
                    Contender("aiokafka", _peer_list(peers["aiokafka"][1], log))]))
                out.append(Workload("codec columnar decode (Arrow buffers) vs aiokafka reading every field", name, n,
                                    len(log), [Contender("kafkalog", lambda log=log: engine.decode_columnar(log)),
                                               Contender("aiokafka", _peer_read(peers["aiokafka"][1], log))],
                                    targets={"aiokafka": 6.0}))
    return out


def caller_records(n: int, value_size: int, seed: int = 4) -> list[tuple]:
    """n records with headers `[]` built one at a time in the order a producer's caller builds them (its key, its
    value, its header list, then the tuple), with nothing else allocated in between: unlike make_records, whose
    intermediate objects leave each record's parts apart in memory."""
    rng = random.Random(seed)
    payload = rng.randbytes(value_size * 64)
    out = []
    for i in range(n):
        key = b"%016d" % rng.randrange(10**15)
        at = (i * 131) % (len(payload) - value_size)
        out.append((key, payload[at:at + value_size], [], 1_700_000_000_000 + i))
    return out


def _caller_order_suite(quick: bool) -> list[Workload]:
    """Encode 1 MiB batches of 8,192 records of 100 B values, headers [], from records built as a caller builds them
    (caller_records), as many batches as the other rows encode."""
    aio = _peers()["aiokafka"]
    batches = 2 if quick else 16
    chunks = [caller_records(8192, 100, seed=4 + i) for i in range(batches)]
    raw = sum(len(k) + len(v) for c in chunks for k, v, _, _ in c)
    return [Workload("codec encode", "100 B values, 1 MiB batches of 8,192 records built as a caller builds them, "
                     "headers []", 8192 * batches, raw, [
                         Contender("kafkalog", _ours_encode(chunks)),
                         Contender("aiokafka", _peer_encode(aio[0], chunks, 0))], targets={"aiokafka": 3.0})]


def _compression_suite(quick: bool, codec: str) -> list[Workload]:
    peers = _peers()
    total = (2 << 20) if quick else (16 << 20)
    records = make_records(total // 126, 100, seed=2, headers="[]")
    raw = sum(len(k) + len(v) for k, v, _, _ in records)
    chunks = chunk(records, 1 << 20, 100)
    log = b"".join(engine.encode_batch(c, compression=codec) for c in chunks)
    name = f"{codec}, 100 B values, 1 MiB batches, headers []"
    aio = peers["aiokafka"]
    return [
        Workload("codec encode", name, len(records), raw, [
            Contender("kafkalog", _ours_encode(chunks, codec)),
            Contender("aiokafka", _peer_encode(aio[0], chunks, CODEC_IDS[codec]))]),
        Workload("codec decode, read every field", name, len(records), raw, [
            Contender("kafkalog", _ours_read(log)), Contender("aiokafka", _peer_read(aio[1], log))]),
    ]


def suites(quick: bool) -> list[Callable[[], list[Workload]]]:
    """The codec suites: one per input set (value size, compression), then CRC-32C."""
    return ([lambda size=size: _size_suite(quick, size) for size in (100, 1024)] + [lambda: _caller_order_suite(quick)]
            + [lambda codec=codec: _compression_suite(quick, codec) for codec in ("gzip", "snappy", "lz4", "zstd")]
            + [crc_workloads])


def crc_workloads() -> list[Workload]:
    import crc32c as crc32c_package

    out = []
    for size, label in ((64 << 10, "64 KiB"), (4 << 20, "4 MiB")):
        data = random.Random(3).randbytes(size)
        out.append(Workload("CRC-32C", f"{label} buffers", 1, size, [
            Contender("kafkalog", lambda data=data: engine.crc32c(data)),
            Contender("crc32c package", lambda data=data: crc32c_package.crc32c(data))],
            targets={"crc32c package": 1.0}))
    return out


def record_size_curve(quick: bool) -> dict:
    """Encode and decode-and-read-every-field MB/s against value size (10 B .. 100 KiB), kafkalog vs aiokafka, with
    the same inputs and work as the codec rows; each size's inputs are freed before the next is built."""
    import gc

    from bench.runner import _time_call

    aio = _peers()["aiokafka"]
    sizes = [10, 100, 1024, 10 << 10, 100 << 10]
    names = ("kafkalog encode", "aiokafka encode", "kafkalog decode, read every field",
             "aiokafka decode, read every field", "kafkalog columnar")
    curve = {"value_size": sizes, "series": {name: [] for name in names}}
    total = (1 << 20) if quick else (8 << 20)
    for size in sizes:
        records = make_records(max(8, total // (size + 26)), size, seed=size, headers="[]")
        raw = sum(len(k) + len(v) for k, v, _, _ in records)
        chunks = chunk(records, 1 << 20, size)
        log = b"".join(engine.encode_batch(c) for c in chunks)
        calls = dict(zip(names, (_ours_encode(chunks), _peer_encode(aio[0], chunks, 0), _ours_read(log),
                                 _peer_read(aio[1], log), lambda log=log: engine.decode_columnar(log))))
        for name, call in calls.items():
            gc.collect()
            curve["series"][name].append(raw / _time_call(call, 0.05 if quick else 0.3) / 1e6)
        del records, chunks, log, calls
    return curve
