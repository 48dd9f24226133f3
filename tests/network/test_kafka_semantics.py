"""The listener answers as Kafka does where clients nobody here wrote found it did not: librdkafka's all-topics
Metadata (a request with bytes after its last field), batches whose CRC is right but whose records are not (refused
with Kafka's error, nothing appended, no consumer wedged), one operation too large for Kafka's controller, idle
sockets that must not keep a working client out, and the error codes older request versions get (KIP-588).

Expected codes come from kafka-python's table of Kafka's errors (kafka.errors), batches are framed here with
kafka-python's own CRC-32C, so neither side of a check is kafkalog's code."""
from __future__ import annotations

import gzip
import random
import resource
import socket
import struct
import threading
import time

import pytest
from kafka import errors as kafka_errors
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

import engine
from engine.protocol import decode_response, encode_request
from engine.protocol import admin_messages as am
from engine.protocol import messages as m
from tests.network.test_listener import _call, _closed_by_peer, _recv

INVALID_RECORD, CORRUPT_MESSAGE = kafka_errors.InvalidRecordError.errno, kafka_errors.CorruptRecordError.errno


@pytest.fixture
def served(tmp_path):
    eng = engine.open(str(tmp_path / "data"))
    listener = eng.serve(port=0)
    yield eng, listener
    eng.close()


# --- librdkafka's all-topics Metadata ---------------------------------------------------------------------------
def test_a_request_with_bytes_after_its_last_field_is_answered_as_kafka_answers_it(served):
    """librdkafka 2.8-2.16 sends the null topic array of an all-topics Metadata v12 with a 4-byte placeholder: the
    3 bytes left over are ignored, as Kafka's generated readers ignore them."""
    eng, listener = served
    eng.create_topic("listed", 2)
    frame = encode_request(m.METADATA, 12, 7, {"topics": None, "allow_auto_topic_creation": True})
    frame = struct.pack(">i", struct.unpack(">i", frame[:4])[0] + 3) + frame[4:] + b"\0\0\0"
    with socket.create_connection(listener.address) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        correlation_id, body = decode_response(m.METADATA, 12, _recv(sock, size))
    assert correlation_id == 7
    assert {t["name"]: len(t["partitions"]) for t in body["topics"] if not t["is_internal"]} == {"listed": 2}


