"""Mirroring against librdkafka's mock cluster: fidelity both ways, exactly once across kill -9, group offsets
translated exactly, follow mode, typed errors. The expected records come from a model of what was produced (which
sends committed, which aborted); the cluster side is read with confluent-kafka's own consumer."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import engine
from engine import mirror  # noqa: E402
from engine.common import errors
from engine.common.structs import OffsetAndMetadata, TopicPartition
from tests.log_checks import read_log
from tests.mirror import kafka_cluster as kc

ck = pytest.importorskip("confluent_kafka")  # a test dependency (kafkalog[test]): present in CI

BASE_TS = 1_700_000_000_000


@pytest.fixture
def cluster():
    mock = kc.MockCluster()
    yield mock
    mock.close()


def _record(p: int, i: int, size: int = 0) -> tuple:
    """(key, value, headers, timestamp) of the i-th record of partition p: some keys and values null, headers
    of zero to two entries (one with a null value)."""
    key = None if i % 7 == 3 else b"k%d-%d" % (p, i)
    value = None if i % 11 == 5 else b"v%d-%d." % (p, i) + b"x" * size
    headers = [[], [("h", b"%d" % i)], [("a", b"1"), ("n", None)]][i % 3]
    return key, value, headers, BASE_TS + i * 10 + p


def fill_kafkalog(path: str, topic: str, partitions: int, per_partition: int, size: int = 0,
                  txn_every: int = 50) -> dict[int, list]:
    """A topic with plain records and, every `txn_every` records, an aborted transaction then a committed one;
    returns the model: {partition: [records a read_committed reader sees, in order]}."""
    model: dict[int, list] = {p: [] for p in range(partitions)}
    with engine.open(path) as eng:
        eng.create_topic(topic, partitions, config={"retention.ms": 86_400_000, "segment.bytes": 1 << 20})
        plain = eng.producer(linger_ms=5)
        txn = eng.producer(transactional_id="filler")
        txn.init_transactions()
        for i in range(per_partition):
            for p in range(partitions):
                rec = _record(p, i, size)
                if i % txn_every == 10:  # an aborted transaction of three records, then a committed one
                    txn.begin_transaction()
                    for j in range(3):
                        txn.send(topic, value=b"aborted", key=rec[0], headers=rec[2], partition=p,
                                 timestamp_ms=rec[3])
                    txn.abort_transaction()
                    txn.begin_transaction()
                    txn.send(topic, value=rec[1], key=rec[0], headers=rec[2], partition=p, timestamp_ms=rec[3])
                    txn.commit_transaction()
                else:
                    plain.send(topic, value=rec[1], key=rec[0], headers=rec[2], partition=p, timestamp_ms=rec[3])
                model[p].append(rec)
            plain.flush()
        plain.close()
        txn.close()
    return model


def fill_kafka(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int = 0,
               txn_every: int = 50, aborted_in_log: bool = False) -> dict[int, list]:
    """As fill_kafkalog, produced into the cluster with confluent-kafka. With `aborted_in_log` the aborted records
    are sent before the abort (so they are in the log, behind an abort marker); else the abort drops them from the
    client's queue (the mock cluster would show aborted records to read_committed readers)."""
    model: dict[int, list] = {p: [] for p in range(partitions)}
    plain = ck.Producer(kc.config(bootstrap, **{"linger.ms": 5}))
    txn = ck.Producer(kc.config(bootstrap, **{"transactional.id": "filler"}))
    txn.init_transactions(30)
    for i in range(per_partition):
        for p in range(partitions):
            key, value, headers, ts = rec = _record(p, i, size)
            if i % txn_every == 10:
                assert plain.flush(30) == 0
                txn.begin_transaction()
                for _ in range(3):
                    txn.produce(topic, b"aborted", key, p, timestamp=ts, headers=headers)
                if aborted_in_log:
                    assert txn.flush(30) == 0
                txn.abort_transaction(30)
                txn.begin_transaction()
                txn.produce(topic, value, key, p, timestamp=ts, headers=headers)
                txn.commit_transaction(30)
            else:
                while True:
                    try:
                        plain.produce(topic, value, key, p, timestamp=ts, headers=headers)
                        break
                    except BufferError:
                        plain.poll(0.05)
            model[p].append(rec)
        plain.poll(0)
    assert plain.flush(30) == 0
    return model


