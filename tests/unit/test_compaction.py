"""Log compaction (segments.cleaner, engine.log.log_cleaner): against a model of the latest value per key, the
Kafka-written `compacted-0` vector, Kafka's offset-map layout, a map smaller than the log, the internal topics,
the background cleaner and the `kafkalog compact` tool. The kill -9 trials are in tests/crash/test_cleaner_kill.py.
`KAFKALOG_COMPACTION_MODEL_RUNS` seeds run the model test (CI 8; `make fuzz` 100)."""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import time

import pytest

import engine
from engine import (
    CleaningAbortedError,
    CorruptRecordError,
    InvalidConfigurationError,
    InvalidRecordError,
    ManualClock,
    TopicPartition,
)
from engine.record import twins
from engine.tools import cli, dump_log
from engine.segments import offset_map
from tests import vectors
from tests.conftest import IMPLEMENTATIONS
from tests.log_checks import read_log, verify_index_files


MODEL_RUNS = int(os.environ.get("KAFKALOG_COMPACTION_MODEL_RUNS", "8"))
T0 = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": 10_000}


def latest(records) -> dict:
    """key -> value of the last record per key (None for a tombstone), in offset order."""
    out = {}
    for _, key, value in sorted(records):
        out[key] = value
    return out




# --- the model ----------------------------------------------------------------------------------------------------
def _write(e, rng, clock, model: dict, committed: list, aborted: set, n: int, tx) -> None:
    plain = e.producer(batch_size=rng.choice([150, 400, 2000]), linger_ms=0)
    for i in range(n):
        key = b"k%d" % rng.randrange(rng.choice([5, 40]))
        if tx is not None and rng.random() < 0.15:
            tx.begin_transaction()
            sent = [(key + b"-t%d" % j, b"tx%d-%d" % (i, j)) for j in range(rng.randint(1, 3))]
            futures = [tx.send("t", key=k, value=v) for k, v in sent]
            if rng.random() < 0.5:
                tx.commit_transaction()
                for f, (k, v) in zip(futures, sent):
                    model[k] = v
                    committed.append((f.get().offset, k, v))
            else:
                tx.abort_transaction()
                aborted.update(v for _, v in sent)
        else:
            value = None if rng.random() < 0.2 else b"v%d" % rng.randrange(10**6)
            offset = plain.send("t", key=key, value=value).get().offset
            model[key] = value
            committed.append((offset, key, value))
        clock.advance(rng.randint(0, 30))
        if rng.random() < 0.03:
            e.log("t", 0).roll()
    plain.close()


@pytest.mark.parametrize("seed", range(MODEL_RUNS))
def test_compaction_matches_the_latest_value_per_key(tmp_path, seed):
    rng = random.Random(seed)
    clock = ManualClock(T0)
    dedupe = rng.choice([24 * 30, 1 << 20])  # some runs need several passes of a small map
    with engine.open(tmp_path, clock=clock, background=False,
                     cleaner_config={"log_cleaner_dedupe_buffer_size": dedupe}) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": rng.choice([700, 2000, 6000])})
        tx = None
        if rng.random() < 0.7:
            tx = e.producer(transactional_id="tx", linger_ms=0)
            tx.init_transactions()
        model, committed, aborted = {}, [], set()
        _write(e, rng, clock, model, committed, aborted, rng.randint(100, 400), tx)
        e.log("t", 0).roll()
        before = read_log(e, "t")
        assert before == sorted(committed)
        positions = sorted(rng.sample(range(e.log("t", 0).log_end_offset + 1), 4))

        e.compact("t")
        after = read_log(e, "t")
        assert set(after) <= set(before)  # survivors keep their offsets and contents
        assert latest(after) == model
        assert len(after) == len(model)  # everything below the first uncleanable offset is compacted away
        everything = read_log(e, "t", "read_uncommitted")
        assert not [r for r in everything if r[2] in aborted], "aborted data survived a clean"
        for p in positions:  # a consumer at any position before the clean reads on correctly
            seen = [r for r in before if r[0] < p] + read_log(e, "t", start=p)
            assert latest(seen) == model, f"position {p}"
        first_end = e.log("t", 0).cleaner_checkpoint
        tombstones = {r for r in after if r[2] is None and r[0] < first_end}

        clock.advance(COMPACT["delete.retention.ms"] + 1)  # past every horizon the first clean set
        _write(e, rng, clock, model, committed, aborted, 30, tx)
        e.log("t", 0).roll()
        e.compact("t")
        final = read_log(e, "t")
        assert set(final) <= set(committed)
        assert {k: v for k, v in latest(final).items() if v is not None} == \
            {k: v for k, v in model.items() if v is not None}
        assert not tombstones & set(final), "tombstones outlived their delete horizon"
        assert all(model[k] is None for k, v in latest(final).items() if v is None)
    _check_compacted_files(tmp_path, "t-0")


