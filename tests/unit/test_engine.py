"""The Engine: topics and their configs, persistence across close and kill -9, directory locking,
stray directories, and typed errors that leave nothing behind."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import engine
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidLogDirectoryError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidReplicationFactorError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirectoryLockedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from engine.segments.fs import FileSystem


def open_engine(path, **kw):
    return engine.open(str(path), clock=engine.ManualClock(), background=False, **kw)


def test_topic_lifecycle(tmp_path):
    with open_engine(tmp_path) as e:
        d = e.create_topic("events", partitions=3, config={"segment.bytes": 1 << 20, "retention.ms": 1000})
        assert [p.partition for p in d.partitions] == [0, 1, 2]
        assert d.config["segment.bytes"] == 1 << 20 and d.config["cleanup.policy"] == "delete"
        with open(os.path.join(tmp_path, "events-1", "partition.metadata")) as f:
            assert f.read() == f"version: 0\ntopic_id: {d.topic_id}"
        e.create_topic("other")
        assert e.list_topics() == ["events", "other"]
        assert e.alter_topic_config("events", {"retention.ms": 5000, "segment.bytes": None})["retention.ms"] == 5000
        assert e.log("events", 0).config.retention_ms == 5000 and e.log("events", 0).config.segment_bytes == 1 << 30
        e.delete_topic("other")
        assert e.list_topics() == ["events"] and not os.path.exists(tmp_path / "other-0")
        e.create_topic("other", partitions=2)  # a name can be reused after deletion
        assert len(e.describe_topic("other").partitions) == 2


def test_deleting_a_topic_does_not_flush_its_logs(tmp_path):
    """Kafka's asyncDelete renames the log and deletes it without a flush: the bytes are going."""
    synced = []

    class Counting(FileSystem):
        def fsync(self, f):
            synced.append(f.name)
            super().fsync(f)

    with engine.open(str(tmp_path), fs=Counting(), background=False) as e:
        e.create_topic("gone", partitions=2)
        e.create_topic("kept")
        with e.producer(linger_ms=0) as p:
            for topic in ("gone", "kept"):
                p.send(topic, b"v", partition=0).get()
        synced.clear()
        e.delete_topic("gone")
        assert not any("gone-" in name for name in synced), synced
        assert not os.path.exists(tmp_path / "gone-0") and e.list_topics() == ["kept"]
    with engine.open(str(tmp_path), background=False) as e:
        assert e.list_topics() == ["kept"]
        assert not [d for d in os.listdir(tmp_path) if d.startswith("gone")]


@pytest.mark.parametrize("creating", ["slow", "__transaction_state"])
def test_clients_go_on_while_a_topic_is_created(tmp_path, creating):
    """Creating a topic (a user's, or an internal one on a transactional producer's first call) writes its partition
    directories under the engine's admin lock, which the stress harness found slow enough (sanitizers, 3 brokers) to
    stop every other thread: here the creation stops at its second partition until the clients are done, and
    meanwhile a producer sends, new clients register, a consumer reads and commits its group's offset (the group
    coordinator made then); the topic stays unknown to them until it is whole."""
    reached, release = threading.Event(), threading.Event()

    class Stalling(FileSystem):
        def makedirs(self, path):  # (the creation of a partition's directory)
            if path.endswith(f"{os.sep}{creating}-1") and not reached.is_set():
                reached.set()
                release.wait(60)
            super().makedirs(path)

    e = engine.open(str(tmp_path), fs=Stalling(), brokers=3)
    e.create_topic("events", replication_factor=3)
    e.internal.ensure_internal_topic("__consumer_offsets")  # (a commit would create it: a topic change of its own)

    def create():
        if creating == "slow":
            e.create_topic("slow", partitions=3, replication_factor=3)
        else:
            with e.producer(transactional_id="tx") as p:
                p.init_transactions()

    seen = {}

    def use():
        seen["topics"] = e.list_topics()
        with e.producer(acks="all") as p:
            seen["offset"] = p.send("events", b"v").get(timeout=30).offset
        with pytest.raises(UnknownTopicOrPartitionError):
            e.partitions_for("slow")
        seen["internal"] = e.internal.internal_topics()
        with e.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as c:
            c.assign([("events", 0)])
            seen["read"] = [r.value for records in c.poll(timeout_ms=30_000).values() for r in records]
            c.commit()
            seen["committed"] = c.committed(("events", 0))

    creator = threading.Thread(target=create)
    creator.start()
    try:
        assert reached.wait(60), "the creation never reached its second partition"
        user = threading.Thread(target=use)
        user.start()
        user.join(60)
        stuck = user.is_alive()
    finally:
        release.set()
        creator.join(60)
    try:
        assert not stuck, "the clients waited for the topic's creation"
        assert seen == {"topics": ["events"], "offset": 0, "internal": {"__consumer_offsets": 50}, "read": [b"v"],
                        "committed": 1}
        if creating == "slow":
            assert e.partitions_for("slow") == 3
        else:
            assert e.internal.internal_topics() == {"__consumer_offsets": 50, creating: 50}
    finally:
        e.close()