def kafka_records(bootstrap: str, topic: str, partitions: int, real_broker: bool = False) -> dict[int, list]:
    """What a read_committed reader of the cluster sees: on a real broker, confluent-kafka's consumer; on the mock
    cluster, which does not filter aborted transactions, the test's own model of read_committed."""
    got = (kc.read_all if real_broker else kc.read_committed_model)(bootstrap, topic, partitions)
    for recs in got.values():
        for _, _, _, _, (ts_type, _) in recs:
            assert ts_type == ck.TIMESTAMP_CREATE_TIME
    return {p: [(k, v, [tuple(h) for h in hs], ts) for _, k, v, hs, (_, ts) in recs] for p, recs in got.items()}


def kafkalog_records(path: str, topic: str) -> dict[int, list]:
    out: dict[int, list] = {}
    with engine.open(path) as eng:
        n = eng.partitions_for(topic)
        with eng.consumer(isolation_level="read_committed", enable_auto_commit=False) as c:
            tps = [TopicPartition(topic, p) for p in range(n)]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            ends = c.end_offsets(tps)
            while any(c.position(tp) < ends[tp] for tp in tps):
                for tp, recs in c.poll(0, max_records=10_000).items():
                    out.setdefault(tp.partition, []).extend(
                        (r.key, r.value, [tuple(h) for h in r.headers], r.timestamp) for r in recs)
    return {p: out.get(p, []) for p in range(n)}


def _mock_config(bootstrap: str) -> dict:
    return kc.config(bootstrap)


# --- fidelity ---------------------------------------------------------------------------------------------
def test_to_kafka_copies_committed_records_with_every_field(tmp_path, cluster):
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "events", 3, 120)
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", timeout_s=10)
    assert summary.records == 360
    got = kafka_records(cluster.bootstrap, "events", 3)
    assert got == model
    again = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", timeout_s=10)
    assert again.records == 0  # resumed from its progress: nothing twice
    assert kafka_records(cluster.bootstrap, "events", 3) == model


def test_from_kafka_copies_committed_records_with_every_field(tmp_path, cluster):
    model = fill_kafka(cluster.bootstrap, "events", 3, 120)
    dst = str(tmp_path / "dst")
    summary = mirror.from_kafka(_mock_config(cluster.bootstrap), dst, name="m", topics=["events"], timeout_s=10)
    assert summary.records == 360
    got = kafkalog_records(dst, "events")
    assert {p: got[p] for p in range(3)} == model
    source_partitions = len(ck.admin.AdminClient(_mock_config(cluster.bootstrap)).list_topics(
        "events", timeout=10).topics["events"].partitions)
    with engine.open(dst) as eng:  # the destination's partition count is the source's
        assert eng.partitions_for("events") == source_partitions
    kc.produce(cluster.bootstrap, "events", [(1, b"late", b"late", [], BASE_TS)])
    more = mirror.from_kafka(_mock_config(cluster.bootstrap), dst, name="m", topics=["events"], timeout_s=10)
    assert more.records == 1
    assert kafkalog_records(dst, "events")[1] == model[1] + [(b"late", b"late", [], BASE_TS)]


def test_topic_configs_are_copied_where_the_destination_takes_them(tmp_path, cluster):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 1, 3)
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", timeout_s=10)
    assert "events" in summary.notes and "controller" in summary.notes["events"]  # the mock cannot CreateTopics
    from engine.mirror.kafkalog_side import _supported
    kept, dropped = _supported({"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2",
                                "remote.storage.enable": "true", "message.timestamp.type": "LogAppendTime"})
    assert kept == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert len(dropped) == 1 and dropped[0].startswith("remote.storage.enable=true")


# --- exactly once across kill -9 ---------------------------------------------------------------------------
def _mirror_cmd(data: str, way: str, bootstrap: str, *extra: str, on_mock: bool = False) -> list[str]:
    """The mirror CLI; `on_mock` when the destination is the mock cluster (see tests/mirror/mirror_on_mock.py)."""
    runner = "tests.mirror.mirror_on_mock" if on_mock else "engine"
    return [sys.executable, "-m", runner, "mirror", "--data", data, way, bootstrap, "--name", "killme",
            "--max-records", "700", "--timeout", "10", "--json", *extra]


