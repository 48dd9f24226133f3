"""`make interop`: kafkalog against a real Kafka broker (KAFKA_HOME: any Kafka installation, or the build folder of
a broker built from source). One KRaft broker on 127.0.0.1 with a fresh data directory for the module:
mirroring a million records each way with kill -9 of the mirror (0 lost, 0 duplicated under read_committed), a
million offsets of a compacted source with every other one gone (small progress records, groups translated exactly),
topics created with the source's partition count and configs, group offsets translated, typed errors; handing a
kafkalog directory to the stopped broker and consuming it through the broker; the broker's own directory opened,
appended to and served again. Not part of `make test` (it needs a broker)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import engine
from bench.kafka_broker import KafkaBroker
from engine import mirror
from engine.common import errors
from tests.mirror import kafka_cluster as kc
from tests.mirror.test_mirror import (_count, _kill_trials, _mirror_cmd, _run_to_end,
                                      fill_kafka, fill_kafkalog, kafka_records, kafkalog_records,
                                      mirror_a_source_with_every_other_offset_gone)

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

RECORDS = int(os.environ.get("KAFKALOG_INTEROP_RECORDS", "1000000"))
KILLS = int(os.environ.get("KAFKALOG_INTEROP_KILLS", "5"))
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise pytest.UsageError("make interop needs KAFKA_HOME: a Kafka installation or a broker build folder")
    b = KafkaBroker(home, str(tmp_path_factory.mktemp("broker")))
    b.start()
    yield b
    b.stop()


def _admin(broker) -> AdminClient:
    """One admin client per broker (its futures fail if the client is freed before they are done)."""
    if not hasattr(broker, "admin"):
        broker.admin = AdminClient(kc.config(broker.bootstrap))
    return broker.admin


def _partitions(broker, topic: str) -> int:
    return len(_admin(broker).list_topics(topic, timeout=30).topics[topic].partitions)


def test_a_compacted_source_with_every_other_offset_gone_keeps_its_progress_small(tmp_path, broker):
    """A million source offsets, every other one compacted away: progress records under 64 KiB each, the broker
    holding every kept record once, and groups translated exactly."""
    mirror_a_source_with_every_other_offset_gone(tmp_path, broker.bootstrap, RECORDS, True)


def test_a_million_records_to_kafka_exactly_once_across_kill_9(tmp_path, broker):
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "to-kafka", PARTITIONS, RECORDS // PARTITIONS, size=100, txn_every=2000)
    with engine.open(src) as eng:
        eng.alter_topic_config("to-kafka", {"retention.ms": 123456789, "min.insync.replicas": 1})
    cmd = _mirror_cmd(src, "--to-kafka", broker.bootstrap) + ["--max-records", "50000"]
    _kill_trials(cmd, KILLS, 1, RECORDS // 50000,
                 lambda: _count(kafka_records(broker.bootstrap, "to-kafka", PARTITIONS, True)), _count(model))
    _run_to_end(cmd)
    assert _partitions(broker, "to-kafka") == PARTITIONS
    resource = ConfigResource("topic", "to-kafka")
    configs = _admin(broker).describe_configs([resource])[resource].result()
    assert configs["retention.ms"].value == "123456789"
    got = kafka_records(broker.bootstrap, "to-kafka", PARTITIONS, real_broker=True)
    assert [len(got[p]) for p in range(PARTITIONS)] == [len(model[p]) for p in range(PARTITIONS)]
    assert got == model


def test_a_million_records_from_kafka_exactly_once_across_kill_9(tmp_path, broker):
    _admin(broker).create_topics([NewTopic("from-kafka", PARTITIONS, 1, config={"retention.ms": "987654321"})])[
        "from-kafka"].result()
    model = fill_kafka(broker.bootstrap, "from-kafka", PARTITIONS, RECORDS // PARTITIONS, size=100,
                       txn_every=2000, aborted_in_log=True)
    dst = str(tmp_path / "dst")
    cmd = _mirror_cmd(dst, "--from-kafka", broker.bootstrap, "--topic", "from-kafka") + ["--max-records", "50000"]
    _kill_trials(cmd, KILLS, 2, RECORDS // 50000,
                 lambda: _count(kafkalog_records(dst, "from-kafka")) if os.path.exists(dst) else 0, _count(model))
    _run_to_end(cmd)
    with engine.open(dst) as eng:
        desc = eng.describe_topic("from-kafka")
        assert len(desc.partitions) == PARTITIONS and desc.config["retention.ms"] == 987654321
    got = kafkalog_records(dst, "from-kafka")
    assert [len(got[p]) for p in range(PARTITIONS)] == [len(model[p]) for p in range(PARTITIONS)]
    assert got == model


def test_group_offsets_move_to_the_broker_and_resume_exactly(tmp_path, broker):
    src = str(tmp_path / "src")
    fill_kafkalog(src, "groups", 1, 200)
    with engine.open(src) as eng:
        with eng.consumer("groups", group_id="app", auto_offset_reset="earliest", enable_auto_commit=False,
                          isolation_level="read_committed") as c:
            read = []
            while len(read) < 77:
                read.extend(r.value for recs in c.poll(100, max_records=77 - len(read)).values() for r in recs)
            c.commit()
    mirror.to_kafka(src, kc.config(broker.bootstrap), name="g", groups=["app"])
    consumer = ck.Consumer(kc.config(broker.bootstrap, **{"group.id": "app", "isolation.level": "read_committed",
                                                          "enable.partition.eof": True}))
    consumer.subscribe(["groups"])
    rest = []
    while True:
        m = consumer.poll(10)
        assert m is not None
        if m.error() is not None:
            assert m.error().code() == ck.KafkaError._PARTITION_EOF
            break
        rest.append(m.value())
    consumer.close()
    everything = [r[1] for r in kafka_records(broker.bootstrap, "groups", 1, real_broker=True)[0]]
    assert read + rest == everything and len(rest) == 200 - 77


def test_missing_topic_on_the_broker_is_a_typed_error(tmp_path, broker):
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="nope"):
        mirror.from_kafka(kc.config(broker.bootstrap), str(tmp_path / "dst"), name="x", topics=["nope"])


def test_a_directory_handed_to_the_broker_is_served_and_the_broker_directory_stays_openable(tmp_path, broker):
    src = str(tmp_path / "src")
    model = fill_kafkalog(src, "handed", 2, 3000, size=50)
    _admin(broker).create_topics([NewTopic("handed", 2, 1)])["handed"].result()
    assert _partitions(broker, "handed") == 2
    broker.stop()
    assert os.path.exists(os.path.join(broker.data, ".kafka_cleanshutdown"))
    out = subprocess.run([sys.executable, "-m", "engine", "handoff", "--data", src, "--broker-dir", broker.data,
                          "--topic", "handed", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    broker.start()
    assert kafka_records(broker.bootstrap, "handed", 2, real_broker=True) == model
    # the reverse: kafkalog opens the stopped broker's directory, appends, and the broker serves it again
    broker.stop()
    metadata_log = os.path.join(broker.data, "__cluster_metadata-0")
    before = {f: os.path.getsize(os.path.join(metadata_log, f)) for f in os.listdir(metadata_log)}
    with engine.open(broker.data) as eng:
        assert "__cluster_metadata" not in eng.list_topics()
        with eng.producer() as p:
            p.send("handed", key=b"after", value=b"kafkalog appended", partition=1, timestamp_ms=1).get()
    assert {f: os.path.getsize(os.path.join(metadata_log, f)) for f in os.listdir(metadata_log)} == before
    broker.start()
    got = kafka_records(broker.bootstrap, "handed", 2, real_broker=True)
    assert got[0] == model[0] and got[1] == model[1] + [(b"after", b"kafkalog appended", [], 1)]
    with pytest.raises(errors.LogDirectoryLockedError, match="stop it first"):
        from engine.tools.handoff import handoff
        handoff(src, broker.data, ["handed"])
    assert kafkalog_records(src, "handed") == model  # the kafkalog directory itself is unchanged