def test_librdkafka_lists_topics_and_a_regex_subscription_reads(served):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    eng, listener = served
    for name in ("t-one", "t-two", "other"):
        eng.create_topic(name, 2)
    listed = AdminClient({"bootstrap.servers": listener.bootstrap}).list_topics(timeout=30)
    assert {"t-one", "t-two", "other"} <= set(listed.topics)
    assert all(len(listed.topics[n].partitions) == 2 for n in ("t-one", "t-two", "other"))
    producer = Producer({"bootstrap.servers": listener.bootstrap})
    assert set(producer.list_topics(timeout=30).topics) >= {"t-one", "t-two", "other"}
    for name in ("t-one", "t-two", "other"):
        for i in range(5):
            producer.produce(name, key=b"%d" % i, value=f"{name}-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "regex",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    consumer.subscribe(["^t-.*"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert sorted(got) == sorted(f"{n}-{i}" for n in ("t-one", "t-two") for i in range(5))


# --- Produce validated as Kafka's LogValidator ------------------------------------------------------------------
def _batch(records: bytes, count: int, last_offset_delta: int, attributes: int = 0) -> bytes:
    """A RecordBatch v2 framed by hand around `records`, its CRC-32C kafka-python's: right whatever the records."""
    tail = struct.pack(">hiqqqhii", attributes, last_offset_delta, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1,
                       count) + records
    body = struct.pack(">ibI", -1, 2, calc_crc32c(tail)) + tail
    return struct.pack(">qi", 0, len(body)) + body


def _kafka_python_records(n: int) -> bytes:
    """The records section of a batch of `n` records kafka-python's builder encodes."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    return bytes(builder.build())[61:]


BAD_BATCHES = {
    "40 bytes of 0x01 as records": (_batch(b"\x01" * 40, 1, 0), {INVALID_RECORD}),
    "gzip-flagged random bytes": (_batch(random.Random(5).randbytes(64), 1, 0, attributes=1),
                                  {INVALID_RECORD, CORRUPT_MESSAGE}),
    "gzip of garbage records": (_batch(gzip.compress(b"\x01" * 40), 1, 0, attributes=1), {INVALID_RECORD}),
    "a count of 1 holding 2 records": (_batch(_kafka_python_records(2), 1, 0), {INVALID_RECORD}),
    "a count of 3 holding 2 records": (_batch(_kafka_python_records(2), 3, 2), {INVALID_RECORD}),
}


def _produce(sock: socket.socket, topic: str, data: bytes, correlation_id: int = 1) -> dict:
    answer = _call(sock, m.PRODUCE, 3, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": data}]}]}, correlation_id)
    return answer["responses"][0]["partition_responses"][0]


def test_the_good_batch_framing_is_accepted(served):
    """The framing of the bad batches below, around kafka-python's records, is a batch Kafka takes."""
    eng, listener = served
    eng.create_topic("good", 1)
    with socket.create_connection(listener.address) as sock:
        assert _produce(sock, "good", _batch(_kafka_python_records(2), 2, 1))["error_code"] == 0
    assert [(r.key, r.value) for b in eng.log("good", 0).read(0, 1 << 20).batches() for r in b] == \
        [(b"k0", b"v0"), (b"k1", b"v1")]


@pytest.mark.parametrize("shape", sorted(BAD_BATCHES))
def test_a_batch_kafka_refuses_is_refused_and_wedges_no_consumer(served, shape):
    from confluent_kafka import Consumer, Producer

    data, codes = BAD_BATCHES[shape]
    eng, listener = served
    eng.create_topic("wedge", 1)
    producer = Producer({"bootstrap.servers": listener.bootstrap})
    producer.produce("wedge", partition=0, value=b"before")
    assert producer.flush(30) == 0
    with socket.create_connection(listener.address) as sock:
        answer = _produce(sock, "wedge", data)
        assert answer["error_code"] in codes, answer
        assert _produce(sock, "wedge", data, 2)["error_code"] in codes  # the connection still serves
    assert eng.partition("wedge", 0).log_end_offset == 1  # nothing of it reached the log
    producer.produce("wedge", partition=0, value=b"after")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["wedge"])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [b"before", b"after"]


@pytest.mark.parametrize("shape", sorted(BAD_BATCHES))
def test_engine_append_of_raw_batches_refuses_them_too(tmp_path, shape):
    data, codes = BAD_BATCHES[shape]
    with engine.open(str(tmp_path / "data")) as eng:
        eng.create_topic("raw", 1)
        with pytest.raises(engine.KafkaError) as caught:
            eng.append("raw", 0, data)
        assert caught.value.code in codes
        assert eng.partition("raw", 0).log_end_offset == 0


# --- one operation bounded as Kafka's controller bounds it, and no stall behind one --------------------------
def test_an_operation_past_kafkas_controller_bound_is_a_policy_violation(served):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    eng, listener = served
    admin = AdminClient({"bootstrap.servers": listener.bootstrap})
    futures = admin.create_topics([NewTopic("huge", 25_000, 1), NewTopic("small", 1, 1)], request_timeout=60)
    for name in ("huge", "small"):  # the whole request fails, as Kafka's controller fails it
        with pytest.raises(Exception) as caught:
            futures[name].result(60)
        assert caught.value.args[0].code() == kafka_errors.PolicyViolationError.errno
    assert eng.list_topics() == []
    eng.create_topic("grows", 1)
    with pytest.raises(Exception) as caught:
        admin.create_partitions([NewPartitions("grows", 20_000)], request_timeout=60)["grows"].result(60)
    assert caught.value.args[0].code() == kafka_errors.PolicyViolationError.errno
    assert eng.partitions_for("grows") == 1