def _kill_trials(cmd: list[str], trials: int, seed: int, chunks: int, copied, total: int) -> list[int]:
    """Run `cmd` (a mirror printing a line per committed transaction) `trials` times, each killed with SIGKILL a
    random 0-20 ms after its k-th transaction, k random in the first third of the `chunks` transactions a whole
    copy takes; returns how many records a read_committed reader of the destination saw after each kill
    (`copied()`), and fails unless some kill left the copy part way done. Counting transactions rather than
    waiting a while keeps the kills inside the copy however fast the machine is."""
    rng = random.Random(seed)
    after = []
    for _ in range(trials):
        proc = subprocess.Popen(cmd + ["--progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = []
        for _ in range(rng.randint(1, max(1, chunks // 3))):
            lines.append(proc.stderr.readline())
            if not lines[-1]:
                break
        time.sleep(rng.uniform(0, 0.02))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL), b"".join(lines).decode() + proc.stderr.read().decode()
        proc.stderr.close()
        after.append(copied())
    assert any(0 < n < total for n in after), f"no kill landed while records were being copied: {after}"
    return after


def _run_to_end(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


KILLS = int(os.environ.get("KAFKALOG_MIRROR_KILLS", "4"))


def _count(records: dict[int, list]) -> int:
    return sum(map(len, records.values()))


def test_to_kafka_is_exactly_once_across_kill_9(tmp_path, cluster):
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "events", 3, 8000, size=200, txn_every=400)
    cmd = _mirror_cmd(src, "--to-kafka", cluster.bootstrap, on_mock=True)
    _kill_trials(cmd, KILLS, 36, _count(model) // 700, lambda: _count(kafka_records(cluster.bootstrap, "events", 3)),
                 _count(model))
    _run_to_end(cmd)
    got = kafka_records(cluster.bootstrap, "events", 3)
    assert [len(got[p]) for p in range(3)] == [len(model[p]) for p in range(3)]  # 0 lost, 0 duplicated
    assert got == model


_UNFINISHED = """
import os, sys
from engine.mirror.cluster import Cluster
from engine.mirror.kafka_side import KafkaSink
from engine.mirror.offset_sync import Sync, encode_key
sink = KafkaSink(Cluster({"bootstrap.servers": sys.argv[1]}), "orphan", sys.argv[2])
sink.prepare({})
sink.begin()
sink._producer.begin_transaction()
sink._producer.produce(sys.argv[2], Sync(0, 700, 0).encode(), encode_key("orphan", "events", 0, 0), 0)
assert sink._producer.flush(30) == 0
os._exit(0)  # killed before its commit
"""


def test_the_kill_tests_mirror_reads_its_progress_on_the_mock_as_a_broker_serves_it(cluster):
    """A mirror killed between sending its progress and committing leaves an open transaction in the progress
    topic. The runner the to-Kafka kill test uses must not count it (a broker aborts it when the next mirror
    initialises), yet must keep what a later mirror committed."""
    from engine.mirror.cluster import Cluster
    from engine.mirror.kafka_side import KafkaSink
    from engine.mirror.offset_sync import Sync
    from tests.mirror.mirror_on_mock import read_progress
    topic = "orphan-progress"
    subprocess.run([sys.executable, "-c", _UNFINISHED, cluster.bootstrap, topic], check=True, timeout=120)
    in_log = kc.read_all(cluster.bootstrap, topic, 1, isolation="read_uncommitted")[0]
    assert [json.loads(value)["next"] for _, _, value, _, _ in in_log] == [700]
    sink = KafkaSink(Cluster(kc.config(cluster.bootstrap)), "orphan", topic)
    sink.begin()
    assert read_progress(sink) == {}
    sink.write({}, {("events", 0): (0, Sync(0, 5, 0))})
    assert {tp: prog.latest.next for tp, prog in read_progress(sink).items()} == {("events", 0): 5}
    sink.close()


def test_from_kafka_is_exactly_once_across_kill_9(tmp_path, cluster):
    model = fill_kafka(cluster.bootstrap, "events", 3, 8000, size=200, txn_every=400)
    dst = str(tmp_path / "dst")
    cmd = _mirror_cmd(dst, "--from-kafka", cluster.bootstrap, "--topic", "events")
    _kill_trials(cmd, KILLS, 37, _count(model) // 700,
                 lambda: _count(kafkalog_records(dst, "events")) if os.path.exists(dst) else 0, _count(model))
    _run_to_end(cmd)
    got = kafkalog_records(dst, "events")
    assert [len(got[p]) for p in range(3)] == [len(model[p]) for p in range(3)]
    assert {p: got[p] for p in range(3)} == model


# --- group offsets ----------------------------------------------------------------------------------------
def _values_from(consumer, tp: TopicPartition, offset: int) -> list:
    """The values a read_committed consumer reads from `offset` to the partition's end."""
    consumer.assign([tp])
    consumer.seek(tp, offset)
    end = consumer.end_offsets([tp])[tp]
    out = []
    while consumer.position(tp) < end:
        out.extend(r.value for r in consumer.poll(0, max_records=100_000).get(tp, []))
    return out


def _source_offsets(path: str, topic: str, partition: int) -> list[int]:
    """Every offset of the partition's log (records, aborted records and control batches alike) and its end."""
    with engine.open(path) as eng:
        return list(range(eng.describe_topic(topic).partitions[partition].log_end_offset + 1))


def test_group_offsets_translate_exactly_to_kafka(tmp_path, cluster):
    """For every source offset U a group may commit (on a record, an aborted record, a control batch, the end),
    the destination group resumes at D such that the records from D there are the records from U here."""
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 1, 160)
    offsets = _source_offsets(src, "events", 0)
    groups = [f"g{u}" for u in offsets]
    with engine.open(src) as eng:
        for u in offsets:
            eng.groups.commit_offsets(f"g{u}", {TopicPartition("events", 0): OffsetAndMetadata(u)})
        visible = {}
        with eng.consumer(isolation_level="read_committed", enable_auto_commit=False) as c:
            for u in offsets:
                visible[u] = _values_from(c, TopicPartition("events", 0), u)
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", groups=groups, max_records=37,
                              timeout_s=10)
    dest = kc.read_committed_model(cluster.bootstrap, "events", 1)[0]
    for u in offsets:
        report = summary.groups[f"g{u}"]
        assert report["status"] == "synced", report
        d = report["events-0"]["destination"]
        assert [v for off, _, v, _, _ in dest if off >= d] == visible[u], u
    consumer = ck.Consumer(kc.config(cluster.bootstrap, **{"group.id": "g100"}))
    try:
        found = consumer.committed([ck.TopicPartition("events", 0)], timeout=10)[0].offset
    finally:
        consumer.close()
    assert found == summary.groups["g100"]["events-0"]["destination"]


def test_group_offsets_translate_exactly_from_kafka(tmp_path, cluster):
    fill_kafka(cluster.bootstrap, "events", 1, 120)
    source = kc.read_all(cluster.bootstrap, "events", 1, isolation="read_uncommitted")[0]
    end = kc.read_committed_model(cluster.bootstrap, "events", 1)[0][-1][0] + 1
    offsets = sorted({o for o, *_ in source} | {0, end})
    for u in offsets:
        consumer = ck.Consumer(kc.config(cluster.bootstrap, **{"group.id": f"g{u}"}))
        consumer.commit(offsets=[ck.TopicPartition("events", 0, u)], asynchronous=False)
        consumer.close()
    committed_records = kc.read_committed_model(cluster.bootstrap, "events", 1)[0]
    dst = str(tmp_path / "dst")
    summary = mirror.from_kafka(_mock_config(cluster.bootstrap), dst, name="m", topics=["events"],
                                groups=[f"g{u}" for u in offsets], max_records=29, timeout_s=10)
    with engine.open(dst) as eng:
        with eng.consumer(isolation_level="read_committed", enable_auto_commit=False) as c:
            tp = TopicPartition("events", 0)
            for u in offsets:
                d = eng.committed(f"g{u}", tp).offset
                assert summary.groups[f"g{u}"]["events-0"]["destination"] == d
                got = _values_from(c, tp, d)
                assert got == [v for o, _, v, _, _ in committed_records if o >= u], u


def test_a_group_active_on_the_destination_is_left_alone(tmp_path, cluster):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 1, 10)
    dst = str(tmp_path / "dst")
    mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="up", timeout_s=10)
    ck.Consumer(kc.config(cluster.bootstrap, **{"group.id": "busy"})).commit(
        offsets=[ck.TopicPartition("events", 0, 4)], asynchronous=False)
    with engine.open(dst) as eng:
        eng.create_topic("events", 4)
        member = eng.consumer("events", group_id="busy")
        member.poll(0)
        summary = mirror.from_kafka(_mock_config(cluster.bootstrap), eng, name="down", topics=["events"],
                                    groups=["busy"], timeout_s=10)
        assert summary.groups["busy"]["status"] == "active on the destination: offsets not moved"
        assert eng.committed("busy", TopicPartition("events", 0)) is None
        member.close()