def test_a_failed_creation_is_undone_in_the_catalogue_another_thread_wrote_meanwhile(tmp_path):
    """A producer-id block persisted while a topic is being created writes the catalogue with that topic in it; the
    creation then fails at its second partition, and the catalogue is rewritten without it: reopened, the directory
    has no such topic."""
    reached, release = threading.Event(), threading.Event()

    class Failing(FileSystem):
        def makedirs(self, path):  # (the creation of a partition's directory)
            if path.endswith(f"{os.sep}slow-1"):
                reached.set()
                release.wait(60)
                raise OSError(28, "No space left on device", path)
            super().makedirs(path)

    e = engine.open(str(tmp_path), fs=Failing())
    failed = []

    def create():
        try:
            e.create_topic("slow", partitions=2)
        except KafkaStorageError as exc:
            failed.append(exc)

    creator = threading.Thread(target=create)
    creator.start()
    try:
        assert reached.wait(60), "the creation never reached its second partition"
        e.allocate_producer_id()  # the first id since open starts a block, which is persisted with the catalogue
        with open(tmp_path / "kafkalog.metadata") as f:
            assert "slow" in json.load(f)["topics"]
    finally:
        release.set()
        creator.join(60)
    assert len(failed) == 1 and e.list_topics() == []
    e.close()
    with open_engine(tmp_path) as e:
        assert e.list_topics() == [] and not os.path.exists(tmp_path / "slow-0")