def _check_compacted_files(directory, partition: str) -> None:
    """dump-log's deep iteration and index checks, and `kafkalog verify`, find nothing wrong."""
    verify_index_files(directory / partition)
    logs = sorted(str(f) for f in (directory / partition).iterdir() if f.name.endswith(".log"))
    out = io.StringIO()
    assert dump_log.dump(logs, deep=True, print_data=True, out=out) == 0, out.getvalue()[-2000:]
    assert cli.main(["verify", str(directory)]) == 0


def test_keyless_records_are_refused_by_a_compacted_topic(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t", config=COMPACT)
        p = e.producer(linger_ms=0)
        p.send("t", key=b"k", value=b"1").get()
        with pytest.raises(InvalidRecordError, match="without a key"):
            p.send("t", value=b"no key").get()
        assert read_log(e, "t") == [(0, b"k", b"1")]


def test_cleanup_policy_values(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        for policy in ("compact", "delete", "compact,delete", "delete,compact"):
            e.create_topic(f"t{len(policy)}{policy[0]}", config={"cleanup.policy": policy})
        for bad in ("", "compacted", "delete,delete", 3):
            with pytest.raises(InvalidConfigurationError):
                e.create_topic("bad", config={"cleanup.policy": bad})
        with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
            e.compact("t6d")  # delete only: nothing to compact
        with pytest.raises(InvalidConfigurationError):
            e.create_topic("bad", config={"min.cleanable.dirty.ratio": 1.5})


def test_compact_and_delete_applies_retention_compact_alone_does_not(tmp_path):
    clock = ManualClock(T0)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        for name, policy in (("c", "compact"), ("cd", "compact,delete")):
            e.create_topic(name, config={"cleanup.policy": policy, "retention.ms": 1000})
            p = e.producer(linger_ms=0)
            p.send(name, key=b"k", value=b"old").get()
            e.log(name, 0).roll()
            p.send(name, key=b"j", value=b"new").get()
        clock.advance(5000)
        e._logs.cleanup_logs()
        assert e.log("c", 0).log_start_offset == 0 and e.log("cd", 0).log_start_offset == 2


# --- several passes, internal topics, the thread, the tool -----------------------------------------------------
def test_a_log_four_times_the_offset_map_compacts_in_several_passes(tmp_path):
    keys = 4 * 90  # the map holds int(24 * 100 / 24 * 0.9) = 90 keys per pass
    with engine.open(tmp_path, background=False, cleaner_config={"log_cleaner_dedupe_buffer_size": 24 * 100}) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 3000})
        p = e.producer(linger_ms=0, batch_size=500)
        model = {}
        rng = random.Random(3)
        for i in range(3 * keys):
            key = b"key-%d" % (rng.randrange(keys) if i >= keys else i)
            p.send("t", key=key, value=b"%d" % i)
            model[key] = b"%d" % i
        p.flush()
        e.log("t", 0).roll()
        stats = e.compact("t")[0]
        assert stats.keys >= keys and stats.map_slots == 100  # more keys mapped than one pass can hold
        assert latest(read_log(e, "t")) == model and len(read_log(e, "t")) == keys
        assert e.log("t", 0).cleaner_checkpoint == e.log("t", 0).log_end_offset
    _check_compacted_files(tmp_path, "t-0")


def _vector_records() -> list[tuple]:
    """(offset, key, value) of the vector's data records, from its Kafka-class dump."""
    out = []
    for batch, records in vectors.segments(vectors.expected("compacted-0"))["00000000000000000000.log"]["batches"]:
        if not batch["attributesDecoded"]["isControl"]:
            out += [(r["offset"], vectors.b64(r["keyB64"]), vectors.b64(r["valueB64"])) for r in records]
    return out