# --- follow mode, progress, errors ---------------------------------------------------------------------------
def test_follow_mode_copies_new_records_until_stopped(tmp_path, cluster):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 2, 5)
    with engine.open(src) as eng:
        seen = []
        m = mirror.Mirror(mirror.KafkalogSource(eng, "f"), mirror.KafkaSink(mirror.Cluster(
            _mock_config(cluster.bootstrap), 10), "f", mirror.PROGRESS_TOPIC), name="f", follow=True,
            commit_interval_s=0.1, on_progress=lambda s: seen.append(s.records))
        runner = threading.Thread(target=m.run)
        runner.start()
        try:
            with eng.producer() as p:
                for i in range(20):
                    p.send("events", value=b"new%d" % i, partition=i % 2)
            deadline = time.monotonic() + 30
            while (not seen or seen[-1] < 30) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            m.stop()
            runner.join(30)
        assert not runner.is_alive()
        assert seen[-1] == 30
    values = [r[1] for recs in kafka_records(cluster.bootstrap, "events", 2).values() for r in recs]
    assert sorted(v for v in values if v and v.startswith(b"new")) == sorted(b"new%d" % i for i in range(20))


def test_cli_summary_is_json_with_every_partition(tmp_path, cluster):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 2, 4)
    out = subprocess.run([sys.executable, "-m", "engine", "mirror", "--data", src, "--to-kafka", cluster.bootstrap,
                          "--name", "cli", "--json", "--timeout", "10"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["records"] == 8 and sorted(doc["partitions"]) == ["events-0", "events-1"]
    assert all(p["lag"] == 0 and p["records"] == 4 for p in doc["partitions"].values())


def test_unreachable_cluster_is_one_typed_line(tmp_path):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 1, 1)
    with pytest.raises(errors.BrokerNotAvailableError) as exc:
        mirror.to_kafka(src, {"bootstrap.servers": "127.0.0.1:1", "logger": kc.QUIET}, name="x", timeout_s=2)
    assert exc.value.retriable and exc.value.code == 8 and "127.0.0.1:1" in str(exc.value)
    out = subprocess.run([sys.executable, "-m", "engine", "mirror", "--data", src, "--from-kafka", "127.0.0.1:1",
                          "--name", "x", "--timeout", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("kafkalog mirror: BrokerNotAvailableError:")


def test_missing_topic_is_a_typed_error(tmp_path, cluster):
    """(From a cluster, a missing topic is checked against a real broker in tests/mirror/test_interop.py: the mock
    cluster creates any topic a metadata request names.)"""
    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 1, 1)
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="nope"):
        mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="x", topics=["nope"], timeout_s=5)