@pytest.mark.parametrize("call, error", [
    (lambda e: e.create_topic("bad name"), InvalidTopicError),
    (lambda e: e.create_topic("x" * 250), InvalidTopicError),
    (lambda e: e.create_topic(".."), InvalidTopicError),
    (lambda e: e.create_topic("__consumer_offsets"), InvalidTopicError),
    (lambda e: e.create_topic("__transaction_state"), InvalidTopicError),
    (lambda e: e.create_topic("a_b"), InvalidTopicError),  # collides with a.b
    (lambda e: e.create_topic("a.b"), TopicAlreadyExistsError),
    (lambda e: e.create_topic("n", partitions=0), InvalidPartitionsError),
    (lambda e: e.create_topic("n", partitions="3"), InvalidPartitionsError),
    (lambda e: e.create_topic("n", replication_factor=0), InvalidReplicationFactorError),
    (lambda e: e.create_topic("n", replication_factor=3), InvalidReplicationFactorError),  # one broker
    (lambda e: e.create_topic("n", config={"segment.bytes": -1}), InvalidConfigurationError),
    (lambda e: e.create_topic("n", config={"no.such.config": 1}), InvalidConfigurationError),
    (lambda e: e.create_topic("n", config={"cleanup.policy": "compacted"}), InvalidConfigurationError),
    (lambda e: e.compact("a.b"), InvalidConfigurationError),  # cleanup.policy=delete: nothing to compact
    (lambda e: e.compact("nope"), UnknownTopicOrPartitionError),
    (lambda e: e.alter_topic_config("a.b", {"retention.ms": "soon"}), InvalidConfigurationError),
    (lambda e: e.alter_topic_config("nope", {}), UnknownTopicOrPartitionError),
    (lambda e: e.delete_topic("nope"), UnknownTopicOrPartitionError),
    (lambda e: e.describe_topic("nope"), UnknownTopicOrPartitionError),
    (lambda e: e.log("__consumer_offsets", 0), InvalidTopicError),
    (lambda e: e.log("../a.b", 0), InvalidTopicError),
    (lambda e: e.create_topic("n", config="notadict"), InvalidConfigurationError),
    (lambda e: e.create_topic("n", config=[("segment.bytes", 1 << 20)]), InvalidConfigurationError),
    (lambda e: e.create_topic("n", config={1: 2}), InvalidConfigurationError),
    (lambda e: e.consumer().assign([engine.TopicPartition("../a.b", 0)]), InvalidTopicError),
    (lambda e: e.consumer().subscribe(["a/b"]), InvalidTopicError),
    (lambda e: e.producer().send("__consumer_offsets", b"v"), InvalidTopicError),
    (lambda e: e.producer().send("a.b", b"v", timestamp_ms=2**63), InvalidTimestampError),
    (lambda e: e.producer().send("a.b", b"v", headers=[("\ud800", b"x")]), InvalidRecordError),
    (lambda e: e.producer(enable_idempotence=True).send("a.b", b"v", headers=[("\udfff", b"x")]),
     InvalidRecordError),
])
def test_bad_admin_calls_are_typed_and_write_nothing(tmp_path, call, error):
    with open_engine(tmp_path) as e:
        e.create_topic("a.b")
        before = sorted(os.listdir(tmp_path)), e.describe_topic("a.b")
        with pytest.raises(error):
            call(e)
        assert (sorted(os.listdir(tmp_path)), e.describe_topic("a.b")) == before


def test_unknown_engine_option(tmp_path):
    with pytest.raises(InvalidConfigurationError):
        engine.open(str(tmp_path), replicas=3)


@pytest.mark.parametrize("path, error", [
    ("", InvalidConfigurationError),            # not the current directory
    (None, InvalidConfigurationError),
    (42, InvalidConfigurationError),
    ("a\0b", InvalidConfigurationError),
    ("file", InvalidLogDirectoryError),         # a file, not a directory
    ("file/below", InvalidLogDirectoryError),   # under a file
])
def test_paths_that_cannot_be_a_log_directory_are_typed(tmp_path, monkeypatch, path, error):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_bytes(b"x")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(error) as info:
        engine.open(path, background=False)
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, the cwd least of all
    if error is InvalidLogDirectoryError:
        assert info.value.file == os.path.abspath(path) and not info.value.retriable


def test_a_directory_that_cannot_be_locked_is_not_reported_as_locked(tmp_path):
    """The lock file cannot be created (a read-only directory): that is not another process holding it."""
    from engine.segments.fs import FileSystem

    class ReadOnly(FileSystem):
        def lock(self, path):
            raise PermissionError(13, "Permission denied", path)

    with pytest.raises(InvalidLogDirectoryError, match="Permission denied") as info:
        engine.open(str(tmp_path), fs=ReadOnly(), background=False)
    assert not isinstance(info.value, LogDirectoryLockedError)


def test_new_files_and_directories_honour_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with open_engine(tmp_path / "d") as e:
            e.create_topic("events", partitions=2)
            with e.producer() as p:
                p.send("events", value=b"v", partition=1).get()
            e.log("events", 1).roll()
    finally:
        os.umask(old)
    modes = {}
    for root, dirs, files in os.walk(tmp_path / "d"):
        for name in dirs + files:
            modes[os.path.join(root, name)] = os.stat(os.path.join(root, name)).st_mode & 0o777
    assert len(modes) > 10 and not [p for p, m in modes.items() if m & 0o027], modes
    assert all(m & 0o111 == 0 for p, m in modes.items() if os.path.isfile(p))


