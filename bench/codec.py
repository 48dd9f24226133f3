"""Codec workloads: RecordBatch encode, decode to objects, columnar decode and CRC-32C, against
aiokafka's Cython builder/reader, kafka-python's pure-Python ones and the `crc32c` package.

Records have 16-byte keys and 100-byte or 1-KiB values; batches are 16 KiB or 1 MiB, as a
producer would fill them. Every contender processes the same records or the same bytes.
"""
from __future__ import annotations

import random

import engine
from bench.runner import Contender, Workload

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_records(n: int, value_size: int, seed: int = 1) -> list[tuple]:
    """n records: 16-byte keys, values of `value_size` bytes (half random, half text: compressible)."""
    rng = random.Random(seed)
    words = [b"kafka", b"log", b"segment", b"offset", b"batch", b"index", b"record", b"topic"]
    out = []
    for i in range(n):
        text = b" ".join(rng.choice(words) for _ in range(value_size // 6 + 1))
        value = (rng.randbytes(value_size // 2) + text)[:value_size]
        out.append((b"%016d" % rng.randrange(10**15), value, None, 1_700_000_000_000 + i))
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
                b.append(i, ts, k, v, [])
            out.append(b.build())
        return out
    return call


def _peer_decode(memory_cls, log):
    def call():
        out = []
        mr = memory_cls(log)
        while (batch := mr.next_batch()) is not None:
            out.append(list(batch))
        return out
    return call


def workloads(quick: bool) -> list[Workload]:
    peers = _peers()
    total = (2 << 20) if quick else (16 << 20)
    out = []
    for value_size in (100, 1024):
        records = make_records(total // (value_size + 26), value_size)
        raw = sum(len(k) + len(v) for k, v, _, _ in records)
        for batch_bytes, label in ((16 << 10, "16 KiB"), (1 << 20, "1 MiB")):
            chunks = chunk(records, batch_bytes, value_size)
            log = b"".join(engine.encode_batch(c) for c in chunks)
            name = f"{value_size} B values, {label} batches"
            big = value_size == 100
            out.append(Workload("codec encode", name, len(records), raw, [
                Contender("kafkalog", lambda chunks=chunks: [engine.encode_batch(c) for c in chunks]),
                *(Contender(p, _peer_encode(peers[p][0], chunks, 0)) for p in peers)],
                targets={"aiokafka": 3.0} if big else {}))
            out.append(Workload("codec decode to objects", name, len(records), len(log), [
                Contender("kafkalog", lambda log=log: [b.records() for b in engine.iter_batches(log)]),
                *(Contender(p, _peer_decode(peers[p][1], log)) for p in peers)],
                targets={"aiokafka": 2.0}))
            out.append(Workload("codec columnar decode", name, len(records), len(log), [
                Contender("kafkalog", lambda log=log: engine.decode_columnar(log)),
                Contender("aiokafka", _peer_decode(peers["aiokafka"][1], log))],
                targets={"aiokafka": 10.0}))
    records = make_records(total // 126, 100, seed=2)
    raw = sum(len(k) + len(v) for k, v, _, _ in records)
    chunks = chunk(records, 1 << 20, 100)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        log = b"".join(engine.encode_batch(c, compression=codec) for c in chunks)
        name = f"{codec}, 100 B values, 1 MiB batches"
        out.append(Workload("codec encode", name, len(records), raw, [
            Contender("kafkalog", lambda codec=codec: [engine.encode_batch(c, compression=codec) for c in chunks]),
            Contender("aiokafka", _peer_encode(peers["aiokafka"][0], chunks, CODEC_IDS[codec]))]))
        out.append(Workload("codec decode to objects", name, len(records), raw, [
            Contender("kafkalog", lambda log=log: [b.records() for b in engine.iter_batches(log)]),
            Contender("aiokafka", _peer_decode(peers["aiokafka"][1], log))]))
        out.append(Workload("codec columnar decode", name, len(records), raw, [
            Contender("kafkalog", lambda log=log: engine.decode_columnar(log)),
            Contender("aiokafka", _peer_decode(peers["aiokafka"][1], log))]))
    out.extend(crc_workloads())
    return out


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
    """Encode and decode MB/s against value size (10 B .. 100 KiB), kafkalog vs aiokafka."""
    from bench.runner import _time_call

    peers = _peers()
    sizes = [10, 100, 1024, 10 << 10, 100 << 10]
    curve = {"value_size": sizes, "series": {}}
    total = (1 << 20) if quick else (8 << 20)
    for name in ("kafkalog encode", "aiokafka encode", "kafkalog decode", "aiokafka decode",
                 "kafkalog columnar"):
        curve["series"][name] = []
    for size in sizes:
        records = make_records(max(8, total // (size + 26)), size, seed=size)
        raw = sum(len(k) + len(v) for k, v, _, _ in records)
        chunks = chunk(records, 1 << 20, size)
        log = b"".join(engine.encode_batch(c) for c in chunks)
        calls = {
            "kafkalog encode": lambda: [engine.encode_batch(c) for c in chunks],
            "aiokafka encode": _peer_encode(peers["aiokafka"][0], chunks, 0),
            "kafkalog decode": lambda: [b.records() for b in engine.iter_batches(log)],
            "aiokafka decode": _peer_decode(peers["aiokafka"][1], log),
            "kafkalog columnar": lambda: engine.decode_columnar(log),
        }
        for name, call in calls.items():
            curve["series"][name].append(raw / _time_call(call, 0.05 if quick else 0.3) / 1e6)
    return curve