def test_bad_options_are_refused(tmp_path, cluster):
    with pytest.raises(errors.InvalidConfigurationError, match="bootstrap.servers"):
        mirror.to_kafka(str(tmp_path), {}, name="x")
    with pytest.raises(errors.InvalidConfigurationError, match="max_records"):
        mirror.to_kafka(str(tmp_path), _mock_config(cluster.bootstrap), name="x", max_records=0)
    out = subprocess.run([sys.executable, "-m", "engine", "mirror", "--data", str(tmp_path), "--to-kafka", "h:1",
                          "--name", "x", "--config", "novalue"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "takes key=value" in out.stderr


def test_offsets_learnt_one_by_one_when_another_producer_interleaved(tmp_path, cluster, monkeypatch):
    """A partition whose records did not land on consecutive offsets (another producer wrote between them): the
    transaction is aborted and the chunk copied again with every record's offset reported; still exact."""
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "events", 2, 60)
    original, calls = mirror.KafkaSink._copy, []

    def interleaved(self, chunk, every):
        calls.append(every)
        spans = original(self, chunk, every)
        return None if not every and len(calls) == 1 else spans
    monkeypatch.setattr(mirror.KafkaSink, "_copy", interleaved)
    with engine.open(src) as eng:
        eng.groups.commit_offsets("g", {TopicPartition("events", 0): OffsetAndMetadata(33)})
        expected = _values_from(eng.consumer(isolation_level="read_committed"), TopicPartition("events", 0), 33)
        summary = mirror.to_kafka(eng, _mock_config(cluster.bootstrap), name="m", groups=["g"], timeout_s=10)
    assert calls[:2] == [False, True]
    assert kafka_records(cluster.bootstrap, "events", 2) == model
    d = summary.groups["g"]["events-0"]["destination"]
    assert [v for off, _, v, _, _ in kc.read_committed_model(cluster.bootstrap, "events", 1)[0] if off >= d] == expected


def _mirrors_with_one_restart(src: str, cluster, model) -> None:
    """Mirroring `src` to the cluster restarts once from its committed progress, and lands every record once."""
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", max_records=100, timeout_s=10)
    assert summary.restarts == 1
    assert kafka_records(cluster.bootstrap, "events", 2) == model


def test_a_retriable_failure_restarts_from_committed_progress(tmp_path, cluster, monkeypatch):
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "events", 2, 300)
    original, calls = mirror.KafkaSink.write, []

    def flaky(self, chunk, syncs):
        calls.append(1)
        if len(calls) == 2:  # the second transaction: half written, then the cluster goes away
            self._copy(chunk, False)
            raise errors.KafkaTimeoutError("the cluster went away")
        return original(self, chunk, syncs)
    monkeypatch.setattr(mirror.KafkaSink, "write", flaky)
    _mirrors_with_one_restart(src, cluster, model)