def test_the_kafka_written_compacted_vector_opens_compacts_and_reads_as_kafka_wrote_it(tmp_path):
    part = tmp_path / "compacted-0"
    shutil.copytree(vectors.case_dir("compacted-0"), part, ignore=lambda d, names: [
        n for n in names if n.endswith((".txt", ".json", ".jsonl"))])
    for f in part.iterdir():
        f.chmod(0o644)
    original = {f.name: f.read_bytes() for f in part.iterdir()}
    records = _vector_records()
    clock = ManualClock(1731900010000)  # before the vector's delete horizons
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.alter_topic_config("compacted", {"cleanup.policy": "compact"})
        assert e.compact("compacted") == {0: None}  # one segment, the active one: nothing is cleanable
    # the same records, byte for byte (opening a directory without Kafka's clean-shutdown marker re-indexes it)
    assert (part / "00000000000000000000.log").read_bytes() == original["00000000000000000000.log"]
    with engine.open(tmp_path, clock=clock, background=False) as e:
        assert read_log(e, "compacted") == records  # tombstones and horizons read as Kafka reads them

        # Kafka's cleaned section is [0, 74); the head 74-79 is dirty: a clean folds it into the rest
        e.log("compacted", 0).roll()
        e.log("compacted", 0).cleaner_checkpoint = 74
        e.compact("compacted")
        after = read_log(e, "compacted")
        assert set(after) <= set(records) and latest(after) == latest(records)
        assert [r for r in after if r[0] < 74 and r[1] in {b"k1", b"k2", b"k3", b"k4", b"k5"}] == []
        horizons = {b.base_offset: b.delete_horizon_ms for b in e.log("compacted", 0).segments[0].batches()}
        assert horizons[30] == 1731986400000  # kept as Kafka set it
        assert (34, b"k7", None) in after  # a tombstone before its horizon stays
        assert 20 in horizons and 70 in horizons  # producers 900 and 901 keep their empty batches
    _check_compacted_files(tmp_path, "compacted-0")