def test_a_large_legal_create_does_not_hold_other_connections(served):
    """A CreateTopics of 9,000 partitions and 8 DeleteTopics behind it (more admin requests than the listener has
    handler threads), each held inside the engine until the test lets it go: meanwhile ApiVersions and a Produce to
    another topic on another connection are answered. (Were admin requests run on the handler threads, those would
    all be held, and the other requests would get no answer: the socket's timeout fails the test.)"""
    eng, listener = served
    eng.create_topic("busy", 1)
    for i in range(8):
        eng.create_topic(f"doomed-{i}", 1)
    gate, entered = threading.Event(), threading.Event()

    def held(operation):
        def run(*args, **kwargs):
            entered.set()
            gate.wait(120)
            return operation(*args, **kwargs)
        return run

    eng.create_topic, eng.delete_topic = held(eng.create_topic), held(eng.delete_topic)
    answered: list[int] = []

    def admin(api, version, body, read):
        with socket.create_connection(listener.address) as sock:
            sock.settimeout(300)
            answered.append(read(_call(sock, api, version, body)))

    requests = [threading.Thread(target=admin, args=(
        am.CREATE_TOPICS, 5, {"topics": [{"name": "wide", "num_partitions": 9_000, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout_ms": 300_000,
                             "validate_only": False}, lambda r: r["topics"][0]["error_code"]))]
    requests += [threading.Thread(target=admin, args=(
        am.DELETE_TOPICS, 4, {"topic_names": [f"doomed-{i}"], "timeout_ms": 300_000},
        lambda r: r["responses"][0]["error_code"])) for i in range(8)]
    for t in requests:
        t.start()
    try:
        assert entered.wait(60)
        time.sleep(0.2)  # (the deletes reach the listener too; the check below needs no timing)
        with socket.create_connection(listener.address) as sock:
            sock.settimeout(30)  # no answer while the admin requests are held: a timeout fails the test
            versions = [_call(sock, m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"},
                              i)["error_code"] for i in range(20)]
            produced = _produce(sock, "busy", _batch(_kafka_python_records(1), 1, 0), 99)["error_code"]
        assert answered == [], "an admin request was answered while held"
        assert versions == [0] * 20 and produced == 0
    finally:
        gate.set()
        for t in requests:
            t.join(300)
    assert answered == [0] * 9 and eng.partitions_for("wide") == 9_000
    assert not any(name.startswith("doomed-") for name in eng.list_topics())


# --- acks=all produce parked, not held ----------------------------------------------------------------------------
def _produce_frame(topic: str, timeout_ms: int, correlation_id: int) -> bytes:
    return encode_request(m.PRODUCE, 3, correlation_id, {
        "transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": _batch(
            _kafka_python_records(1), 1, 0)}]}]})


def _answer(sock: socket.socket, correlation_id: int) -> dict:
    got, body = decode_response(m.PRODUCE, 3, _recv(sock, struct.unpack(">i", _recv(sock, 4))[0]))
    assert got == correlation_id
    return body["responses"][0]["partition_responses"][0]