def test_a_flush_that_leaves_records_undelivered_aborts_and_restarts(tmp_path, cluster, monkeypatch):
    """The producer's flush returns with records still queued (its timeout passed): the transaction is aborted and the
    run restarts from its committed progress (it used to read the delivery reports as complete and commit wrong runs
    or fail untyped); every record lands once."""
    from engine.mirror import kafka_side

    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "events", 2, 300)
    original, flushes = kafka_side.KafkaSink._copy, []

    class Stalled:  # the real producer, whose flush reports one record left the first time
        def __init__(self, producer) -> None:
            self._producer = producer

        def __getattr__(self, name):
            return getattr(self._producer, name)

        def flush(self, *args):
            left = self._producer.flush(*args)
            flushes.append(left)
            return left or (1 if len(flushes) == 1 else 0)

    def copy(self, chunk, every):
        if not isinstance(self._producer, Stalled):
            self._producer = Stalled(self._producer)
        return original(self, chunk, every)
    monkeypatch.setattr(kafka_side.KafkaSink, "_copy", copy)
    _mirrors_with_one_restart(src, cluster, model)


def test_group_offsets_are_read_and_committed_through_one_client_per_group(tmp_path, cluster, monkeypatch):
    from engine.mirror import cluster as cluster_module

    src = str(tmp_path / "src")
    fill_kafkalog(src, "events", 2, 100)
    with engine.open(src) as eng:
        for g in ("a", "b"):
            eng.groups.commit_offsets(g, {TopicPartition("events", p): OffsetAndMetadata(50) for p in range(2)})
    made = []
    real = cluster_module.Cluster._group_client

    def counted(self, group):
        fresh = group not in self._groups
        consumer = real(self, group)
        if fresh:
            made.append(group)
        return consumer
    monkeypatch.setattr(cluster_module.Cluster, "_group_client", counted)
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", groups=["a", "b"], max_records=37,
                              timeout_s=10)
    assert {g: summary.groups[g]["status"] for g in ("a", "b")} == {"a": "synced", "b": "synced"}
    assert sorted(made) == ["a", "b"]  # read, then committed: each through the one client of its group


def test_translation_model():
    import bisect

    """PartitionProgress.translate against a brute-force model of a copied partition: random gaps (markers, aborted
    records) in the source, the mirror's markers in the destination, syncs compacted to the last HISTORY slots."""
    from engine.mirror import offset_sync

    rng = random.Random(5)
    for _ in range(20):
        src_offsets = sorted(rng.sample(range(3000), 1200))   # source offsets of records a reader sees
        d, mapping = 0, {}
        prog = offset_sync.PartitionProgress()
        i, pos = 0, 0
        while i < len(src_offsets):
            take = rng.randint(1, 5)  # ~400 transactions: more than the HISTORY slots compaction keeps
            part = src_offsets[i:i + take]
            spans, first = [], d
            for u in part:
                mapping[u] = d
                d += 1
            spans.append((first, len(part)))
            following = src_offsets[i + take] if i + take < len(src_offsets) else part[-1] + 4
            nxt = rng.randint(part[-1] + 1, following)  # past what it read, never past the next record
            sync = offset_sync.Sync(pos, nxt, first)
            sync.place(part, spans)
            prog.add(prog.next_slot(), sync)
            d += 1  # the mirror's commit marker
            pos, i = nxt, i + take
        oldest = min(s.start for s in prog.by_slot.values())
        for u in range(0, pos + 2):
            got = prog.translate(u)
            if u > pos:
                assert got == offset_sync.NOT_YET
            elif u < oldest:  # compacted away: left alone rather than guessed
                assert got == offset_sync.TOO_OLD
            else:
                k = bisect.bisect_left(src_offsets, u)
                assert got == (mapping[src_offsets[k]] if k < len(src_offsets) else d - 1), u
        assert oldest > 0  # the kept history did not reach back to the start