def test_only_canonical_partition_directories_are_adopted(tmp_path):
    """`t-01` or `t-99999999999` is not a partition directory (Kafka's names carry an int32 without leading
    zeros): it is never taken for `t-1`, nor opened."""
    with open_engine(tmp_path) as e:
        e.create_topic("t", partitions=2)
        e.append("t", 1, engine.encode_batch([(None, b"one", None, 5)]))
    os.remove(tmp_path / "kafkalog.metadata")
    for odd in ("t-01", "t-99999999999", "t-\u0661"):  # the last is an Arabic-Indic digit one
        os.makedirs(tmp_path / odd)
    with open_engine(tmp_path) as e:
        d = e.describe_topic("t")
        assert len(d.partitions) == 2 and d.partitions[1].log_end_offset == 1


def test_close_and_reopen_keep_everything(tmp_path):
    with open_engine(tmp_path) as e:
        tid = e.create_topic("events", partitions=2, config={"retention.ms": 1234}).topic_id
        with e.producer() as p:
            for i in range(100):
                p.send("events", key=b"k%d" % i, value=b"v%d" % i)
            pid = p.producer_id
    assert os.path.exists(tmp_path / ".kafka_cleanshutdown")
    with open_engine(tmp_path) as e:
        d = e.describe_topic("events")
        assert d.topic_id == tid and d.config["retention.ms"] == 1234
        assert sum(p.log_end_offset for p in d.partitions) == 100
        with e.consumer("events", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
            assert sorted(r.value for r in c) == sorted(b"v%d" % i for i in range(100))
        assert e.producer().producer_id > pid


def test_a_second_open_fails_clearly(tmp_path):
    with open_engine(tmp_path):
        with pytest.raises(LogDirectoryLockedError):
            open_engine(tmp_path)
        other = subprocess.run([sys.executable, "-c", f"import engine; engine.open({str(tmp_path)!r})"],
                               capture_output=True, text=True)
        assert other.returncode != 0 and "LogDirectoryLockedError" in other.stderr


def test_unknown_partition_directories_are_set_aside(tmp_path):
    with open_engine(tmp_path) as e:
        e.create_topic("events")
    os.makedirs(tmp_path / "ghost-0")  # e.g. a create that crashed before the catalogue was written
    with open_engine(tmp_path) as e:
        assert e.list_topics() == ["events"]
    assert any(n.startswith("ghost-0.") and n.endswith("-stray") for n in os.listdir(tmp_path))


def test_a_kafka_directory_without_a_catalogue_is_adopted(tmp_path):
    with open_engine(tmp_path) as e:
        tid = e.create_topic("events", partitions=2).topic_id
        with e.producer() as p:
            p.send("events", value=b"kept", partition=1).get()
    os.remove(tmp_path / "kafkalog.metadata")
    os.makedirs(tmp_path / "__consumer_offsets-7")  # a broker's internal topic: left alone
    with open_engine(tmp_path) as e:
        d = e.describe_topic("events")
        assert d.topic_id == tid and len(d.partitions) == 2 and d.partitions[1].log_end_offset == 1
        assert e.list_topics() == ["events"]
    assert os.path.isdir(tmp_path / "__consumer_offsets-7")


CHILD = textwrap.dedent("""
    import json, os, sys
    import engine
    path, progress = sys.argv[1], sys.argv[2]
    e = engine.open(path)
    if "t" not in e.list_topics():
        e.create_topic("t", config={"segment.bytes": 4096})
    p = e.producer(linger_ms=60_000)
    n = 0
    while True:
        for i in range(10):
            p.send("t", value=b"%d" % (n * 10 + i), partition=0)
        p.flush()
        n += 1
        with open(progress + ".tmp", "w") as f:
            json.dump({"pid": p.producer_id, "epoch": p.producer_epoch, "batches": n}, f)
        os.replace(progress + ".tmp", progress)
""")


@pytest.mark.parametrize("kill_after", [5, 37])
def test_kill_9_mid_produce_then_resend_is_a_duplicate(tmp_path, kill_after):
    data, progress = str(tmp_path / "data"), str(tmp_path / "progress.json")
    child = subprocess.Popen([sys.executable, "-c", CHILD, data, progress])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(progress) and json.load(open(progress))["batches"] >= kill_after:
                break
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    state = json.load(open(progress))
    with engine.open(data) as e:
        assert e.list_topics() == ["t"] and e.describe_topic("t").config["segment.bytes"] == 4096
        lg = e.log("t", 0)
        assert lg.log_end_offset % 10 == 0 and lg.log_end_offset >= state["batches"] * 10
        k = state["batches"] - 1  # the last batch the child saw acknowledged
        resend = engine.encode_batch([(None, b"%d" % (k * 10 + i), None, 1) for i in range(10)],
                                     producer_id=state["pid"], producer_epoch=state["epoch"], base_sequence=k * 10)
        info = lg.append_as_leader(resend)
        assert info.duplicate and info.first_offset == k * 10
        with e.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
            assert [r.value for r in c] == [b"%d" % i for i in range(lg.log_end_offset)]
        assert e.producer().producer_id > state["pid"]


def test_close_stops_every_background_thread(tmp_path):
    import threading
    before = set(threading.enumerate())  # another test's server (a session fixture) may run in this process
    e = engine.open(str(tmp_path))
    e.create_topic("t")
    p = e.producer(linger_ms=10)
    p.send("t", value=b"v")
    ours = [t for t in set(threading.enumerate()) - before if t.name.startswith("kafkalog-")]
    assert len(ours) == 3  # the log manager's, the log cleaner's and the producer's sender
    e.close()  # closes the producer too (flushing what it holds)
    assert not any(t.is_alive() for t in ours)
    with engine.open(str(tmp_path), background=False) as again:
        assert again.describe_topic("t").partitions[0].log_end_offset == 1


def test_a_closed_engine_answers_nothing(tmp_path):
    eng = engine.open(str(tmp_path))
    eng.create_topic("t")
    eng.close()
    for call in (eng.list_topics, lambda: eng.describe_topic("t"), lambda: eng.create_topic("u")):
        with pytest.raises(IllegalStateError, match="closed"):
            call()


def test_create_partitions_reaches_live_clients_and_survives_reopen(tmp_path):
    import engine.clients.accumulator

    murmur2 = engine.clients.accumulator.selected.murmur2
    with engine.open(str(tmp_path)) as eng:
        eng.create_topic("t", partitions=2)
        producer = eng.producer()
        consumer = eng.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0)
        producer.send("t", key=b"k", value=b"before").get()
        with pytest.raises(InvalidPartitionsError):
            eng.create_partitions("t", 2)
        assert [p.partition for p in eng.create_partitions("t", 5).partitions] == [0, 1, 2, 3, 4]
        keys = [b"key-%d" % i for i in range(40)]
        placed = [producer.send("t", key=k, value=b"after").get().partition for k in keys]
        assert placed == [(murmur2(k) & 0x7FFFFFFF) % 5 for k in keys] and max(placed) >= 2
        assert {tp.partition for tp in consumer.assignment()} == set(range(5))
        got = sorted((r.partition, r.key) for r in consumer)
        assert got == sorted([((murmur2(b"k") & 0x7FFFFFFF) % 2, b"k")] + list(zip(placed, keys)))
        producer.close()
    with engine.open(str(tmp_path)) as eng:
        assert eng.partitions_for("t") == 5 and not [n for n in os.listdir(tmp_path) if n.endswith("-stray")]