def test_acks_all_produces_waiting_for_a_stalled_follower_hold_no_handler_thread(tmp_path):
    """A follower in the ISR stops fetching (its fetcher stopped, as on a stalled disk): six acks=all Produces (more
    than the listener's two handler threads) wait for it, and meanwhile ApiVersions on another connection is answered
    and no Produce is; once the follower fetches again, every Produce is acknowledged. One with a short timeout is
    answered REQUEST_TIMED_OUT, its batch written. (Were the waits held in the handler threads, ApiVersions would get
    no answer: the socket's timeout fails the test.)"""
    eng = engine.open(str(tmp_path / "data"), brokers=2)
    try:
        listener = eng.serve(port=0, threads=2)
        eng.create_topic("replicated", 1, replication_factor=2)
        eng.replicas.brokers[1].stop_fetcher()
        producers = [socket.create_connection(listener.address) for _ in range(6)]
        for i, sock in enumerate(producers):
            sock.settimeout(120)
            sock.sendall(_produce_frame("replicated", 120_000, i))
        with socket.create_connection(listener.address) as sock:
            sock.settimeout(30)
            versions = [_call(sock, m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"},
                              i)["error_code"] for i in range(5)]
            short = _call(sock, m.PRODUCE, 3, {"transactional_id": None, "acks": -1, "timeout_ms": 300, "topic_data": [
                {"name": "replicated", "partition_data": [{"index": 0, "records": _batch(
                    _kafka_python_records(1), 1, 0)}]}]}, 50)["responses"][0]["partition_responses"][0]
        assert versions == [0] * 5
        assert short["error_code"] == kafka_errors.RequestTimedOutError.errno
        for sock in producers:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)  # no Produce answered while the follower is stalled
            sock.setblocking(True)
            sock.settimeout(120)
        eng.replicas.start_fetchers()
        answers = [_answer(sock, i) for i, sock in enumerate(producers)]
        assert [a["error_code"] for a in answers] == [0] * 6
        assert len({a["base_offset"] for a in answers}) == 6
        assert eng.partition("replicated", 0).high_watermark == 7  # the timed-out batch is written too
        for sock in producers:
            sock.close()
    finally:
        eng.close()