@pytest.mark.parametrize("gaps", ["every other offset", "random"])
def test_progress_records_stay_small_over_a_source_with_a_gap_after_every_record(gaps):
    """A compacted source with a gap after nearly every record, 50,000-record transactions past offset ten million
    (one progress record was 1.1 MB): every other offset gone makes one strided run per transaction, translated
    exactly; gaps of no pattern keep MAX_RUNS runs (under 64 KiB), translated at or before the exact answer (never past
    a record the group has not read) and exactly at every run kept and between transactions."""
    import bisect

    from engine.mirror import offset_sync

    rng = random.Random(7)
    prog = offset_sync.PartitionProgress()
    base, dest, exact, starts = 10_000_000, 0, {}, []
    for t in range(3):
        window = range(base + t * 100_000, base + (t + 1) * 100_000)
        src = list(window[::2]) if gaps == "every other offset" else sorted(rng.sample(window, 50_000))
        sync = offset_sync.Sync(src[0], src[-1] + 2, dest)
        sync.place(src, [(dest, len(src))])
        exact.update(zip(src, range(dest, dest + len(src))))
        starts.append(src[0])
        dest += len(src) + 1  # the mirror's commit marker
        value = sync.encode()
        assert len(value) < 64 << 10 and offset_sync.Sync.decode(value) == sync, len(value)
        assert sync.coarse == (gaps == "random") and len(sync.runs) == (1 if not sync.coarse else offset_sync.MAX_RUNS)
        prog.add(prog.next_slot(), sync)
    copied = sorted(exact)
    kept = {r[0] for s in prog.by_slot.values() for r in s.runs}
    for upstream in [*starts, *kept, *(rng.randrange(base, copied[-1] + 1) for _ in range(20_000))]:
        right = exact[copied[bisect.bisect_left(copied, upstream)]]
        got = prog.translate(upstream)
        if gaps == "every other offset" or upstream in kept or upstream in starts:
            assert got == right, upstream
        assert got <= right, (upstream, got, right)
        assert right - got <= 2 * 50_000 // offset_sync.MAX_RUNS, (upstream, got, right)


GAP_RECORDS = int(os.environ.get("KAFKALOG_MIRROR_GAP_RECORDS", "100000"))