def test_a_clean_close_says_nothing(tmp_path, caplog, capfd):
    """No "background task failed: the engine is closed" at close: the engine's background tasks do nothing once
    close() has begun (checked directly, since the race that printed it needs a task to run mid-close)."""
    import logging
    caplog.set_level(logging.INFO, logger="kafkalog")
    for i in range(5):
        with engine.open(tmp_path / "d") as eng:
            eng.create_topic(f"t{i}")
            with eng.producer() as p:
                p.send(f"t{i}", b"x").get()
            tasks = eng._logs._tasks
        assert tasks["staged-writes"][1]() is None  # after close: nothing, no IllegalStateError
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert capfd.readouterr().err == ""


def test_a_brokers_metadata_log_is_left_untouched(tmp_path):
    """A stopped KRaft broker's log directory holds `__cluster_metadata-0`, the broker's metadata log (here the
    Kafka-written vector of one). Kafka's LogManager loads no log from it (loadLogs skips the metadata topic); the
    engine neither recovers it nor indexes it nor names it in a checkpoint: its files stay byte for byte."""
    import hashlib
    from tests import vectors
    meta = tmp_path / "broker" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    (meta / "00000000000000000000.log").write_bytes(vectors.METADATA_LOG.read_bytes())
    (meta / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0}')
    (meta / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")

    def files() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(meta.iterdir())}

    before = files()
    for i in range(2):  # an adopting open, then an ordinary one
        with engine.open(tmp_path / "broker") as eng:
            eng.create_topic(f"t{i}")
            assert eng.recovery_notes() == [] or all("__cluster_metadata" not in n for n in eng.recovery_notes())
    assert files() == before
    assert sorted(p.name for p in (tmp_path / "broker").iterdir() if "cluster_metadata" in p.name) == \
        ["__cluster_metadata-0"]
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        path = tmp_path / "broker" / name
        assert not path.exists() or "__cluster_metadata" not in path.read_text()