def test_internal_topics_are_compacted_and_keep_their_meaning(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        c = e.consumer("t", group_id="g", enable_auto_commit=False)
        c.poll(timeout_ms=0)
        for i in range(50):
            c.commit({TopicPartition("t", 0): engine.OffsetAndMetadata(i, "")})
        c.close()
        offsets = [slot.load() for (topic, _), slot in e._logs.slots().items() if topic == "__consumer_offsets"]
        busy = max(offsets, key=lambda lg: lg.log_end_offset)
        assert busy.config.compact and busy.log_end_offset >= 50
        busy.roll()
        before = busy.size_in_bytes()
        stats = e.compact("__consumer_offsets")
        assert any(s is not None for s in stats.values()) and busy.size_in_bytes() < before / 4
        assert e.describe_topic("t")  # the engine goes on as before
    with engine.open(tmp_path, background=False) as e:
        assert e.committed("g", TopicPartition("t", 0)).offset == 49


def test_the_background_cleaner_compacts_a_dirty_log_by_itself(tmp_path):
    with engine.open(tmp_path, cleaner_config={"log_cleaner_backoff_ms": 20}) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 1000, "min.cleanable.dirty.ratio": 0.1})
        p = e.producer(linger_ms=0, batch_size=200)
        for i in range(400):
            p.send("t", key=b"k%d" % (i % 10), value=b"value-%d" % i)
        p.flush()
        lg = e.log("t", 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (lg.cleaner_checkpoint is None or
                                                e.describe_topic("t").partitions[0].dirty_ratio > 0.1):
            time.sleep(0.05)
        assert lg.cleaner_checkpoint is not None, "the cleaner thread never cleaned the dirty log"
        assert e.describe_topic("t").partitions[0].dirty_ratio <= 0.1, "the cleaner thread left the log dirty"
        assert latest(read_log(e, "t")) == {b"k%d" % k: b"value-%d" % (390 + k) for k in range(10)}
    with engine.open(tmp_path, background=False) as e:  # the checkpoint survived the close
        assert e.log("t", 0).cleaner_checkpoint == lg.cleaner_checkpoint


def test_kafkalog_compact_prints_kafkas_summary(tmp_path, capsys):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t", 2, config={**COMPACT, "segment.bytes": 500})
        p = e.producer(linger_ms=0, batch_size=100)
        for i in range(200):
            p.send("t", key=b"k%d" % (i % 3), value=b"v%d" % i, partition=0)
        p.flush()
    assert cli.main(["compact", "t", "--data", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    zero, one = doc
    assert zero["cleaned"] and zero["recordsAfter"] < zero["recordsBefore"] and zero["bytesAfter"] < zero["bytesBefore"]
    assert one == {"partition": 1, "cleaned": False}
    assert cli.main(["compact", "t", "--data", str(tmp_path)]) == 0
    assert "t-0: nothing to clean" in capsys.readouterr().out
    assert cli.main(["topics", "--data", str(tmp_path), "--describe", "--topic", "t"]) == 0
    assert "DirtyRatio: 0.00" in capsys.readouterr().out
    assert cli.main(["compact", "nope", "--data", str(tmp_path)]) == 1


def test_a_clean_stops_at_the_last_stable_offset(tmp_path):
    clock = ManualClock(T0)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t", config=COMPACT)
        p = e.producer(linger_ms=0)
        tx = e.producer(transactional_id="open", linger_ms=0)
        tx.init_transactions()
        for i in range(10):
            p.send("t", key=b"k", value=b"early-%d" % i).get()
        e.log("t", 0).roll()
        tx.begin_transaction()
        tx.send("t", key=b"k", value=b"undecided").get()  # the LSO stays here until the transaction ends
        e.log("t", 0).roll()
        for i in range(10):
            p.send("t", key=b"k", value=b"late-%d" % i).get()
        e.log("t", 0).roll()
        lso = e.log("t", 0).last_stable_offset
        held = {s.base_offset: bytes(s.view()) for s in e.log("t", 0).segments if s.base_offset >= lso}
        e.compact("t")
        assert e.log("t", 0).cleaner_checkpoint <= lso
        assert {s.base_offset: bytes(s.view()) for s in e.log("t", 0).segments if s.base_offset >= lso} == held
        assert [r for r in read_log(e, "t", "read_uncommitted") if r[0] < lso] == [(9, b"k", b"early-9")]
        tx.commit_transaction()
        e.log("t", 0).roll()
        e.compact("t")
        assert read_log(e, "t") == [(20, b"k", b"late-9")]


def test_a_clean_is_abandoned_when_the_log_changes_under_it(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 600})
        p = e.producer(linger_ms=0, batch_size=100)
        for i in range(100):
            p.send("t", key=b"k%d" % (i % 4), value=b"v%d" % i).get()
        lg = e.log("t", 0)
        lg.roll()
        before = read_log(e, "t")

        def truncate(done, total):
            if lg.log_end_offset > 50:
                lg.truncate_to(50)  # a follower's truncation, while the map is built
        with pytest.raises(CleaningAbortedError):
            e.compact("t", progress=truncate)
        assert not [f for f in os.listdir(tmp_path / "t-0") if f.endswith(".cleaned")]
        assert read_log(e, "t") == [r for r in before if r[0] < 50]
        e.compact("t")
        assert latest(read_log(e, "t")) == latest([r for r in before if r[0] < 50])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("where", ["clean section", "dirty section"])
def test_a_clean_refuses_a_batch_whose_crc_fails_and_changes_nothing(tmp_path, monkeypatch, impl, where):
    """A batch whose bytes no longer match its CRC (one value byte changed), in the section an earlier clean left
    (which this clean's map pass does not read) or in the dirty section: the clean raises CorruptRecordError naming
    the segment and leaves every file as it was; it never writes the batch out with a CRC of its own."""
    monkeypatch.setattr(offset_map, "selected", twins.load("offset_map", impl))
    with engine.open(tmp_path, clock=ManualClock(T0), background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 600})
        with e.producer(linger_ms=0, batch_size=200) as p:
            for i in range(120):
                p.send("t", key=b"k%d" % (i % 9), value=b"value-%04d" % i)
                if i == 59:
                    p.flush()
                    e.log("t", 0).roll()
                    e.compact("t")  # the records so far become the clean section
        e.log("t", 0).roll()
        first_dirty = e.log("t", 0).cleaner_checkpoint
        assert 0 < first_dirty < 120
    part = tmp_path / "t-0"
    logs = {f: f.read_bytes() for f in sorted(part.iterdir()) if f.suffix == ".log"}
    target = next(f for f, data in logs.items() if (int(f.stem) < first_dirty) == (where == "clean section")
                  and b"value-" in data)
    data = bytearray(logs[target])
    at = data.index(b"value-") + 6
    data[at] ^= 0x01  # a digit becomes another: the framing holds, the CRC does not
    target.write_bytes(bytes(data))
    before = {f.name: f.read_bytes() for f in part.iterdir()}
    with engine.open(tmp_path, clock=ManualClock(T0), background=False) as e:
        with pytest.raises(CorruptRecordError) as info:
            e.compact("t")
        assert target.name in str(info.value)
    assert {f.name: f.read_bytes() for f in part.iterdir()} == before


@pytest.mark.parametrize("config", [{}, {"compression.type": "zstd"}, {"message.timestamp.type": "LogAppendTime"}])
def test_both_offset_maps_clean_a_log_to_the_same_bytes(tmp_path, monkeypatch, config):
    """The same log (transactions, tombstones, headers; compressed or LogAppendTime) cleaned with each
    implementation's offset map: the same segment bytes, reading as the model."""
    clock = ManualClock(T0)
    source = tmp_path / "source"
    model: dict = {}
    with engine.open(source, clock=clock, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 900, **config})
        tx = e.producer(transactional_id="tx", linger_ms=0)
        tx.init_transactions()
        rng = random.Random(11)
        _write(e, rng, clock, model, [], set(), 300, tx)
        with e.producer(linger_ms=0, batch_size=300) as p:
            for i in range(60):
                key = b"k%d" % rng.randrange(40)
                p.send("t", key=key, value=b"h%d" % i, headers=[("trace", b"%d" % i), ("a\udcff", None)],
                       timestamp_ms=T0 - 1000 + i % 7)  # not the append time
                model[key] = b"h%d" % i
        tx.close()
        e.log("t", 0).roll()
    cleaned = {}
    for impl in IMPLEMENTATIONS:
        monkeypatch.setattr(offset_map, "selected", twins.load("offset_map", impl))
        shutil.copytree(source, tmp_path / impl)
        with engine.open(tmp_path / impl, clock=clock, background=False,
                         cleaner_config={"log_cleaner_dedupe_buffer_size": 24 * 50}) as e:
            e.compact("t")
            assert latest(read_log(e, "t")) == model and len(read_log(e, "t")) == len(model)
        cleaned[impl] = {f.name: f.read_bytes() for f in (tmp_path / impl / "t-0").iterdir() if f.suffix == ".log"}
    assert all(files == cleaned[IMPLEMENTATIONS[0]] for files in cleaned.values())