# --- connection limits --------------------------------------------------------------------------------------------
def _room_for(sockets: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * sockets + 512  # both ends are in this process
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need, "raise the open-files limit to run this test"


def _idle_from(address: str, listener, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket()
        s.bind((address, 0))
        s.connect(listener.address)
        out.append(s)
    return out


def test_a_thousand_idle_sockets_from_one_address_keep_no_client_out(served):
    from confluent_kafka import Producer

    eng, listener = served
    _room_for(1000)
    flood = _idle_from("127.0.0.2", listener, 1000)  # max_connections: the listener is full
    try:
        delivered = []
        producer = Producer({"bootstrap.servers": listener.bootstrap, "message.timeout.ms": 30_000})
        for i in range(10):
            producer.produce("kept-in", value=b"%d" % i, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0
        assert delivered == [None] * 10
        assert eng.partition("kept-in", 0).log_end_offset == 10
    finally:
        for s in flood:
            s.close()


def test_a_per_address_limit_closes_that_address_only(tmp_path):
    with engine.open(str(tmp_path / "data")) as eng:
        listener = eng.serve(port=0, max_connections_per_ip=5, max_connections_per_ip_overrides={"127.0.0.3": 1})
        held = _idle_from("127.0.0.2", listener, 5)
        extra = _idle_from("127.0.0.2", listener, 1)[0]
        assert _closed_by_peer(extra)
        other = _idle_from("127.0.0.4", listener, 1)[0]
        overridden = _idle_from("127.0.0.3", listener, 2)
        assert _closed_by_peer(overridden[1])
        for s in (other, overridden[0]):
            assert _call(s, m.API_VERSIONS, 0, {})["error_code"] == 0
        for s in held + overridden + [extra, other]:
            s.close()


def test_a_large_frame_before_sasl_authentication_closes_the_connection(tmp_path):
    with engine.open(str(tmp_path / "data")) as eng:
        listener = eng.serve(port=0, sasl={"mechanisms": ["PLAIN"], "users": {"u": "p"}})
        with socket.create_connection(listener.address) as sock:
            sock.sendall(struct.pack(">i", (512 << 10) + 1) + b"\0" * 64)
            assert _closed_by_peer(sock)
        with socket.create_connection(listener.address) as sock:  # a small one is answered
            assert _call(sock, m.API_VERSIONS, 0, {})["error_code"] == 0


def test_requests_wait_for_the_memory_pool_and_all_are_answered(tmp_path):
    """queued_max_request_bytes smaller than two requests: they are handled one after another, none is lost."""
    with engine.open(str(tmp_path / "data")) as eng:
        eng.create_topic("pooled", 1)
        listener = eng.serve(port=0, queued_max_request_bytes=1024)
        socks = [socket.create_connection(listener.address) for _ in range(4)]
        results = []

        def produce(sock, i):
            results.append(_produce(sock, "pooled", _batch(_kafka_python_records(60), 60, 59), i)["error_code"])

        threads = [threading.Thread(target=produce, args=(s, i)) for i, s in enumerate(socks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for s in socks:
            s.close()
        assert results == [0] * 4
        assert eng.partition("pooled", 0).log_end_offset == 240


def test_kafkalog_serve_takes_the_connection_limits(tmp_path):
    from engine.common.errors import InvalidConfigurationError
    from engine.tools.serve import _overrides

    assert _overrides("127.0.0.2:3, [::1]:4") == {"127.0.0.2": 3, "::1": 4}
    with pytest.raises(InvalidConfigurationError):
        _overrides("127.0.0.2")
    with engine.open(str(tmp_path / "data")) as eng:
        with pytest.raises(InvalidConfigurationError):
            eng.serve(port=0, max_connections_per_ip=-1)


# --- error codes by request version, internal topics, config names ---------------------------------------------
def test_add_offsets_to_txn_v0_gets_invalid_producer_epoch_where_v2_gets_producer_fenced(served):
    eng, listener = served
    with socket.create_connection(listener.address) as sock:
        first = _call(sock, m.INIT_PRODUCER_ID, 1, {"transactional_id": "fenced", "transaction_timeout_ms": 60_000})
        second = _call(sock, m.INIT_PRODUCER_ID, 1, {"transactional_id": "fenced", "transaction_timeout_ms": 60_000})
        assert first["error_code"] == second["error_code"] == 0
        assert second["producer_epoch"] > first["producer_epoch"]
        body = {"transactional_id": "fenced", "producer_id": first["producer_id"],
                "producer_epoch": first["producer_epoch"], "group_id": "g"}
        assert _call(sock, m.ADD_OFFSETS_TO_TXN, 0, body)["error_code"] == \
            kafka_errors.InvalidProducerEpochError.errno
        assert _call(sock, m.ADD_OFFSETS_TO_TXN, 2, body)["error_code"] == kafka_errors.ProducerFencedError.errno
        end = {"transactional_id": "fenced", "producer_id": first["producer_id"],
               "producer_epoch": first["producer_epoch"], "committed": False}
        assert _call(sock, m.END_TXN, 1, end)["error_code"] == kafka_errors.InvalidProducerEpochError.errno


def test_the_offsets_topic_is_described_as_kafka_describes_it(served):
    from confluent_kafka.admin import AdminClient, NewTopic

    eng, listener = served
    with socket.create_connection(listener.address) as sock:
        missing = _call(sock, m.METADATA, 9, {"topics": [{"name": "__consumer_offsets"}],
                                              "allow_auto_topic_creation": False})["topics"]
        body = _call(sock, m.METADATA, 9, {"topics": [{"name": "__consumer_offsets"}],
                                           "allow_auto_topic_creation": True})
        everything = _call(sock, m.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})["topics"]
    assert [t["error_code"] for t in missing] == [kafka_errors.UnknownTopicOrPartitionError.errno]
    (topic,) = body["topics"]
    assert topic["error_code"] == 0 and topic["is_internal"]
    assert [t["name"] for t in everything if t["is_internal"]] == ["__consumer_offsets"]
    assert len(topic["partitions"]) == eng.internal.internal_topics()["__consumer_offsets"]
    admin = AdminClient({"bootstrap.servers": listener.bootstrap})
    with pytest.raises(Exception) as caught:
        admin.create_topics([NewTopic("__consumer_offsets", 1, 1)], request_timeout=30)["__consumer_offsets"].result(30)
    assert caught.value.args[0].code() == kafka_errors.TopicAlreadyExistsError.errno


def test_the_internal_topics_metadata_lists_are_described_by_the_other_apis(served):
    """A client that takes every topic Metadata lists (kafka-python's admin) asks DescribeLogDirs for them all:
    the internal ones are described too, as Kafka describes them."""
    eng, listener = served
    eng.create_topic("plain", 1)
    with socket.create_connection(listener.address) as sock:
        listed = _call(sock, m.METADATA, 9, {"topics": [{"name": "__consumer_offsets"}],
                                             "allow_auto_topic_creation": True})["topics"]
        dirs = _call(sock, am.DESCRIBE_LOG_DIRS, 4, {"topics": None})["results"]
    assert listed[0]["error_code"] == 0
    described = {t["name"]: len(t["partitions"]) for r in dirs for t in r["topics"]}
    assert described == {"plain": 1, "__consumer_offsets": len(listed[0]["partitions"])}


@pytest.mark.parametrize("version", [13, 16, 17])
def test_fetch_by_topic_id_reads_the_topic_metadata_names(served, version):
    """Fetch v13+ names topics by the ids Metadata gives: the records come back under that id, and an id no topic
    has is answered UNKNOWN_TOPIC_ID for each partition asked (the code from kafka-python's table of Kafka's)."""
    import uuid

    eng, listener = served
    eng.create_topic("by-id", 1)
    with socket.create_connection(listener.address) as sock:
        assert _produce(sock, "by-id", _batch(_kafka_python_records(2), 2, 1))["error_code"] == 0
        meta = _call(sock, m.METADATA, 13, {"topics": [{"name": "by-id"}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
        topic_id = meta["topics"][0]["topic_id"]
        assert meta["error_code"] == 0 and topic_id != uuid.UUID(int=0)
        unknown = uuid.UUID(int=topic_id.int ^ 1)
        answer = _call(sock, m.FETCH, version, {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": [
                {"topic_id": t, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
                for t in (topic_id, unknown)]}, 8)
    found, missing = answer["responses"]
    assert found["topic_id"] == topic_id and missing["topic_id"] == unknown
    assert found["partitions"][0]["error_code"] == 0 and found["partitions"][0]["high_watermark"] == 2
    assert _keys(found["partitions"][0]["records"]) == [b"k0", b"k1"]
    assert missing["partitions"][0]["error_code"] == kafka_errors.UnknownTopicIdError.errno


def _keys(records) -> list[bytes]:
    """The keys of the records in fetched bytes, read with kafka-python's record reader."""
    from kafka.record import MemoryRecords

    out, batches = [], MemoryRecords(bytes(records))
    while (batch := batches.next_batch()) is not None:
        out += [r.key for r in batch]
    return out


def test_an_unknown_topic_config_is_named_as_kafka_names_it(served):
    eng, listener = served
    with socket.create_connection(listener.address) as sock:
        body = {"topics": [{"name": "cfg", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": [{"name": "no.such.config", "value": "1"}]}], "timeout_ms": 5000,
                "validate_only": False}
        (answer,) = _call(sock, am.CREATE_TOPICS, 5, body)["topics"]
    assert answer["error_code"] == kafka_errors.InvalidConfigurationError.errno
    assert answer["error_message"] == "Unknown topic config name: no.such.config"


def test_bad_inputs_leave_the_directory_whole(tmp_path):
    """After every refusal above, the directory still verifies (kafkalog verify's checks)."""
    path = str(tmp_path / "data")
    with engine.open(path) as eng:
        eng.create_topic("v", 1)
        for data, _ in BAD_BATCHES.values():
            with pytest.raises(engine.KafkaError):
                eng.append("v", 0, data)
        eng.append("v", 0, _batch(_kafka_python_records(3), 3, 2))
    with engine.open(path) as eng:
        assert [r.value for b in eng.log("v", 0).read(0, 1 << 20).batches() for r in b] == [b"v0", b"v1", b"v2"]