def test_a_partition_that_lost_its_metadata_file_keeps_its_records(tmp_path, caplog):
    """partition.metadata deleted (or lost to an unclean shutdown): Kafka takes the directory for a stray that never
    received data (LogManager.isStrayKraftReplica) and the records vanish from the topic. The catalogue says whose
    it is: the file is written again with the topic's id and every record stays."""
    import logging
    with engine.open(tmp_path / "d") as eng:
        eng.create_topic("t", partitions=2)
        topic_id = eng.describe_topic("t").topic_id
        with eng.producer() as p:
            for i in range(343):
                p.send("t", b"%d" % i, partition=1)
    os.remove(tmp_path / "d" / "t-1" / "partition.metadata")
    caplog.set_level(logging.INFO, logger="kafkalog")
    with engine.open(tmp_path / "d") as eng:
        c = eng.consumer(auto_offset_reset="earliest", consumer_timeout_ms=200)
        c.assign([engine.TopicPartition("t", 1)])
        assert [r.value for r in c] == [b"%d" % i for i in range(343)]
        assert any("missing partition.metadata" in n and "343 records" in n for n in eng.recovery_notes())
    assert (tmp_path / "d" / "t-1" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}"
    assert not [p for p in os.listdir(tmp_path / "d") if p.endswith("-stray")]


def test_a_stray_directory_is_set_aside_loudly_and_recovery_speaks_in_lines(tmp_path, caplog):
    """A partition directory the catalogue does not know is set aside (Kafka's `-stray`) with a WARNING naming both
    paths, and listed in the recovery notes. Recovery logs one readable line for a partition it had to repair and
    nothing for a clean one."""
    import logging
    with engine.open(tmp_path / "d") as eng:
        eng.create_topic("t")
        with eng.producer() as p:
            p.send("t", b"kept").get()
    ghost = tmp_path / "d" / "ghost-0"
    shutil.copytree(tmp_path / "d" / "t-0", ghost)
    caplog.set_level(logging.INFO, logger="kafkalog")
    with engine.open(tmp_path / "d") as eng:
        notes = eng.recovery_notes()
    strays = [p for p in os.listdir(tmp_path / "d") if p.startswith("ghost-0.") and p.endswith("-stray")]
    assert len(strays) == 1
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(ghost) in m and strays[0] in m for m in said), said
    assert any(strays[0] in n and "no topic of that name" in n for n in notes), notes
    assert not any("RecoveryReport(" in m for m in said)
    caplog.clear()
    engine.open(tmp_path / "d").close()  # clean: nothing to say
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    log_file = tmp_path / "d" / "t-0" / "00000000000000000000.log"
    with open(log_file, "ab") as f:
        f.write(b"\x00" * 30)  # a torn tail
    (tmp_path / "d" / ".kafka_cleanshutdown").unlink()
    caplog.clear()
    engine.open(tmp_path / "d").close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "recovered" in r.getMessage()]
    assert len(said) == 1 and "t-0" in said[0] and "cutting 30 bytes" in said[0], said