def test_a_clean_starts_the_writeback_of_its_segments_as_it_writes_and_fsyncs_them_before_the_swap(tmp_path,
                                                                                                  monkeypatch):
    """After each piece of a cleaned segment it writes, the cleaner asks the file system to start writing it to the
    device (so the flush before the swap has little left to wait for); the flush still fsyncs the whole segment
    after its last piece, before the swap, and the log reads as the model."""
    from engine.segments import cleaner
    from engine.segments.fs import FileSystem

    class Recording(FileSystem):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, str, int]] = []

        def start_writeback(self, f) -> None:
            self.calls.append(("start", f.name, os.fstat(f.fileno()).st_size))
            super().start_writeback(f)

        def fsync(self, f) -> None:
            self.calls.append(("fsync", f.name, os.fstat(f.fileno()).st_size))
            super().fsync(f)

        def rename(self, src: str, dst: str) -> None:
            self.calls.append(("rename", src, 0))
            super().rename(src, dst)

    monkeypatch.setattr(cleaner, "WRITE_BYTES", 2000)
    fs, model = Recording(), {}
    with engine.open(tmp_path, clock=ManualClock(T0), background=False, fs=fs) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 30_000})
        with e.producer(linger_ms=0, batch_size=600) as p:
            for i in range(900):
                key, value = b"k%d" % (i % 200), b"value-%05d" % i
                p.send("t", key=key, value=value)
                model[key] = value
        e.log("t", 0).roll()
        fs.calls.clear()
        e.compact("t")
        assert latest(read_log(e, "t")) == model
    started = {name for op, name, _ in fs.calls if op == "start"}
    assert started and all(name.endswith(".log.cleaned") for name in started)
    for name in started:
        mine = [(op, size) for op, path, size in fs.calls if path == name]
        assert sum(op == "start" for op, _ in mine) >= 2 and mine[-1] == ("rename", 0)
        assert mine[-2] == ("fsync", max(size for _, size in mine))  # the whole segment, after the last start


