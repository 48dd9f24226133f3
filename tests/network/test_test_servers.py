"""engine.testing for test suites: the pytest plugin's fixtures, KafkaServer in process and in a child process, and
KafkaContainer in Testcontainers' shape, each checked through librdkafka (confluent-kafka), a client nobody here
wrote: what it produces is what it consumes and what the engine holds, and the settings a suite chooses are the ones
a client sees."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from engine.common.errors import InvalidConfigurationError
from engine.testing import KafkaContainer, KafkaServer
from tests.network.test_listener import ROOT


def _round_trip(bootstrap: str, topic: str, n: int = 20) -> list[bytes]:
    """Produce n values with an idempotent producer, then read them back with a consumer group."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == n:
                break
    finally:
        consumer.close()
    return got


def _partitions(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(meta.topics[topic].partitions) if meta.topics[topic].error is None else -1


def test_the_plugin_is_loaded_by_installing_kafkalog(request):
    assert request.config.pluginmanager.get_plugin("kafkalog") is not None


def test_a_per_test_server_round_trips_and_logs_its_requests(kafka_server):
    got = _round_trip(kafka_server.get_bootstrap_server(), "events")
    assert got == [b"v%d" % i for i in range(20)]
    held = [r.value for b in kafka_server.engine.log("events", 0).read(0, max_bytes=1 << 20).batches() for r in b]
    assert held == got
    log = kafka_server.logs()
    assert "InitProducerId v" in log and "Produce v" in log and "JoinGroup v" in log, log[-2000:]


@pytest.mark.kafkalog(default_partitions=3)
def test_a_marker_chooses_the_servers_settings(kafka_bootstrap):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce("auto", value=b"x")
    assert producer.flush(30) == 0
    assert _partitions(kafka_bootstrap, "auto") == 3


@pytest.mark.kafkalog(auto_create_topics=False)
def test_a_marker_can_turn_topic_creation_off(kafka_server):
    assert _partitions(kafka_server.get_bootstrap_server(), "absent") == -1
    assert "absent" not in kafka_server.engine.list_topics()


def test_tests_sharing_the_session_server_get_their_own_prefix(kafka_session_server, kafka_topic_prefix):
    topic = kafka_topic_prefix + "shared"
    assert _round_trip(kafka_session_server.get_bootstrap_server(), topic, 5) == [b"v%d" % i for i in range(5)]
    assert kafka_topic_prefix.startswith("t") and kafka_topic_prefix.endswith("-")


def test_transaction_settings_reach_librdkafkas_transactional_producer():
    """transaction.max.timeout.ms refuses a longer transaction timeout, and a transaction left open past its timeout is
    aborted by the next check (every second here, every 10 s in Kafka): the producer's commit then fails."""
    from confluent_kafka import KafkaException, Producer

    container = KafkaContainer().with_env("KAFKA_TRANSACTION_MAX_TIMEOUT_MS", "5000")
    with container as kafka:
        config = {"bootstrap.servers": kafka.get_bootstrap_server(), "transactional.id": "tx"}
        too_long = Producer({**config, "transaction.timeout.ms": 10_000})
        with pytest.raises(KafkaException, match="INVALID_TRANSACTION_TIMEOUT|transaction timeout"):
            too_long.init_transactions(10)
        producer = Producer({**config, "transaction.timeout.ms": 1000})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("orders", value=b"left open")
        assert producer.flush(10) == 0
        coordinator = kafka.engine.coordinators.transactions.coordinator
        deadline = time.monotonic() + 5  # the timeout (1 s), then the next check (within 1 s)
        while coordinator.txns["tx"].state.kafka_name != "CompleteAbort" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert coordinator.txns["tx"].state.kafka_name == "CompleteAbort"
        with pytest.raises(KafkaException):
            producer.commit_transaction(10)


def test_a_server_in_a_child_process(tmp_path):
    data = tmp_path / "data"
    with KafkaServer(str(data), process=True, default_partitions=2) as server:
        got = _round_trip(server.get_bootstrap_server(), "child")
        assert sorted(got) == sorted(b"v%d" % i for i in range(20))  # two partitions: no order across them
        assert _partitions(server.get_bootstrap_server(), "child") == 2
        assert "Produce v" in server.logs()
        stderr = server._stderr_path
    assert not os.path.exists(stderr) and "Produce v" in server.logs()  # its stderr file read, then removed
    assert (data / "child-0").is_dir() and (data / "child-1").is_dir()  # a given directory stays
    import engine
    with engine.open(str(data)) as eng:  # closed cleanly: it opens, and holds what was produced
        assert sum(eng.log("child", p).log_end_offset for p in (0, 1)) == 20


def test_a_directory_the_server_made_is_removed_on_stop():
    from engine.testing import server as module
    running = module._request_users  # servers of this process that keep the request log on (a session one, say)
    server = KafkaServer().start()
    made = server.data_dir
    assert made and os.path.isdir(made) and module._request_users == running + 1
    _partitions(server.get_bootstrap_server(), "t")
    server.stop()
    server.stop()  # twice is harmless: the request log's users are counted once
    assert not os.path.exists(made) and module._request_users == running
    assert "Metadata v" in server.logs()  # the log up to the stop stays readable
    with pytest.raises(Exception, match="not started"):
        server.get_bootstrap_server()


def test_kafka_container_is_a_drop_in_for_testcontainers():
    with KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft().with_env("KAFKA_NUM_PARTITIONS", "4") as kafka:
        assert _partitions(kafka.get_bootstrap_server(), "tc") == 4
    with pytest.raises(InvalidConfigurationError, match="KAFKA_LOG_RETENTION_HOURS is not supported yet"):
        KafkaContainer().with_env("KAFKA_LOG_RETENTION_HOURS", "1")
    with pytest.raises(InvalidConfigurationError, match="whole number"):
        KafkaContainer().with_env("KAFKA_NUM_PARTITIONS", "three")
    with pytest.raises(InvalidConfigurationError, match="not supported yet with process=True"):
        KafkaServer(process=True, sasl={"mechanisms": ["PLAIN"], "users": {"a": "b"}})


def test_a_failing_test_reports_the_servers_log(tmp_path):
    """A suite of someone else's: one test that fails after talking to the plugin's server. Its report carries the
    server's log with the requests it handled."""
    suite = tmp_path / "test_suite.py"
    suite.write_text(textwrap.dedent("""
        from confluent_kafka.admin import AdminClient

        def test_fails(kafka_bootstrap):
            AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
            assert False, "the application's own failure"
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 1, done.stdout[-3000:]
    assert "the application's own failure" in done.stdout
    assert "kafkalog server log" in done.stdout and "Metadata v" in done.stdout, done.stdout[-3000:]
