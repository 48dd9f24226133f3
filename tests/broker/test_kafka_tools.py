"""`make interop`: Kafka's own command-line tools and Java clients (KAFKA_HOME's) against a kafkalog listener in this
process: TopicCommand creates and describes a topic, ConsoleProducer and ConsoleConsumer (in a group) move records,
GetOffsetShell lists offsets, ProducerPerformance (Java's idempotent producer, acks=all) and ConsumerPerformance (a
Java consumer group) run, and TransactionsCommand lists and describes an open transaction and its producers; the
in-process API sees the same records and groups. Not part of `make test` (it needs a Kafka build)."""
from __future__ import annotations

import os
import subprocess

import pytest

import engine

RECORDS = int(os.environ.get("KAFKALOG_TOOLS_RECORDS", "200000"))


@pytest.fixture(scope="module")
def run_class():
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise pytest.UsageError("make interop needs KAFKA_HOME: a Kafka installation or a broker build folder")
    for name in ("bin/kafka-run-class.sh", "kafka-run-class"):
        path = os.path.join(home, name)
        if os.access(path, os.X_OK):
            return path
    raise pytest.UsageError(f"KAFKA_HOME={home!r} has no kafka-run-class")


def _tool(run_class: str, *args: str, stdin: str = "") -> str:
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx512m"}
    quiet = os.path.join(os.path.dirname(run_class), "log4j2-tools.properties")  # (a build folder's tools logging)
    if os.path.exists(quiet):
        env["KAFKA_LOG4J"] = quiet
    done = subprocess.run([run_class, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith("["))


def test_kafkas_tools_against_the_listener(tmp_path, run_class):
    from confluent_kafka import Producer

    with engine.open(str(tmp_path / "data")) as eng, eng.serve(port=0) as listener:
        b = listener.bootstrap
        _tool(run_class, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--create", "--topic",
              "tools", "--partitions", "3", "--config", "retention.ms=86400000")
        assert eng.partitions_for("tools") == 3 and eng.describe_topic("tools").config["retention.ms"] == 86400000
        described = _tool(run_class, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--describe",
                          "--topic", "tools")
        assert described.count("Leader: 0") == 3 and "retention.ms=86400000" in described
        _tool(run_class, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", b, "--topic", "tools",
              "--property", "parse.key=true", stdin="k1\tv1\nk2\tv2\nk3\tv3\n")
        consumed = _tool(run_class, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", b,
                         "--topic", "tools", "--from-beginning", "--group", "console", "--max-messages", "3",
                         "--timeout-ms", "20000", "--property", "print.key=true")
        assert sorted(line for line in consumed.splitlines() if line.startswith("k")) == \
            ["k1\tv1", "k2\tv2", "k3\tv3"]
        assert sum(om.offset for om in eng.committed_offsets(
            "console", [("tools", p) for p in range(3)]).values()) == 3
        offsets = _tool(run_class, "org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", b, "--topic",
                        "tools")
        assert sorted(w for w in offsets.split() if w.startswith("tools:")) == \
            sorted(f"tools:{p}:{eng.partition('tools', p).high_watermark}" for p in range(3))
        newest = _tool(run_class, "org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", b, "--topic",
                       "tools", "--time", "-3")  # the record with the largest timestamp (the Admin API's ListOffsets)
        assert sorted(w for w in newest.split() if w.startswith("tools:")) == \
            sorted(f"tools:{p}:{eng.partition('tools', p).offset_for_timestamp(-3)[1]}" for p in range(3)
                   if eng.partition("tools", p).high_watermark)
        perf = _tool(run_class, "org.apache.kafka.tools.ProducerPerformance", "--topic", "tools", "--num-records",
                     str(RECORDS), "--record-size", "100", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={b}", "acks=all", "enable.idempotence=true")
        assert f"{RECORDS} records sent" in perf
        assert sum(eng.partition("tools", p).high_watermark for p in range(3)) == RECORDS + 3
        read = _tool(run_class, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", b, "--topic",
                     "tools", "--messages", str(RECORDS + 3), "--timeout", "60000", "--group", "perf")
        assert f", {RECORDS + 3}, " in read.splitlines()[-1]
        producer = Producer({"bootstrap.servers": b, "transactional.id": "left-open"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tools", value=b"pending", partition=0)
        producer.flush(30)
        listed = _tool(run_class, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b, "list")
        assert "left-open" in listed and "Ongoing" in listed
        one = _tool(run_class, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b, "describe",
                    "--transactional-id", "left-open")
        assert "Ongoing" in one and "tools-0" in one
        producers = _tool(run_class, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b,
                          "describe-producers", "--topic", "tools", "--partition", "0")
        open_txn = eng.describe_topic("tools").partitions[0].log_end_offset - 1
        assert str(open_txn) in producers  # the open transaction's first offset
        producer.abort_transaction(30)


def test_kafkas_java_consumer_in_a_consumer_protocol_group_and_its_dump_of_the_group_records(tmp_path, run_class):
    """Kafka's ConsoleConsumer with group.protocol=consumer (KIP-848) reads and commits through ConsumerGroupHeartbeat;
    then Kafka's DumpLogSegments reads every consumer group record kafkalog wrote to `__consumer_offsets` (keys 3 to
    8), and its JSON of each holds the values kafkalog's own decoder reads from the same bytes."""
    from engine.groups import consumer_group_records as records

    data = str(tmp_path / "data")
    with engine.open(data) as eng, eng.serve(port=0) as listener:
        b = listener.bootstrap
        eng.create_topic("kip848", 3)
        with eng.producer() as producer:
            for i in range(30):
                producer.send("kip848", key=b"%d" % i, value=b"v%d" % i)
        consumed = _tool(run_class, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", b,
                         "--topic", "kip848", "--from-beginning", "--group", "java848", "--max-messages", "30",
                         "--timeout-ms", "30000", "--consumer-property", "group.protocol=consumer")
        assert sorted(line for line in consumed.splitlines() if line.startswith("v")) == \
            sorted(f"v{i}" for i in range(30))
        assert sum(om.offset for om in eng.committed_offsets(
            "java848", [("kip848", p) for p in range(3)]).values()) == 30
        assert eng.groups.describe_consumer_group("java848").state == "Empty"  # it left (epoch -1)
        ours = _consumer_group_records(eng, "java848")
        subscribed = records.metadata_hash({"kip848": (eng.admin.topic_id_of("kip848"), 3)})
    # every kind but Kafka 4.0's partition metadata (4), which Kafka 4.1's metadata hash in the epoch record replaced
    # (the member's join carries the topic's, its leaving 0: no topic is subscribed then), and the resolved regular
    # expression (16), which a subscription by name does not make
    assert {r.kind for r in ours} == set(records.KINDS) - {records.PARTITION_METADATA, records.REGULAR_EXPRESSION}
    assert [r.value["metadata_hash"] for r in ours if r.kind == records.GROUP_EPOCH] == [subscribed, 0]
    _kafka_dumps_the_same(run_class, data, "java848", ours)


def _consumer_group_records(eng, group_id: str) -> list:
    """The consumer group records (keys 3 to 8, and 16) kafkalog wrote to `group_id`'s `__consumer_offsets` partition."""
    from engine.groups import consumer_group_records as records
    from engine.groups import offsets

    log = eng.internal.internal_partition(offsets.TOPIC, offsets.partition(group_id)).log
    return [records.decode(r.key, r.value) for batch in log.read(0, max_bytes=1 << 30).batches()
            for r in batch.records() if records.is_consumer_group_key(r.key)]


def _kafka_dumps_the_same(run_class: str, data: str, group_id: str, ours: list) -> None:
    """Kafka's DumpLogSegments (--offsets-decoder) of `group_id`'s `__consumer_offsets` partition shows each consumer
    group record with the values kafkalog's own decoder reads from the same bytes (bytes fields as base64)."""
    import base64
    import json

    from engine.groups import consumer_group_records as records
    from engine.groups import offsets
    from tests.broker.test_kafka_messages import _camel

    folder = os.path.join(data, f"{offsets.TOPIC}-{offsets.partition(group_id)}")
    segments = sorted(f for f in os.listdir(folder) if f.endswith(".log"))
    dumped = _tool(run_class, "kafka.tools.DumpLogSegments", "--offsets-decoder", "--print-data-log", "--files",
                   ",".join(os.path.join(folder, f) for f in segments))
    theirs = []
    for line in dumped.splitlines():
        if " key: " in line and " payload: " in line:
            key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
            key = json.loads(key)
            if int(key["type"]) in records.KINDS:
                theirs.append((key, None if payload.strip() == "<DELETE>" else json.loads(payload)))
    assert len(theirs) == len(ours)

    def as_json(value):
        if isinstance(value, dict):
            return {_camel(k): as_json(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [as_json(v) for v in value]
        if isinstance(value, (bytes, bytearray)):
            return base64.b64encode(value).decode()
        return records.topic_id_text(value) if hasattr(value, "bytes") else value

    hashes = _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class")  # (4.1+)
    for ((key, payload), r) in zip(theirs, ours):
        assert int(key["type"]) == r.kind and key["data"]["groupId"] == r.group_id
        second = "regularExpression" if r.kind == records.REGULAR_EXPRESSION else "memberId"
        assert key["data"].get(second, "") == r.member_id
        if r.value is None:
            assert payload is None
            continue
        mine, got = as_json(r.value), {k: v for k, v in payload["data"].items() if v is not None}
        if r.kind == records.GROUP_EPOCH:
            # Kafka 4.1's tagged MetadataHash: Kafka 4.0's decoder does not know it (it reads the record all the same)
            ours_hash = mine.pop("metadataHash")
            assert got.pop("metadataHash", 0) == (ours_hash if hashes else 0), (key, payload)
        assert got == mine, (key, payload)


def test_kafkas_dump_reads_an_online_migrations_records(tmp_path, run_class):
    """A classic group upgraded by a member of the consumer protocol and downgraded when it leaves (in process):
    Kafka's DumpLogSegments reads each record of both conversions, the classic members' ClassicMemberMetadata
    (session timeout, protocols and their subscription bytes) among them, as kafkalog's decoder does."""
    from engine.groups import consumer_group_records as records

    data = str(tmp_path / "data")
    with engine.open(data, group_config={"group_consumer_heartbeat_interval_ms": 50}) as eng:
        eng.create_topic("mig", 4)
        classic = eng.consumer(group_id="migrating", auto_offset_reset="earliest", heartbeat_interval_ms=100)
        classic.subscribe(["mig"])
        for _ in range(100):
            classic.poll(timeout_ms=20)
            if len(classic.assignment()) == 4:
                break
        upgraded = eng.consumer(group_id="migrating", group_protocol="consumer")
        upgraded.subscribe(["mig"])
        for _ in range(300):
            classic.poll(timeout_ms=10)
            upgraded.poll(timeout_ms=10)
            if len(classic.assignment()) == 2 and len(upgraded.assignment()) == 2:
                break
        assert len(classic.assignment()) == len(upgraded.assignment()) == 2
        upgraded.close()  # the group is classic again
        assert eng.groups.describe_group("migrating").protocol_type == "consumer"
        classic.close()
        ours = _consumer_group_records(eng, "migrating")
    assert any(r.value and r.value.get("classic_member_metadata") for r in ours)
    assert any(r.value is None and r.kind == records.GROUP_EPOCH for r in ours)  # (the downgrade's tombstones)
    _kafka_dumps_the_same(run_class, data, "migrating", ours)


def test_kafkas_dump_reads_the_resolved_regular_expression_records(tmp_path, run_class):
    """A member subscribed by regular expression (in process); a matching topic is made, then the member leaves:
    Kafka 4.1's ConsumerGroupRegularExpression records (key 16: the match, again after the new topic, the
    tombstone) are in the group's partition, and Kafka's DumpLogSegments reads them as kafkalog's decoder does (a
    Kafka before 4.1 has no such record: its dump leaves them undecoded)."""
    from engine.groups import consumer_group_records as records
    from tests.unit.test_consumer_group_protocol import Client

    data = str(tmp_path / "data")
    with engine.open(data) as eng:
        eng.create_topic("rx-a", 2)
        member = Client(eng.groups, group="by-regex", topics=None, regex="rx-.*")
        member.beat()
        eng.create_topic("rx-b", 1)
        member.beat()
        member.beat(member_epoch=-1)
        ours = _consumer_group_records(eng, "by-regex")
    assert [(r.member_id, r.value and r.value["topics"]) for r in ours if r.kind == records.REGULAR_EXPRESSION] == \
        [("rx-.*", ["rx-a"]), ("rx-.*", ["rx-a", "rx-b"]), ("rx-.*", None)]
    if not _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class"):  # (before 4.1)
        ours = [r for r in ours if r.kind != records.REGULAR_EXPRESSION]
    _kafka_dumps_the_same(run_class, data, "by-regex", ours)


def _console_consumer(run_class: str, bootstrap: str, topic: str, group: str, *properties: str):
    """Kafka's ConsoleConsumer in a process of its own, printing each record's value, until its 20 s of silence."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"}
    quiet = os.path.join(os.path.dirname(run_class), "log4j2-tools.properties")
    if os.path.exists(quiet):
        env["KAFKA_LOG4J"] = quiet
    args = [run_class, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic",
            topic, "--group", group, "--from-beginning", "--timeout-ms", "20000"]
    for p in properties:
        args += ["--consumer-property", p]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_kafkas_java_consumers_migrate_a_group_online(tmp_path, run_class):
    """Kafka's own consumers judge the online migration: a ConsoleConsumer of the classic protocol holds the group,
    one of the consumer protocol joins it (the group becomes a consumer group, the classic member staying in it), and
    records produced then are split between the two, each read once."""
    import time

    data = str(tmp_path / "data")
    with engine.open(data, group_config={"group_consumer_heartbeat_interval_ms": 500}) as eng, \
            eng.serve(port=0) as listener:
        eng.create_topic("javamig", 4)
        classic = _console_consumer(run_class, listener.bootstrap, "javamig", "jmig")
        upgraded = None
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    "jmig" in eng.groups.groups and eng.groups.describe_group("jmig").state == "Stable"):
                time.sleep(0.2)
            assert eng.groups.describe_group("jmig").state == "Stable"
            upgraded = _console_consumer(run_class, listener.bootstrap, "javamig", "jmig", "group.protocol=consumer")
            while time.monotonic() < deadline:
                if "jmig" in eng.groups.consumer.groups:
                    d = eng.groups.describe_consumer_group("jmig")
                    shares = [m.assignment for m in d.members]
                    if d.state == "Stable" and len(d.members) == 2 and all(shares):
                        break
                time.sleep(0.2)
            d = eng.groups.describe_consumer_group("jmig")
            assert d.state == "Stable" and len(d.members) == 2
            assert sum(m.classic is not None for m in eng.groups.consumer.groups["jmig"].members.values()) == 1
            with eng.producer() as producer:
                for i in range(400):
                    producer.send("javamig", key=b"%d" % i, value=b"v%d" % i)
        finally:
            outputs = [p.communicate(timeout=120)[0] for p in (classic, upgraded) if p is not None]
    read = [sorted(line for line in out.splitlines() if line.startswith("v")) for out in outputs]
    assert all(read) and sorted(read[0] + read[1]) == sorted(f"v{i}" for i in range(400))



def test_kafkas_share_consumer_reads_a_queue_and_dump_reads_the_share_state(tmp_path, tmp_path_factory, run_class):
    """Kafka's KafkaShareConsumer (KIP-932, the broker build's: ShareGroupHeartbeat, ShareFetch and ShareAcknowledge
    v0) reads 100 keyed records of two partitions from a kafkalog share group, releasing the first delivery of every
    fifth: each record is accepted once, a released one comes back with its delivery count 2, and the share-partitions
    end at the log end. Then Kafka's DumpLogSegments (--share-group-state-decoder) reads every record kafkalog wrote to
    `__share_group_state` as kafkalog's own decoder reads it."""
    import json

    from tests.broker.checkpoint_corpus import kafka_java

    data = str(tmp_path / "data")
    with engine.open(data) as eng:
        listener = eng.serve(port=0)
        eng.create_topic("jobs", 2)
        eng.alter_group_configs("workers", {"share.auto.offset.reset": "earliest"})
        with eng.producer(linger_ms=0) as producer:
            for i in range(100):
                producer.send("jobs", b"x", key=b"%d" % i)
        keys = {(p, r.offset): int(r.key) for p in (0, 1)
                for b in eng.log("jobs", p).read(0, max_bytes=1 << 30).batches() for r in b}
        done = subprocess.run([*kafka_java(tmp_path_factory, "KafkaShareConsume"), listener.bootstrap, "workers",
                               "jobs", "100", "5", "90"], capture_output=True, text=True, timeout=300)
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert lines, done.stderr[-3000:]
        deliveries: dict[tuple[int, int], list] = {}
        for d in lines:
            deliveries.setdefault((d["partition"], d["offset"]), []).append((d["delivery"], d["released"]))
        assert set(deliveries) == set(keys)
        for where, seen in deliveries.items():
            want = [(1, True), (2, False)] if keys[where] % 5 == 0 else [(1, False)]
            assert seen == want, (where, seen)
        tid = eng.admin.topic_id_of("jobs")
        assert eng.share_groups.start_offsets("workers") == {
            (tid, p): eng.partition("jobs", p).high_watermark for p in (0, 1)}
    _kafka_dumps_the_share_state(run_class, data)


def test_kafkas_share_group_command_lists_describes_resets_and_deletes_a_share_group(tmp_path, run_class):
    """Kafka's kafka-share-groups.sh (ShareGroupCommand: ListGroups with a type filter, ShareGroupDescribe) against
    the listener: it lists the share group and not a consumer group beside it, with its state, and describes its
    member (id, client id, assignment) and its state as the coordinator holds them. With a Kafka whose Admin has the
    share group offsets calls (4.1+; the broker build's 4.0 tool says they are not implemented): the start offsets,
    a reset to the earliest offset (its dry run first), a topic's offsets deleted (an unknown topic refused beside
    it), and the group deleted."""
    command = _share_group_command(tmp_path, run_class)
    with engine.open(str(tmp_path / "data")) as eng, eng.serve(port=0) as listener:
        b = listener.bootstrap
        eng.create_topic("jobs", 2)
        with eng.producer(linger_ms=0) as producer:
            for i in range(10):
                producer.send("jobs", b"x", partition=i % 2)
        eng.alter_group_configs("workers", {"share.auto.offset.reset": "earliest"})
        with eng.consumer("jobs", group_id="classic") as c:
            c.poll(0)
        with eng.share_consumer("workers", ["jobs"], client_id="worker-1", max_poll_records=1) as member:
            for _ in range(5):
                member.poll(0)
                if member.assignment():
                    break
            assert len(member.assignment()) == 2
            listed = _tool(*command, "--bootstrap-server", b, "--list").split()
            assert listed == ["workers"]
            states = _tool(*command, "--bootstrap-server", b, "--list", "--state", "").split()
            assert states[-2:] == ["workers", "Stable"]
            members = _tool(*command, "--bootstrap-server", b, "--describe", "--group", "workers",
                            "--members").splitlines()
            [row] = [line.split() for line in members if line.startswith("workers")]
            assert row[:4] == ["workers", member.member_id, "/127.0.0.1", "worker-1"], members
            assert _assigned(row[-1]) == {("jobs", 0), ("jobs", 1)}, members  # (4.0: jobs:0,jobs:1; 4.2: jobs:0,1)
            state = _tool(*command, "--bootstrap-server", b, "--describe", "--group", "workers",
                          "--state").splitlines()
            assert [line.split()[-2:] for line in state if line.startswith("workers")] == [["Stable", "1"]], state
            # (one batch, accepted when the member closes: implicit mode)
            assert any(member.poll(100) for _ in range(100)), "the member was given no record"
        if not _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class"):
            return
        tid = eng.admin.topic_id_of("jobs")

        def rows(*args: str) -> dict[int, str]:
            out = _tool(*command, "--bootstrap-server", b, *args).splitlines()
            return {int(line.split()[2]): line.split()[3] for line in out if line.startswith("workers ")}

        starts = {p: o for (t, p), o in eng.share_groups.start_offsets("workers").items() if t == tid}
        assert sum(starts.values()) > 0  # (what the member accepted moved them)
        assert rows("--describe", "--group", "workers") == {p: str(o) for p, o in starts.items()}
        assert rows("--reset-offsets", "--group", "workers", "--topic", "jobs", "--to-earliest", "--dry-run") == \
            {0: "0", 1: "0"}
        assert eng.share_groups.start_offsets("workers") == {(tid, p): o for p, o in starts.items()}  # (a dry run)
        rows("--reset-offsets", "--group", "workers", "--topic", "jobs", "--to-earliest", "--execute")
        assert eng.share_groups.start_offsets("workers") == {(tid, 0): 0, (tid, 1): 0}
        deleted = _tool(*command, "--bootstrap-server", b, "--delete-offsets", "--group", "workers", "--topic",
                        "jobs", "--topic", "nope").splitlines()
        status = {line.split()[0]: " ".join(line.split()[1:]) for line in deleted
                  if line.split() and line.split()[0] != "TOPIC"}
        assert status == {"jobs": "Successful", "nope": "Error: This server does not host this topic-partition."}
        assert eng.share_groups.start_offsets("workers") == {}
        _tool(*command, "--bootstrap-server", b, "--delete", "--group", "workers")
        assert _tool(*command, "--bootstrap-server", b, "--list").split() == []


def _assigned(text: str) -> set[tuple[str, int]]:
    """The partitions of kafka-share-groups.sh's ASSIGNMENT column, in either layout: topic:p,topic:q or topic:p,q."""
    out, topic = set(), None
    for item in text.split(","):
        if ":" in item:
            topic, item = item.rsplit(":", 1)
        out.add((topic, int(item)))
    return out


def _kafka_has(run_class: str, path: str) -> bool:
    """Whether KAFKA_HOME's Kafka (a broker build folder's classes, or an installation's jars) has the class file
    `path` (an API newer than some Kafka releases)."""
    import zipfile

    from tests.broker.checkpoint_corpus import kafka_classpath

    for part in kafka_classpath(os.path.dirname(run_class)).split(os.pathsep) + \
            kafka_classpath(os.path.dirname(os.path.dirname(run_class))).split(os.pathsep):
        if os.path.isdir(part) and os.path.exists(os.path.join(part, path)):
            return True
        if part.endswith(".jar") and "kafka" in os.path.basename(part):
            with zipfile.ZipFile(part) as jar:
                if path in jar.namelist():
                    return True
    return False


def _share_group_command(tmp_path, run_class: str) -> list[str]:
    """kafka-share-groups.sh's class: KAFKA_HOME's own (an installation), or, in a broker build folder (which
    compiles only some tools), compiled here from the build's copy of Kafka's tools sources."""
    from tests.broker.checkpoint_corpus import kafka_classpath

    name = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    home = os.path.dirname(run_class)
    sources = os.path.join(home, "build", "tools-src", "tools", "src", "main", "java")
    if not os.path.isdir(sources):
        return [run_class, name]
    classpath = kafka_classpath(home)
    out = str(tmp_path / "share-group-command")
    subprocess.run(["javac", "-nowarn", "-d", out, "-cp", classpath, "-sourcepath", sources,
                    os.path.join(sources, *name.split(".")) + ".java"], check=True, capture_output=True)
    return ["java", "-cp", os.pathsep.join([out, classpath]), name]


def _kafka_dumps_the_share_state(run_class: str, data: str) -> None:
    import json

    from engine.groups import share_state_records as records
    from engine.record import codec
    from tests.broker.test_kafka_messages import _camel

    ours, theirs, unread = [], [], 0
    for p in range(records.PARTITIONS):
        folder = os.path.join(data, f"{records.TOPIC}-{p}")
        segments = sorted(f for f in os.listdir(folder) if f.endswith(".log")) if os.path.isdir(folder) else []
        raw = b""
        for name in segments:
            with open(os.path.join(folder, name), "rb") as f:
                raw += f.read()
        found = [records.decode(r.key, r.value) for b in codec.iter_batches(raw) for r in b]
        if not found:
            continue
        ours += found
        dumped = _tool(run_class, "kafka.tools.DumpLogSegments", "--share-group-state-decoder", "--print-data-log",
                       "--files", ",".join(os.path.join(folder, f) for f in segments))
        unread += sum(1 for line in dumped.splitlines() if " key: Error at offset" in line)
        for line in dumped.splitlines():
            if " key: " in line and " payload: " in line:
                key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
                theirs.append((json.loads(key), None if payload.strip() == "<DELETE>" else json.loads(payload)))
    if not _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class"):
        # Kafka 4.0's early-access share groups wrote other bytes under the same value version, and its decoder
        # reads no record of Kafka 4.1's layout, which kafkalog writes (as Kafka 4.1 reads none of 4.0's)
        assert ours and not theirs and unread == len(ours), (len(ours), len(theirs), unread)
        return
    assert ours and len(theirs) == len(ours)
    for (key, payload), s in zip(theirs, ours):
        assert int(key["type"]) == s.kind
        assert key["data"] == {"groupId": s.group_id, "topicId": s.topic_id, "partition": s.partition}
        mine = {"snapshotEpoch": s.snapshot_epoch, "stateEpoch": s.state_epoch, "leaderEpoch": 0,
                "startOffset": s.start_offset, "createTimestamp": s.create_timestamp,
                "writeTimestamp": s.write_timestamp,
                "stateBatches": [{_camel(k): v for k, v in zip(("first_offset", "last_offset", "delivery_state",
                                                                 "delivery_count"), b)} for b in s.batches]}
        assert payload["data"] == mine, (key, payload)