def mirror_a_source_with_every_other_offset_gone(tmp_path, bootstrap: str, records: int, real_broker: bool) -> None:
    """A compacted source of `records` offsets with every other one gone (each key written twice in a row), mirrored
    in 50,000-record transactions: every progress record is under 64 KiB; then groups committed on kept and removed
    offsets alike are translated by a second run (from the progress it reads back) to exactly where each stood. The
    mock cluster keeps a bounded log (its oldest records go): there the groups are placed in what it still holds."""
    import bisect

    src = str(tmp_path / "gaps")
    with engine.open(src) as eng:
        eng.create_topic("gaps", 1, config={"cleanup.policy": "compact", "segment.bytes": 1 << 17})
        with eng.producer(linger_ms=5, batch_size=1 << 15) as p:
            for start in range(0, records, 50_000):
                p.send_batch("gaps", [(b"k%d" % (i // 2), b"v%d" % i) for i in range(start, min(start + 50_000,
                                                                                                   records))], 0)
        eng.compact("gaps", 0)
        kept = [(off, value) for off, _, value in read_log(eng, "gaps")]
        eng.alter_topic_config("gaps", {"segment.bytes": 16 << 20})  # the copy's (a destination refuses larger batches)
    assert len(kept) < records * 0.6 and all(off % 2 for off, _ in kept[:records // 3])  # every other one gone
    summary = mirror.to_kafka(src, _mock_config(bootstrap), name="gaps", max_records=50_000, timeout_s=30)
    assert summary.records == len(kept)
    dest = (kc.read_all if real_broker else kc.read_committed_model)(bootstrap, "gaps", 1)[0]
    held = len(dest)  # all of it on a broker; the mock's last records
    assert held > len(kept) // 4 and [value for _, _, value, _, _ in dest] == [value for _, value in kept[-held:]]
    progress = kc.read_all(bootstrap, mirror.PROGRESS_TOPIC, 1, isolation="read_uncommitted")[0]
    assert len(progress) >= len(kept) // 50_000 and max(len(value) for _, _, value, _, _ in progress) < 64 << 10
    sources = [off for off, _ in kept]
    rng = random.Random(3)
    upstream = {f"gap-{i}": rng.randrange(sources[-held], sources[-1] + 1) for i in range(40)}
    with engine.open(src) as eng:
        for group, u in upstream.items():
            eng.groups.commit_offsets(group, {TopicPartition("gaps", 0): OffsetAndMetadata(u)})
    summary = mirror.to_kafka(src, _mock_config(bootstrap), name="gaps", groups=list(upstream), timeout_s=30)
    assert summary.records == 0
    for group, u in upstream.items():
        report = summary.groups[group]
        assert report["status"] == "synced", report
        assert report["gaps-0"]["destination"] == dest[bisect.bisect_left(sources, u) - (len(kept) - held)][0], u


def test_a_compacted_source_with_every_other_offset_gone_mirrors_with_small_progress(tmp_path, cluster):
    mirror_a_source_with_every_other_offset_gone(tmp_path, cluster.bootstrap, GAP_RECORDS, False)


def test_cluster_errors_are_kafkalogs_typed_errors():
    """librdkafka's error codes (Kafka's protocol codes and its local ones) become kafkalog's typed errors, with
    Kafka's code and retriable flag; an abortable transaction is retried from progress, a fenced one is not."""
    from engine.mirror.cluster import ClusterError, typed

    E = ck.KafkaError
    cases = {E.TOPIC_AUTHORIZATION_FAILED: (errors.TopicAuthorizationFailedError, 29, False),
             E.GROUP_AUTHORIZATION_FAILED: (errors.GroupAuthorizationFailedError, 30, False),
             E.CLUSTER_AUTHORIZATION_FAILED: (errors.ClusterAuthorizationFailedError, 31, False),
             E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (errors.TransactionalIdAuthorizationFailedError, 53, False),
             E._ALL_BROKERS_DOWN: (errors.BrokerNotAvailableError, 8, True),
             E._TRANSPORT: (errors.BrokerNotAvailableError, 8, True),
             E.UNKNOWN_TOPIC_OR_PART: (errors.UnknownTopicOrPartitionError, 3, True),
             E._TIMED_OUT: (errors.KafkaTimeoutError, 7, True),
             E.PRODUCER_FENCED: (errors.ProducerFencedError, 90, False)}
    for code, (cls, kafka_code, retriable) in cases.items():
        err = typed(ck.KafkaException(E(code)), "doing it")
        assert type(err) is cls and err.code == kafka_code and err.retriable is retriable, code
        assert str(err).startswith("doing it: ")
    other = typed(E(E.POLICY_VIOLATION), "creating")
    assert isinstance(other, ClusterError) and other.code == E.POLICY_VIOLATION and "POLICY_VIOLATION" in str(other)
    abortable = typed(E(E._STATE, txn_requires_abort=True), "committing")
    assert abortable.retriable


def test_records_removed_before_they_were_copied_are_skipped_from_the_log_start(tmp_path, cluster):
    """Retention (here DeleteRecords) moved the log start past the mirror's progress: the next run copies from the
    log start, as MirrorMaker 2's consumers reset to earliest, rather than failing or jumping to the end."""
    src = str(tmp_path / "src")
    with engine.open(src) as eng:
        eng.create_topic("events", 1)
        with eng.producer() as p:
            for i in range(10):
                p.send("events", value=b"a%d" % i, partition=0, timestamp_ms=BASE_TS + i)
    mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", timeout_s=10)
    with engine.open(src) as eng:
        with eng.producer() as p:
            for i in range(10):
                p.send("events", value=b"b%d" % i, partition=0, timestamp_ms=BASE_TS + i)
        eng.partition("events", 0).delete_records(15)
    summary = mirror.to_kafka(src, _mock_config(cluster.bootstrap), name="m", timeout_s=10)
    assert summary.records == 5
    got = [r[1] for r in kafka_records(cluster.bootstrap, "events", 1)[0]]
    assert got == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(5, 10)]
