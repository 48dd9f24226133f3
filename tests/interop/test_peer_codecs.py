"""kafkalog's batches against independent RecordBatch implementations: kafka-python (pure Python)
and aiokafka (its Cython reader/builder). Both directions, every codec, transactional and control."""
from __future__ import annotations

import random

import pytest

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _peers():
    from aiokafka.record import default_records as aio
    from kafka.record import default_records as kp

    assert not aio.NO_EXTENSIONS, "aiokafka's Cython records must be the peer"
    return {
        "kafka-python": (kp.DefaultRecordBatchBuilder, kp.DefaultRecordBatch),
        "aiokafka": (aio.DefaultRecordBatchBuilder, aio.DefaultRecordBatch),
    }


PEERS = _peers()


def _records(seed: int, n: int = 40):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else rng.randbytes(rng.randint(0, 24))
        # compressible values: kafka-python stores a batch uncompressed when compression does not shrink it
        value = None if i % 11 == 5 else rng.randbytes(4) * rng.choice([0, 3, 25, 256])
        headers = [("h%d" % j, None if j == 1 else rng.randbytes(rng.randint(0, 5))) for j in range(i % 3)]
        out.append((key, value, headers, 1_700_000_000_000 + rng.randint(-1000, 1000)))
    return out


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("compression", CODECS)
@pytest.mark.parametrize("producer", [None, (4242, 3, 17, False), (4243, 1, 0, True)])
def test_peers_read_what_kafkalog_writes(codec, peer, compression, producer):
    recs = _records(hash((compression, producer)) & 0xFFFF)
    kwargs = {"compression": compression, "base_offset": 1000}
    if producer:
        pid, epoch, seq, txn = producer
        kwargs.update(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)
    data = codec.encode_batch(recs, **kwargs)
    reader = PEERS[peer][1](data)
    assert reader.validate_crc()
    assert reader.base_offset == 1000 and reader.next_offset == 1000 + len(recs)
    assert reader.compression_type == CODECS[compression]
    assert reader.producer_id == (producer[0] if producer else -1)
    assert reader.is_transactional == bool(producer and producer[3])
    assert reader.max_timestamp == max(r[3] for r in recs)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in reader]
    assert got == [(1000 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs)]


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("kind", ["commit", "abort"])
def test_peers_read_kafkalog_control_batches(codec, peer, kind):
    data = codec.encode_control_batch(kind, base_offset=77, producer_id=9, producer_epoch=2,
                                      coordinator_epoch=4, timestamp_ms=1_700_000_000_123)
    reader = PEERS[peer][1](data)
    assert reader.validate_crc() and reader.is_control_batch and reader.is_transactional
    (rec,) = list(reader)
    assert rec.offset == 77 and rec.timestamp == 1_700_000_000_123
    assert rec.key == (b"\x00\x00\x00\x01" if kind == "commit" else b"\x00\x00\x00\x00")
    assert rec.value == b"\x00\x00\x00\x00\x00\x04"


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("compression", CODECS)
@pytest.mark.parametrize("producer", [None, (4242, 3, 17, False), (4243, 1, 0, True)])
def test_kafkalog_reads_what_peers_write(codec, peer, compression, producer):
    recs = _records(17 + CODECS[compression])
    pid, epoch, seq, txn = producer or (-1, -1, -1, False)
    builder = PEERS[peer][0](2, CODECS[compression], txn, pid, epoch, seq, 10 << 20)
    for i, (k, v, h, ts) in enumerate(recs):
        assert builder.append(i, ts, k, v, h) is not None
    data = bytes(builder.build())
    (batch,) = codec.iter_batches(data)
    assert batch.is_valid()
    assert batch.compression == compression
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert batch.is_transactional == txn
    assert batch.last_sequence == (seq + len(recs) - 1 if seq >= 0 else -1)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    assert got == [(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs)]
    cols = codec.decode_columnar(data, include_headers=True)
    assert [(d["key"], d["value"], d["headers"] or []) for d in cols.to_pylist()] == [(k, v, h) for k, v, h, _ in recs]


@pytest.mark.parametrize("peer,leader_epoch", [("kafka-python", 0), ("aiokafka", -1)])
def test_uncompressed_bytes_equal_the_peers(codec, peer, leader_epoch):
    """Same records and header fields give identical bytes (the peers differ only in the
    partitionLeaderEpoch they stamp: kafka-python 0, aiokafka -1)."""
    recs = _records(5, 25)
    builder = PEERS[peer][0](2, 0, False, -1, -1, -1, 10 << 20)
    for i, (k, v, h, ts) in enumerate(recs):
        builder.append(i, ts, k, v, h)
    theirs = bytes(builder.build())
    ours = codec.encode_batch(recs, partition_leader_epoch=leader_epoch)
    assert ours == theirs


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("target", CODECS)
@pytest.mark.parametrize("source", CODECS)
def test_peers_read_batches_a_leader_reencoded(codec, peer, source, target):
    """A batch a leader stored in its topic's codec (compression.type) is read back by both peers: the records,
    their offsets from the assigned base, the producer fields and the transactional flag."""
    recs = _records(31 + CODECS[source])
    data = codec.encode_batch(recs, compression=source, producer_id=4243, producer_epoch=1, base_sequence=9,
                              transactional=True)
    pieces, next_offset, max_ts, _, _ = codec.prepare_leader_append(data, 500, 4, -1, 10 << 20, False, None,
                                                                    (CODECS[target], None, None))
    reader = PEERS[peer][1](b"".join(bytes(p) for p in pieces))
    assert reader.validate_crc() and reader.compression_type == CODECS[target]
    assert (reader.base_offset, reader.next_offset, next_offset) == (500, 500 + len(recs), 500 + len(recs))
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence, reader.is_transactional) == (
        4243, 1, 9, True)
    assert reader.max_timestamp == max_ts == max(r[3] for r in recs)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in reader]
    assert got == [(500 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs)]