def test_compaction_lags_and_the_dirty_ratio_decide_when_a_log_is_due(tmp_path):
    clock = ManualClock(T0)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("lag", config={**COMPACT, "min.compaction.lag.ms": 60_000})
        e.create_topic("idle", config={**COMPACT, "min.cleanable.dirty.ratio": 1.0, "max.compaction.lag.ms": 60_000})
        p = e.producer(linger_ms=0)
        for topic in ("lag", "idle"):
            for i in range(20):
                p.send(topic, key=b"k", value=b"%d" % i).get()
            e.log(topic, 0).roll()
        cleaner = e._logs.cleaner
        assert cleaner.cleanable_logs() == []  # too recent for "lag"; under its ratio and not yet late for "idle"
        assert e.compact("lag") == {0: None}   # on demand too, the minimum lag holds
        clock.advance(60_001)
        due = [(c.topic_partition, c.needs_compaction_now) for c in cleaner.cleanable_logs()]
        assert sorted(due) == [(("idle", 0), True), (("lag", 0), False)]
        assert cleaner.clean_filthiest() and cleaner.clean_filthiest() and not cleaner.clean_filthiest()
        assert read_log(e, "lag") == read_log(e, "idle") == [(19, b"k", b"19")]
        assert e.log("idle", 0).config.segment.segment_ms == 60_000  # a compacted log rolls by its max lag


def _batches(e, topic: str) -> list:
    return [b for seg in e.log(topic, 0).segments for b in seg.batches()]


def test_segments_are_grouped_and_tombstones_get_a_delete_horizon(tmp_path):
    clock = ManualClock(T0)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 400})
        p = e.producer(linger_ms=0, enable_idempotence=False)
        for i in range(60):
            p.send("t", key=b"k%d" % (i % 6), value=None if i == 57 else b"%d" % i).get()
        e.log("t", 0).roll()
        e.alter_topic_config("t", {"segment.bytes": 1 << 20})  # the cleaned output may now fill bigger segments
        stats = e.compact("t")[0]
        assert stats.segments_before > 1 and stats.segments_after == 1 and len(e.log("t", 0).segments) == 2
        with_tombstone = [b for b in _batches(e, "t") if any(r.value is None for r in b.records())]
        assert [b.delete_horizon_ms for b in with_tombstone] == [T0 + COMPACT["delete.retention.ms"]]
        marked = {b.base_offset for b in with_tombstone}
        assert all(not b.has_delete_horizon for b in _batches(e, "t") if b.base_offset not in marked)


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t", config=COMPACT)
        idempotent = e.producer(linger_ms=0)
        idempotent.send("t", key=b"k", value=b"first").get()
        pid = idempotent.producer_id
        plain = e.producer(linger_ms=0, enable_idempotence=False)
        plain.send("t", key=b"k", value=b"second").get()
        e.log("t", 0).roll()
        e.compact("t")
        kept = _batches(e, "t")[0]
        assert (kept.base_offset, kept.records_count, kept.producer_id, kept.base_sequence) == (0, 0, pid, 0)
        assert read_log(e, "t") == [(1, b"k", b"second")]
    with engine.open(tmp_path, background=False) as e:  # the producer's sequence survived, through the snapshot
        again = engine.encode_batch([(b"k", b"first", None, 1)], producer_id=pid, producer_epoch=0, base_sequence=0)
        assert e.log("t", 0).append_as_leader(again).duplicate


