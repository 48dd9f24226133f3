"""The corruption matrix: after a clean close, one file of the directory is damaged (a bit flipped in each
header field of a closed segment's batch, garbage in each index and checkpoint, a truncated snapshot).
The engine must open, serve no wrong record (offsets strictly increasing, every served record equal to
what was written, or a typed error), and say in its recovery notes what it repaired."""
from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

import engine
from engine.common.errors import CorruptRecordError, KafkaError
from engine.record import codec
from engine.segments.partition_reader import PartitionReader

TOPIC = "t"
RECORDS = 400
PER_BATCH = 10
# header fields outside (or defining) the CRC's reach: (name, offset in the batch, size)
HEADER_FIELDS = [("base_offset", 0, 8), ("length", 8, 4), ("leader_epoch", 12, 4), ("magic", 16, 1), ("crc", 17, 4)]


def _open(path):
    return engine.open(str(path), clock=engine.ManualClock(), background=False)


def _write(path: Path) -> dict[int, bytes]:
    """400 records in batches of 10 over several segments, closed cleanly; their values by offset."""
    written = {}
    with _open(path) as e:
        e.create_topic(TOPIC, config={"segment.bytes": 3000, "index.interval.bytes": 200})
        log = e.log(TOPIC, 0)
        for b in range(RECORDS // PER_BATCH):
            values = [f"v{b * PER_BATCH + i}".encode() * 5 for i in range(PER_BATCH)]
            info = log.append_as_leader(engine.encode_batch([(None, v, None, 1_000 + b) for v in values]))
            written.update({info.first_offset + i: v for i, v in enumerate(values)})
    return written


def _served(path: Path) -> tuple[list[tuple[int, bytes]], KafkaError | None, list[str]]:
    """Every record a consumer is served from offset 0, the typed error that stopped it (if any), and the
    engine's recovery notes."""
    out, error = [], None
    with _open(path) as e:
        notes = e.recovery_notes()
        c = e.consumer(auto_offset_reset="earliest")
        c.assign([engine.TopicPartition(TOPIC, 0)])
        try:
            while True:
                got = c.poll(max_records=1000)
                if not got:
                    break
                out += [(r.offset, r.value) for recs in got.values() for r in recs]
        except KafkaError as exc:
            error = exc
        notes += e.recovery_notes()
    return out, error, notes


def _read_directly(path: Path) -> tuple[list[tuple[int, bytes]], KafkaError | None, list[str]]:
    """What a Spark executor is served (segments.partition_reader chunks, decoded by the columnar decoder),
    without an engine, so without recovery: the reader must refuse corruption itself."""
    out, error = [], None
    reader = PartitionReader(str(path / f"{TOPIC}-0"))
    try:
        for chunk in reader.chunks(0, 2**63 - 1):
            cols = codec.decode_columnar(chunk.data, start_offset=0, position=chunk.position, source=reader.dir)
            out += [(r["offset"], r["value"]) for r in cols.to_pylist()]
    except KafkaError as exc:
        error = exc
    finally:
        reader.close()
    return out, error, []


READERS = {"consumer": _served, "partition-reader": _read_directly}


def _check_served(served, written) -> None:
    offsets = [o for o, _ in served]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for offset, value in served:
        assert written.get(offset) == value, f"offset {offset} served a record that was never written there"


def _closed_segment_batches(path: Path) -> tuple[Path, list]:
    logs = sorted((path / f"{TOPIC}-0").glob("*.log"))
    assert len(logs) >= 3
    seg = logs[1]  # neither the first nor the active one
    return seg, list(engine.iter_batches(seg.read_bytes()))


@pytest.mark.parametrize("via", READERS)
@pytest.mark.parametrize("field, start, size", HEADER_FIELDS, ids=[f[0] for f in HEADER_FIELDS])
def test_bit_flip_in_a_closed_segments_batch_header(tmp_path, field, start, size, via):
    rng = random.Random(f"{field}")
    trials = 0
    for bit in range(size * 8):
        path = tmp_path / f"{field}-{bit}"
        written = _write(path)
        seg, batches = _closed_segment_batches(path)
        batch = rng.choice(batches)
        data = bytearray(seg.read_bytes())
        data[batch.position + start + bit // 8] ^= 1 << (bit % 8)
        seg.write_bytes(data)
        served, error, notes = READERS[via](path)
        _check_served(served, written)
        if error is None:
            # the flip went unnoticed only where it changes nothing served (never a wrong record)
            assert len(served) == RECORDS or field == "length", (field, bit, len(served))
        else:
            # a broken length misframes what follows, a broken magic reads as another format: any typed error
            # naming the file will do for those two
            assert (isinstance(error, CorruptRecordError) or field in ("length", "magic")) and error.file, error
        trials += 1
    assert trials == size * 8


@pytest.mark.parametrize("via", READERS)
def test_a_flipped_base_offset_is_never_served_as_an_offset(tmp_path, via):
    """The probe behind the issue: a flipped high bit of a closed segment's baseOffset used to serve records
    at offsets like 288230376151711815."""
    path = tmp_path / "high-bit"
    written = _write(path)
    seg, batches = _closed_segment_batches(path)
    data = bytearray(seg.read_bytes())
    data[batches[0].position] ^= 0x04
    seg.write_bytes(data)
    served, error, _ = READERS[via](path)
    _check_served(served, written)
    assert isinstance(error, CorruptRecordError) and error.offset is not None and max(o for o, _ in served) < 2**31


def _garbage(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


@pytest.mark.parametrize("which", ["closed", "active"])
@pytest.mark.parametrize("kind", [".index", ".timeindex"])
def test_garbage_in_an_index_is_rebuilt(tmp_path, kind, which):
    rng = random.Random(kind + which)
    for trial in range(8):
        path = tmp_path / f"{which}{kind}-{trial}"
        written = _write(path)
        indexes = sorted((path / f"{TOPIC}-0").glob(f"*{kind}"))
        target = indexes[1] if which == "closed" else indexes[-1]
        size = max(target.stat().st_size, 8) if trial % 2 else rng.randrange(1, 200)
        target.write_bytes(_garbage(rng, size))
        direct, direct_error, _ = _read_directly(path)  # read-only: it scans past an index it cannot trust
        assert direct_error is None and direct == sorted(written.items())
        served, error, notes = _served(path)
        _check_served(served, written)
        assert error is None and len(served) == RECORDS
        if kind == ".index":  # a wrong time index steers no fetch; it is rebuilt when it is opened
            assert any("rebuilt the indexes" in n or "re-validated" in n for n in notes), notes


CHECKPOINTS = ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint",
               f"{TOPIC}-0/leader-epoch-checkpoint", f"{TOPIC}-0/partition.metadata", ".kafka_cleanshutdown"]


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.parametrize("damage", ["random", "non-utf8", "plausible"])
def test_garbage_in_a_checkpoint_file(tmp_path, name, damage):
    path = tmp_path / "cp"
    written = _write(path)
    target = path / name
    rng = random.Random(name + damage)
    if damage == "random":
        target.write_bytes(_garbage(rng, 40))
    elif damage == "non-utf8":
        target.write_bytes(b"0\n1\n\xff\xfe 0 12\n")
    else:  # well-formed but wrong: epochs and offsets that do not match the log
        target.write_text(f"0\n1\n{TOPIC} 0 7\n" if "offset" in name else "0\n2\n3 0\n9 17\n")
    served, error, notes = _served(path)
    _check_served(served, written)
    plausible_start = damage == "plausible" and name == "log-start-offset-checkpoint"
    # a log start within the log reads as a delete_records up to it; every other damage loses no record
    assert error is None and [o for o, _ in served] == list(range(7 if plausible_start else 0, RECORDS)), error
    if name != ".kafka_cleanshutdown" and not (damage == "plausible" and "offset-checkpoint" in name):
        # (a plausible high watermark or log start is not damage anyone can tell; a lost marker only
        # costs a recovery)
        assert notes, f"nothing reported for damaged {name}"


def test_a_truncated_producer_snapshot_is_replaced_from_the_log(tmp_path):
    path = tmp_path / "snap"
    with _open(path) as e:
        e.create_topic(TOPIC, config={"segment.bytes": 3000})
        p = e.producer(enable_idempotence=True, linger_ms=0, batch_size=500)
        futures = [p.send(TOPIC, value=b"x" * 40, partition=0) for _ in range(100)]
        p.flush()
        assert [f.get(timeout=1).offset for f in futures] == list(range(100))
        pid = p.producer_id
        p.close()
    snaps = sorted((path / f"{TOPIC}-0").glob("*.snapshot"))
    assert snaps
    data = snaps[-1].read_bytes()
    snaps[-1].write_bytes(data[:len(data) // 2])
    with _open(path) as e:
        lg = e.log(TOPIC, 0)
        assert any("corrupt producer snapshot" in n for n in e.recovery_notes())
        assert lg.producer_state.producers[pid].last_seq == 99  # rebuilt from the log
        assert not os.path.exists(snaps[-1]) or snaps[-1].read_bytes() != data[:len(data) // 2]


def test_a_truncated_active_segment_tail_after_clean_close_is_recovered(tmp_path):
    """A clean-shutdown marker is no excuse: the log end must match the checkpointed one."""
    path = tmp_path / "tail"
    written = _write(path)
    active = sorted((path / f"{TOPIC}-0").glob("*.log"))[-1]
    data = bytearray(active.read_bytes())
    last = list(engine.iter_batches(bytes(data)))[-1]
    struct.pack_into(">q", data, last.position, last.base_offset + 10**9)
    active.write_bytes(data)
    served, error, notes = _served(path)
    _check_served(served, written)
    assert error is None and len(served) == RECORDS - PER_BATCH
    assert any("was closed at" in n for n in notes)


def test_a_corrupt_catalogue_stops_open_typed_and_moving_it_aside_adopts_the_directory(tmp_path):
    """kafkalog.metadata holds the topics' configs (a retention override among them): the engine refuses to
    guess them, names the file, writes nothing, and opens once the file is moved aside, every record kept."""
    from engine.common.errors import KafkaStorageError

    path = tmp_path / "cat"
    written = _write(path)
    (path / "kafkalog.metadata").write_bytes(b'{"topics": {"t": ')
    before = {p: p.stat().st_mtime_ns for p in path.rglob("*")}
    with pytest.raises(KafkaStorageError, match="move it aside") as info:
        _open(path)
    assert info.value.file.endswith("kafkalog.metadata")
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*")} == before
    os.rename(path / "kafkalog.metadata", path / "kafkalog.metadata.bad")
    served, error, _ = _served(path)
    assert error is None and served == sorted(written.items())
