"""The protocol listener against real Kafka clients (kafka-python, librdkafka through confluent-kafka, aiokafka) on
ephemeral 127.0.0.1 ports, and against bad connections: each sees what the in-process API sees, and a broken
connection never affects another one or the logs."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Callable

import pytest

import engine
from engine.common.errors import GroupIdNotFoundError, InvalidConfigurationError
from engine.common.structs import OffsetAndMetadata
from engine.common.structs import TopicPartition as EngineTopicPartition
from engine.protocol import decode_response, encode_request
from engine.protocol import messages as m

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def served(kafka_server):
    """The engine and listener of the kafkalog pytest plugin's per-test server (engine.testing)."""
    return kafka_server.engine, kafka_server.listener


def _records(eng, topic: str, partition: int = 0) -> list[tuple]:
    out = []
    for batch in eng.log(topic, partition).read(0, max_bytes=1 << 30).batches():
        out += [(r.offset, r.key, r.value) for r in batch]
    return out


def _call(sock: socket.socket, api, version: int, body: dict, correlation_id: int = 1) -> dict:
    sock.sendall(encode_request(api, version, correlation_id, body))
    size = struct.unpack(">i", _recv(sock, 4))[0]
    got, answer = decode_response(api, version, _recv(sock, size))
    assert got == correlation_id
    return answer


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_kafka_python_produces_and_consumes_what_the_engine_holds(served):
    from kafka import KafkaConsumer, KafkaProducer

    eng, listener = served
    producer = KafkaProducer(bootstrap_servers=listener.bootstrap, acks="all")
    for i in range(20):
        producer.send("kp", key=b"k%d" % i, value=b"v%d" % i)  # the topic is made by Metadata's auto-creation
    producer.flush()
    producer.close()
    assert _records(eng, "kp") == [(i, b"k%d" % i, b"v%d" % i) for i in range(20)]
    with eng.producer() as inproc:  # and the other way round
        inproc.send("kp", key=b"x", value=b"from-engine").get()
    consumer = KafkaConsumer(bootstrap_servers=listener.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    from kafka import TopicPartition
    consumer.assign([TopicPartition("kp", 0)])
    got = [(r.offset, r.key, r.value) for r in consumer]
    consumer.close()
    assert got == _records(eng, "kp") and got[-1] == (20, b"x", b"from-engine")


def test_librdkafka_idempotent_producer_and_consumer(served):
    from confluent_kafka import Consumer, Producer, TopicPartition

    eng, listener = served
    eng.create_topic("rd", 3)
    producer = Producer({"bootstrap.servers": listener.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    failures = []
    for i in range(3000):
        producer.produce("rd", key=b"%d" % i, value=b"v%d" % i,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0 and failures == []
    held = {p: _records(eng, "rd", p) for p in range(3)}
    assert sum(len(v) for v in held.values()) == 3000
    batch = next(eng.log("rd", 0).read(0, max_bytes=1 << 20).batches())
    assert batch.producer_id >= 0 and batch.base_sequence == 0  # idempotent: a producer id and sequences
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("rd", p, 0) for p in range(3)])
    got = {p: [] for p in range(3)}
    deadline = time.monotonic() + 30
    while sum(map(len, got.values())) < 3000 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got == held


def test_aiokafka_produces_and_consumes(served):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    eng, listener = served

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=listener.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait("aio", key=b"a%d" % i, value=b"b%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=listener.bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("aio", 0)])
            await consumer.seek_to_beginning()
            out = []
            while len(out) < 50:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
                out += [(r.offset, r.key, r.value) for rs in batch.values() for r in rs]
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert got == _records(eng, "aio") == [(i, b"a%d" % i, b"b%d" % i) for i in range(50)]


def test_a_long_poll_is_woken_by_an_in_process_append(served):
    """A remote fetch waiting out a 60 s max wait returns as soon as the engine appends (the poll gives up at 20 s)."""
    from confluent_kafka import Consumer, TopicPartition

    eng, listener = served
    eng.create_topic("wake", 1)
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "unused", "fetch.wait.max.ms": 60000,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("wake", 0, 0)])
    assert consumer.poll(1.0) is None  # the fetch is now parked at the listener
    with eng.producer() as inproc:
        inproc.send("wake", value=b"now").get()
    msg = consumer.poll(20.0)
    consumer.close()
    assert msg is not None and msg.error() is None and msg.value() == b"now"


def test_acks_0_gets_no_response_and_is_appended(served):
    eng, listener = served
    eng.create_topic("zero", 1)
    data = engine.encode_batch([(None, b"fire-and-forget", None, 1)])
    body = {"acks": 0, "timeout_ms": 1000, "topic_data": [{"name": "zero", "partition_data": [
        {"index": 0, "records": data}]}]}
    with socket.create_connection(listener.address) as sock:
        sock.sendall(encode_request(m.PRODUCE, 9, 1, body))
        # the next request's answer is the first thing the connection receives
        answer = _call(sock, m.METADATA, 9, {"topics": [{"name": "zero"}]}, correlation_id=2)
    assert answer["topics"][0]["name"] == "zero"
    assert [r[2] for r in _records(eng, "zero")] == [b"fire-and-forget"]


def test_api_versions_newer_than_ours_gets_version_0_with_the_ranges(served):
    _, listener = served
    header = struct.pack(">hhih", m.API_VERSIONS.key, 99, 5, 3) + b"abc"
    with socket.create_connection(listener.address) as sock:
        sock.sendall(struct.pack(">i", len(header) + 7) + header + b"\x00" * 7)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        correlation_id, body = decode_response(m.API_VERSIONS, 0, _recv(sock, size))
    assert correlation_id == 5 and body["error_code"] == 35
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ranges == {a.key: (a.min_version, a.max_version) for a in m.APIS.values()}


def test_list_offsets_answers_each_special_timestamp_from_the_version_that_brought_it(served):
    """-3 (the largest timestamp) needs v7, -4 (the local log's start) v8, -5 (the last offset in tiered storage)
    v9: an older request gets UNSUPPORTED_VERSION for that partition, as from Kafka."""
    eng, listener = served
    eng.create_topic("when", 1)
    with eng.producer() as inproc:
        for ts in (10, 30, 20):
            inproc.send("when", value=b"v", timestamp_ms=ts).get()
    want = {-3: (30, 1), -4: (-1, 0), -5: (-1, -1), -2: (-1, 0), -1: (-1, 3), 15: (30, 1), 5: (10, 0)}
    needs = {-3: 7, -4: 8, -5: 9}
    with socket.create_connection(listener.address) as sock:
        for version in (6, 7, 8, 9, 10):
            answer = _call(sock, m.LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "when", "partitions": [{"partition_index": 0, "timestamp": ts} for ts in want]}]})
            got = {ts: (p["error_code"], p["timestamp"], p["offset"])
                   for ts, p in zip(want, answer["topics"][0]["partitions"])}
            assert got == {ts: (35, -1, -1) if version < needs.get(ts, 0) else (0, *w) for ts, w in want.items()}


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 5) + b"\x00\x03\x00",                                  # truncated header (then nothing)
    struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),                   # an unknown API key
    struct.pack(">i", 8) + struct.pack(">hhi", m.PRODUCE.key, 1, 1),         # a version we do not speak
    struct.pack(">i", 10) + struct.pack(">hhih", m.METADATA.key, 1, 1, 40),  # client id runs past the frame
    struct.pack(">i", 200 << 20),                                            # over socket.request.max.bytes
    struct.pack(">i", -7),                                                   # a negative size
], ids=["truncated", "unknown-api", "unsupported-version", "overrun", "too-large", "negative-size"])
def test_a_bad_connection_is_closed_and_nothing_else_is_touched(served, frame):
    eng, listener = served
    eng.create_topic("safe", 1)
    with eng.producer() as inproc:
        inproc.send("safe", value=b"kept").get()
    before = _records(eng, "safe")
    with socket.create_connection(listener.address) as good, socket.create_connection(listener.address) as bad:
        assert _call(good, m.METADATA, 1, {"topics": [{"name": "safe"}]})["topics"][0]["error_code"] == 0
        bad.sendall(frame)
        if len(frame) < 12 and frame[:4] == struct.pack(">i", 5):
            bad.shutdown(socket.SHUT_WR)  # a truncated frame is only known to be one when the peer stops
            assert bad.recv(1) == b""
        else:
            assert _closed_by_peer(bad)
        answer = _call(good, m.METADATA, 1, {"topics": [{"name": "safe"}]}, correlation_id=9)
    assert answer["topics"][0]["partitions"][0]["leader_id"] == 0
    assert _records(eng, "safe") == before