def test_a_commit_marker_goes_once_its_data_is_gone_and_its_horizon_passed(tmp_path):
    clock = ManualClock(T0)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t", config=COMPACT)
        tx = e.producer(transactional_id="tx", linger_ms=0)
        tx.init_transactions()
        for key in (b"a", b"b"):
            tx.begin_transaction()
            tx.send("t", key=key, value=b"in-tx").get()
            tx.commit_transaction()
        plain = e.producer(linger_ms=0, enable_idempotence=False)

        def markers():
            return [b.base_offset for b in _batches(e, "t") if b.is_control and b.records_count]

        def clean_more(value: bytes):
            plain.send("t", key=b"a", value=value).get()  # something dirty for the next pass to map
            e.log("t", 0).roll()
            e.compact("t")
        clean_more(b"1")
        assert markers() == [1, 3]  # pass 1 removed a's data; the pass still read its batch, so its marker stays
        clean_more(b"2")
        first = next(b for b in _batches(e, "t") if b.base_offset == 1)
        assert markers() == [1, 3] and first.delete_horizon_ms == T0 + COMPACT["delete.retention.ms"]
        clock.advance(COMPACT["delete.retention.ms"])
        clean_more(b"3")
        assert markers() == [3]  # b's data is still there, so its marker stays
        assert latest(read_log(e, "t")) == {b"a": b"3", b"b": b"in-tx"}


def test_a_compact_of_a_dirty_log_reads_no_header_for_the_delete_horizon(tmp_path, monkeypatch):
    """An explicit compact scans the clean section's batch headers for their earliest delete horizon only when
    nothing is dirty: a clean of a dirty section does not use it, and the scan reads one header a batch."""
    from engine.log import log_cleaner
    scans = []

    def counted(segments):
        scans.append(len(segments))
        return earliest(segments)
    earliest = log_cleaner.earliest_delete_horizon
    monkeypatch.setattr(log_cleaner, "earliest_delete_horizon", counted)
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 600})
        for i in range(40):
            e.append("t", 0, engine.encode_batch([(b"k%d" % (i % 8), None if i == 33 else b"v%d" % i, None,
                                                   clock.time_ms())]), acks=1)
        e.log("t", 0).roll()
        e.compact("t")
        kept = read_log(e, "t")
        assert scans == [] and len(kept) == 8 and [r[1] for r in kept if r[2] is None] == [b"k1"]
        e.compact("t")  # nothing dirty: the horizon decides, and it has not passed
        assert len(scans) == 1 and read_log(e, "t") == kept
        clock.advance(COMPACT["delete.retention.ms"] + 1)
        e.compact("t")
        assert read_log(e, "t") == [r for r in kept if r[2] is not None]


def test_expired_tombstones_go_without_new_writes(tmp_path):
    """A compacted topic that gets no more writes: its tombstones carry a delete horizon from the clean that kept
    them, and once it has passed, an explicit compact removes them (Kafka's cleaner waits for dirty bytes and keeps
    them forever). Every other record stays, byte for byte. The cleaner thread picks such a log up as well."""
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 600})
        for i in range(40):
            e.append("t", 0, engine.encode_batch([(b"k%d" % (i % 8), None if i in (33, 35) else b"v%d" % i, None,
                                                   clock.time_ms())]), acks=1)
        e.log("t", 0).roll()
        e.compact("t")
        kept = read_log(e, "t")
        tombstones = [r for r in kept if r[2] is None]
        assert {r[1] for r in tombstones} == {b"k1", b"k3"}  # kept by the first clean, with a horizon
        e.compact("t")  # before the horizon: nothing changes
        assert read_log(e, "t") == kept
        clock.advance(COMPACT["delete.retention.ms"] + 1)
        e.compact("t")  # nothing dirty, horizons past
        after = read_log(e, "t")
        assert after == [r for r in kept if r[2] is not None]
        cleaner = e._logs.cleaner
        assert not [c for c in cleaner.cleanable_logs() if c.topic_partition == ("t", 0)]  # nothing left to do

    with engine.open(tmp_path / "thread", clock=clock, background=False) as e:
        e.create_topic("t", config={**COMPACT, "segment.bytes": 600, "min.cleanable.dirty.ratio": 0.99})
        for i in range(40):
            e.append("t", 0, engine.encode_batch([(b"k%d" % (i % 8), None if i == 33 else b"v", None,
                                                   clock.time_ms())]), acks=1)
        e.log("t", 0).roll()
        e.compact("t")
        cleaner = e._logs.cleaner
        assert not [c for c in cleaner.cleanable_logs() if c.topic_partition == ("t", 0)]
        clock.advance(COMPACT["delete.retention.ms"] + 1)
        assert [c.topic_partition for c in cleaner.cleanable_logs()] == [("t", 0)]  # due: a horizon passed
        assert cleaner.clean_filthiest()
        assert not [r for r in read_log(e, "t") if r[2] is None]