def test_a_non_loopback_address_must_be_asked_for(tmp_path):
    with engine.open(str(tmp_path / "d")) as eng:
        with pytest.raises(InvalidConfigurationError, match="allow_remote"):
            eng.serve("0.0.0.0", 0)
        with pytest.raises(InvalidConfigurationError, match="sasl must be"):
            eng.serve(port=0, sasl={"mechanism": "PLAIN"})
        with pytest.raises(InvalidConfigurationError, match="not supported"):
            eng.serve(port=0, sasl={"mechanisms": ["GSSAPI"], "users": {"a": "b"}})


def test_kafkalog_serve_cli(tmp_path):
    """`kafkalog serve` prints its bootstrap address, serves (here with SASL from a --sasl-config file), and closes
    the directory cleanly on SIGTERM; a certificate it cannot load is a bad argument (exit status 2)."""
    from kafka import KafkaProducer

    data = str(tmp_path / "data")
    bad = subprocess.run([sys.executable, "-m", "engine", "serve", "--data", data, "--ssl-certfile", "nope.pem",
                          "--ssl-keyfile", "nope.key"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot load the TLS certificate" in bad.stderr
    config = tmp_path / "sasl.json"
    config.write_text(json.dumps({"mechanisms": ["PLAIN"], "users": {"cli": "pass"}}))
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--data", data, "--listen", "127.0.0.1:0",
                             "--sasl-config", str(config), "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = json.loads(proc.stdout.readline())
        producer = KafkaProducer(bootstrap_servers=line["bootstrap"], acks="all", security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="PLAIN", sasl_plain_username="cli", sasl_plain_password="pass")
        producer.send("cli", value=b"over the wire").get(timeout=10)
        producer.close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    with engine.open(data) as eng:
        assert eng.clean_shutdown
        assert [r[2] for r in _records(eng, "cli")] == [b"over the wire"]


def _read_until(consumers: dict, done: Callable[[], bool], seconds: float = 30) -> bool:
    """Poll each consumer (a librdkafka Consumer -> the list its (partition, offset)s go to) until `done()`: a
    record a poll returns while the test waits for something else is kept, not dropped."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        for consumer, got in consumers.items():  # (up to 500 a call: a member with nothing to read waits 0.1 s)
            got.extend((msg.partition(), msg.offset()) for msg in consumer.consume(500, 0.1) if msg.error() is None)
    return done()


def produced(listener, eng, topic: str, partitions: int, n: int) -> None:
    """A new topic with `n` keyed records sent by librdkafka."""
    from confluent_kafka import Producer

    eng.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": listener.bootstrap})
    for i in range(n):
        producer.produce(topic, key=b"%d" % i, value=b"x")
    assert producer.flush(30) == 0


def test_librdkafka_group_rebalances_between_two_members_and_commits(served):
    """Two librdkafka members of one group split four partitions; when one leaves the other takes them all and
    resumes from the offsets the group committed, which the engine's group coordinator holds."""
    from confluent_kafka import Consumer

    eng, listener = served
    produced(listener, eng, "g", 4, 400)
    conf = {"bootstrap.servers": listener.bootstrap, "group.id": "grp", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
    first, second = Consumer(conf), Consumer(conf)
    first.subscribe(["g"])
    second.subscribe(["g"])
    got: list = []  # what the first member reads (the second's reads before the hand-over are not checked)
    assert _read_until({first: got, second: []}, lambda: bool(first.assignment() and second.assignment()))
    mine, theirs = {tp.partition for tp in first.assignment()}, {tp.partition for tp in second.assignment()}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
    everything = {(p, o) for p in range(4) for o in range(len(_records(eng, "g", p)))}
    of_mine = {(p, o) for p, o in everything if p in mine}
    # (the first to join may read any partition before the second is given its share: a record read before a
    # revocation is read again after it, nothing was committed; so `got` may hold all of its share before it has
    # read anything since the split, and the commit waits for its positions to reach its partitions' ends)
    ends = {p: len(_records(eng, "g", p)) for p in mine}
    assert _read_until({first: got}, lambda: of_mine <= set(got) and ends == {
        tp.partition: tp.offset for tp in first.position(first.assignment())})
    first.commit(asynchronous=False)
    committed = eng.committed_offsets("grp", [("g", p) for p in mine])
    assert {tp.partition: om.offset for tp, om in committed.items()} == ends
    first.close()  # LeaveGroup: the other member takes every partition, from the committed offsets for first's
    rest: list = []
    assert _read_until({second: rest}, lambda: len(second.assignment()) == 4 and everything - of_mine <= set(rest))
    second.close()
    # every record of the second's share read after the hand-over, none of the first's: they were committed
    assert set(rest) == everything - of_mine


def test_an_in_process_member_and_a_remote_one_share_a_group(served):
    """An in-process member and a kafka-python member of one group split its partitions, each holding what the
    coordinator assigned it."""
    from kafka import KafkaConsumer

    eng, listener = served
    eng.create_topic("shared", 2)
    inproc = eng.consumer("shared", group_id="mixed", auto_offset_reset="earliest")
    # The remote member polls on a thread of its own, as an application's would. kafka-python 3.0.12 drops the
    # answer of a JoinGroup that outlives the poll() that sent it (the round is left unapplied and joined again), and
    # a round waits for every member: with both members polled in turn on one thread, the remote's JoinGroup would
    # wait for the in-process member's join, made only once that poll returned.
    held: list[set] = [set()]
    stop = threading.Event()

    def remote_member() -> None:
        remote = KafkaConsumer("shared", bootstrap_servers=listener.bootstrap, group_id="mixed",
                               auto_offset_reset="earliest", heartbeat_interval_ms=200)
        try:
            while not stop.is_set():
                remote.poll(timeout_ms=2000)
                held[0] = {tp.partition for tp in remote.assignment()}
        finally:
            remote.close()

    def settled() -> bool:
        """The group is stable and each member holds what the coordinator gave it."""
        try:
            group = eng.groups.describe_group("mixed")
        except GroupIdNotFoundError:
            return False  # (no member has joined yet)
        given = sorted(sorted(tp.partition for tp in m["assignment"]) for m in group.members)
        mine = {tp.partition for tp in inproc.assignment()}
        return group.state == "Stable" and given == sorted([sorted(mine), sorted(held[0])])

    thread = threading.Thread(target=remote_member)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not settled():
            inproc.poll(100)
        a, b = {tp.partition for tp in inproc.assignment()}, held[0]
        assert settled()
    finally:
        stop.set()
        thread.join()
        inproc.close()
    assert a | b == {0, 1} and not a & b and a and b
    assert eng.groups.describe_group("mixed").protocol_type == "consumer"


def test_librdkafka_transactions_commit_abort_and_read_committed(served):
    """A transactional librdkafka producer commits one transaction (with a group's offsets in it) and aborts
    another: a read_committed consumer over the listener and the in-process coordinator agree on what is visible."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    eng, listener = served
    eng.create_topic("tx", 1)
    producer = Producer({"bootstrap.servers": listener.bootstrap, "transactional.id": "tid-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("tx", value=b"committed-%d" % i)
    offsets = [TopicPartition("tx", 0, 42)]
    group = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "txgroup"})
    producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("tx", value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    group.close()
    assert eng.committed("txgroup", ("tx", 0)).offset == 42
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("tx", 0, 0)])
    values = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(values) < 5:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    assert consumer.poll(1.0) is None  # nothing of the aborted transaction follows
    consumer.close()
    assert values == [b"committed-%d" % i for i in range(5)]
    with eng.consumer(isolation_level="read_committed", auto_offset_reset="earliest") as inproc:
        inproc.assign([("tx", 0)])
        seen = [r.value for recs in inproc.poll(2000).values() for r in recs]
    assert seen == values


def test_librdkafka_admin_client(served):
    """confluent-kafka's AdminClient: create topics (and refuse a duplicate), describe and alter configs, grow a
    topic, delete records, describe the cluster, list, describe and delete groups, delete a topic; the engine
    agrees."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    eng, listener = served
    admin = AdminClient({"bootstrap.servers": listener.bootstrap})
    done = admin.create_topics([NewTopic("adm", 2, 1, config={"retention.ms": "3600000"})])
    done["adm"].result(20)
    assert eng.describe_topic("adm").config["retention.ms"] == 3600000
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        admin.create_topics([NewTopic("adm", 1, 1)])["adm"].result(20)
    res = ConfigResource(ResourceType.TOPIC, "adm")
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == eng.describe_topic("adm").config["cleanup.policy"]
    altered = ConfigResource(ResourceType.TOPIC, "adm", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([altered])[altered].result(20)
    assert eng.describe_topic("adm").config["cleanup.policy"] == "compact"
    admin.create_partitions([NewPartitions("adm", 4)])["adm"].result(20)
    assert eng.partitions_for("adm") == 4
    admin.create_partitions([NewPartitions("adm", 5, replica_assignment=[[0]])])["adm"].result(20)
    assert eng.partitions_for("adm") == 5  # an assignment naming node 0, the one node, is honoured
    admin.create_topics([NewTopic("placed", 2, replica_assignment=[[0], [0]])])["placed"].result(20)
    assert eng.partitions_for("placed") == 2
    for bad in ([[1]], [[0, 0]]):  # a node that does not exist; the one node twice
        with pytest.raises(Exception, match="INVALID_REPLICA_ASSIGNMENT|one node"):
            admin.create_topics([NewTopic("misplaced", 1, replica_assignment=bad)])["misplaced"].result(20)
        with pytest.raises(Exception, match="INVALID_REPLICA_ASSIGNMENT|one node"):
            admin.create_partitions([NewPartitions("adm", 6, replica_assignment=bad)])["adm"].result(20)
    assert "misplaced" not in eng.list_topics() and eng.partitions_for("adm") == 5
    with eng.producer() as inproc:
        for i in range(10):
            inproc.send("adm", key=b"%d" % i, value=b"v", partition=0).get()
    low = admin.delete_records([TopicPartition("adm", 0, 6)])
    assert list(low.values())[0].result(20).low_watermark == 6
    assert eng.partition("adm", 0).log_start_offset == 6
    cluster = admin.describe_cluster().result(20)
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, listener.address[1])]
    eng.groups.commit_offsets("idle-group", {EngineTopicPartition("adm", 0): OffsetAndMetadata(3)})
    listed = admin.list_consumer_groups().result(20)
    assert "idle-group" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["idle-group"])["idle-group"].result(20)
    assert described.group_id == "idle-group" and not described.members
    admin.delete_consumer_groups(["idle-group"])["idle-group"].result(20)
    assert eng.committed("idle-group", EngineTopicPartition("adm", 0)) is None
    assert "idle-group" not in {g for g, _, _ in eng.groups.list_groups()}
    with pytest.raises(Exception, match="GROUP_ID_NOT_FOUND|does not exist"):
        admin.delete_consumer_groups(["idle-group"])["idle-group"].result(20)
    admin.delete_topics(["adm"])["adm"].result(20)
    assert "adm" not in eng.list_topics()



def test_tls_with_a_certificate_the_test_makes(tmp_path):
    """A listener given an SSL context speaks TLS: librdkafka and kafka-python, trusting the certificate the test
    made, produce and consume; a client speaking plaintext to it gets nowhere."""
    import ssl

    from confluent_kafka import Consumer, Producer, TopicPartition

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    with engine.open(str(tmp_path / "data")) as eng, eng.serve(port=0, ssl_context=context) as listener:
        eng.create_topic("secret", 1)
        tls = {"bootstrap.servers": listener.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(cert)}
        producer = Producer(tls)
        for i in range(100):
            producer.produce("secret", value=b"s%d" % i)
        assert producer.flush(20) == 0
        consumer = Consumer({**tls, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([TopicPartition("secret", 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert got == [b"s%d" % i for i in range(100)]
        from kafka import KafkaProducer
        kp = KafkaProducer(bootstrap_servers=listener.bootstrap, security_protocol="SSL", ssl_cafile=str(cert))
        kp.send("secret", value=b"from kafka-python").get(timeout=20)
        kp.close()
        assert _records(eng, "secret")[-1][2] == b"from kafka-python"
        with socket.create_connection(listener.address) as plain:
            plain.sendall(encode_request(m.API_VERSIONS, 0, 1, {}))
            assert _closed_by_peer(plain)  # the bytes are no TLS handshake


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_users_the_test_creates(tmp_path, mechanism):
    """With SASL configured, librdkafka and kafka-python authenticate as a user the test made and then produce and
    consume; a wrong password is refused, and a request before authenticating closes its connection."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    sasl = {"mechanisms": ["PLAIN", "SCRAM-SHA-256"], "users": {"alice": "wonder-land", "bob": "builder"}}
    with engine.open(str(tmp_path / "data")) as eng, eng.serve(port=0, sasl=sasl) as listener:
        eng.create_topic("auth", 1)
        conf = {"bootstrap.servers": listener.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "wonder-land"}
        producer = Producer(conf)
        producer.produce("auth", value=b"signed")
        assert producer.flush(20) == 0
        consumer = Consumer({**conf, "group.id": "authed", "enable.auto.commit": False})
        consumer.assign([TopicPartition("auth", 0, 0)])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        consumer.close()
        assert msg is not None and msg.error() is None and msg.value() == b"signed"
        from kafka import KafkaProducer
        kp = KafkaProducer(bootstrap_servers=listener.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism=mechanism, sasl_plain_username="bob", sasl_plain_password="builder")
        kp.send("auth", value=b"bob").get(timeout=20)
        kp.close()
        refused = []
        bad = Producer({**conf, "sasl.password": "wrong", "error_cb": refused.append})
        bad.produce("auth", value=b"never")
        bad.flush(3)
        assert any("uthentication" in str(e) for e in refused), refused
        with socket.create_connection(listener.address) as early:
            early.sendall(encode_request(m.METADATA, 1, 1, {"topics": [{"name": "auth"}]}))
            assert _closed_by_peer(early)
        assert [r[2] for r in _records(eng, "auth")] == [b"signed", b"bob"]


def test_kafka_python_and_aiokafka_transactions_and_groups(served):
    """kafka-python's and aiokafka's transactional producers commit and abort through the listener (read_committed
    sees only the committed records), and an aiokafka consumer group member gets every partition and commits."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaProducer

    eng, listener = served
    eng.create_topic("tx2", 2)
    kp = KafkaProducer(bootstrap_servers=listener.bootstrap, transactional_id="kp-tx")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send("tx2", value=b"kp-commit", partition=0)
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send("tx2", value=b"kp-abort", partition=0)
    kp.abort_transaction()
    kp.close()

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=listener.bootstrap, transactional_id="aio-tx")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("tx2", b"aio-commit", partition=1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tx2", bootstrap_servers=listener.bootstrap, group_id="aio-group",
                                    auto_offset_reset="earliest", isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            values = []
            while len(values) < 2:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                values += [r.value for rs in batch.values() for r in rs]
            await consumer.commit()
            return values, {tp.partition for tp in consumer.assignment()}
        finally:
            await consumer.stop()

    values, assigned = asyncio.run(run())
    assert sorted(values) == [b"aio-commit", b"kp-commit"] and assigned == {0, 1}
    committed = eng.committed_offsets("aio-group", [("tx2", 0), ("tx2", 1)])
    assert {tp.partition: om.offset for tp, om in committed.items()} == \
        {p: eng.partition("tx2", p).high_watermark for p in (0, 1)}


def _kcat(listener, *args: str, stdin: str | None = None) -> str:
    """Run Debian's kcat against the listener; its standard output. CI installs kcat and sets
    KAFKALOG_REQUIRE_KCAT=1, so there a missing kcat fails rather than skips."""
    import shutil

    if shutil.which("kcat") is None:
        if os.environ.get("KAFKALOG_REQUIRE_KCAT") == "1":
            pytest.fail("kcat is required (KAFKALOG_REQUIRE_KCAT=1) and not on PATH")
        pytest.skip("kcat is not installed (apt-get install kcat)")
    done = subprocess.run(["kcat", "-b", listener.bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_lists_produces_consumes_joins_a_group_and_queries_offsets(served):
    eng, listener = served
    eng.create_topic("kc", 2)
    with eng.producer() as inproc:
        for i in range(5):
            inproc.send("kc", key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp_ms=1000 + i).get()
    listed = json.loads(_kcat(listener, "-L", "-J"))
    assert listed["brokers"] == [{"id": 0, "name": listener.bootstrap}]
    assert [(t["topic"], [p["leader"] for p in t["partitions"]]) for t in listed["topics"]] == [("kc", [0, 0])]
    got = [json.loads(line) for line in _kcat(listener, "-C", "-t", "kc", "-p", "0", "-o", "beginning", "-e",
                                               "-J").splitlines()]
    assert [(g["offset"], g["key"], g["payload"], g["ts"]) for g in got] == \
        [(o, k.decode(), v.decode(), 1000 + o) for o, k, v in _records(eng, "kc", 0)]
    _kcat(listener, "-P", "-t", "kc", "-p", "1", "-K", ":", "-X", "enable.idempotence=true", stdin="a:1\nb:2\nc:3\n")
    assert _records(eng, "kc", 1) == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3")]
    assert next(eng.log("kc", 1).read(0, max_bytes=1 << 20).batches()).producer_id >= 0
    members = [json.loads(line) for line in _kcat(listener, "-G", "kc-group", "-X", "auto.offset.reset=earliest",
                                                   "-c", "8", "-J", "kc").splitlines()]
    assert sorted((g["partition"], g["offset"]) for g in members) == [(0, o) for o in range(5)] + \
        [(1, o) for o in range(3)]
    committed = eng.committed_offsets("kc-group", [("kc", 0), ("kc", 1)])  # committed as kcat left the group
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 5, 1: 3}
    assert _kcat(listener, "-Q", "-t", "kc:0:1002").split() == ["kc", "[0]", "offset", "2"]


def test_kafka_python_admin_client(served):
    """kafka-python's KafkaAdminClient: DescribeConfigs' types and sources as Kafka's ConfigType and ConfigSource
    enums name them; groups listed and deleted; the offset of the largest timestamp; and the cluster operations a
    one-node cluster answers (elections, reassignments, log directories, partitions paged)."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
    from kafka.errors import ElectionNotNeededError, InvalidReplicationAssignmentError, NoError
    from kafka.structs import TopicPartitionReplica

    eng, listener = served
    eng.create_topic("typed", 1, config={"retention.ms": "60000"})
    eng.create_topic("paged", 3)
    with eng.producer() as inproc:
        for ts in (1000, 5000, 3000, 5000, 2000):
            inproc.send("paged", value=b"v", partition=1, timestamp_ms=ts).get()
    admin = KafkaAdminClient(bootstrap_servers=listener.bootstrap)
    try:
        newest = admin.list_partition_offsets({TopicPartition("paged", 1): OffsetSpec.MAX_TIMESTAMP})
        assert (newest[TopicPartition("paged", 1)].offset, newest[TopicPartition("paged", 1)].timestamp) == (1, 5000)
        elected = admin.elect_leaders(0, {"paged": [0, 2]}, raise_errors=False)
        assert [(p[0], p[1]) for p in elected.replica_election_results[0][1]] == \
            [(0, ElectionNotNeededError.errno), (2, ElectionNotNeededError.errno)]
        assert admin.alter_partition_reassignments({TopicPartition("paged", 0): [0]}) == \
            {TopicPartition("paged", 0): None}
        assert admin.alter_partition_reassignments({TopicPartition("paged", 0): [1]}) == \
            {TopicPartition("paged", 0): InvalidReplicationAssignmentError}
        assert admin.list_partition_reassignments() == {}
        (node,) = admin.describe_log_dirs()
        (directory,) = node["log_dirs"]
        assert directory["log_dir"] == os.path.abspath(eng.path) and directory["usable_bytes"] > 0
        sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in directory["topics"]
                 for p in t["partitions"]}
        assert sizes[("paged", 1)] == eng.partition("paged", 1).log.size_in_bytes() > 0
        assert admin.alter_replica_log_dirs({TopicPartitionReplica("paged", 0, 0): eng.path}) == \
            {TopicPartitionReplica("paged", 0, 0): NoError}
        pages, cursor = [], None
        while True:
            page = admin.describe_topic_partitions(["paged", "typed"], response_partition_limit=2, cursor=cursor)
            pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == [[("paged", [0, 1])], [("paged", [2]), ("typed", [0])]]
        topic = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "typed")],
                                       config_filter="all")["topic"]["typed"]
        assert {k: topic[k]["config_type"] for k in ("retention.bytes", "segment.bytes", "cleanup.policy",
                                                     "compression.type", "preallocate",
                                                     "min.cleanable.dirty.ratio")} == \
            {"retention.bytes": "LONG", "segment.bytes": "INT", "cleanup.policy": "LIST", "compression.type": "STRING",
             "preallocate": "BOOLEAN", "min.cleanable.dirty.ratio": "DOUBLE"}
        assert topic["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG" and topic["retention.ms"]["value"] \
            == "60000"
        assert topic["retention.bytes"]["config_source"] == "DEFAULT_CONFIG" and not topic["retention.bytes"][
            "read_only"]
        node = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        advertised = node["broker"]["0"]["advertised.listeners"]
        assert advertised["value"] == f"PLAINTEXT://{listener.bootstrap}" and advertised["read_only"] is True
        assert advertised["config_source"] == "STATIC_BROKER_CONFIG" and advertised["config_type"] == "LIST"
        eng.groups.commit_offsets("kp-admin", {EngineTopicPartition("typed", 0): OffsetAndMetadata(0)})
        assert [g["group_id"] for g in admin.list_groups()] == ["kp-admin"]
        assert admin.delete_groups(["kp-admin"]) == {"kp-admin": "OK"} and eng.groups.list_groups() == []
        assert admin.delete_groups(["kp-admin"]) == {"kp-admin": "GroupIdNotFoundError"}
    finally:
        admin.close()
