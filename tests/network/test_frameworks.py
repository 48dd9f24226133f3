"""Stream-processing frameworks nobody here wrote, against the pytest plugin's server (`kafka_server`): each installed
from the package index into one virtual environment of their own (tests/network/third_party.py) and used through its
public API only (the programs in tests/network/apps), and faust-streaming's own live-broker tests from its sdist.
Every expected output is computed here from the inputs."""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import tarfile
import time
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.network.third_party import APPS, create_topics, produce, read_topic, virtualenv

FAUST = "faust-streaming==0.15.3"
FRAMEWORKS = [FAUST, "faststream[kafka]==0.7.8", "bytewax[kafka]==0.21.1",
              "pytest<8", "pytest-asyncio==0.23.8"]  # the last two: what faust's own tests run on


@pytest.fixture(scope="module")
def python() -> str:
    return virtualenv("frameworks", FRAMEWORKS)


def _start(log: Path, *argv: str) -> subprocess.Popen:
    """A program with its output in a file (a pipe nobody reads would block a chatty framework)."""
    with open(log, "w") as out:  # the child has its own copy of the descriptor
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen, log: Path) -> str:
    """SIGTERM (a clean shutdown for these frameworks), then the end of the process's output."""
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    return log.read_text()[-3000:]


def test_a_bytewax_flow_from_kafka_source_to_kafka_sink(kafka_server, python):
    bootstrap = kafka_server.get_bootstrap_server()
    create_topics(bootstrap, lines=3, shouted=3)
    records = [(b"k%d" % i, b"line %d" % i) for i in range(3000)]
    produce(bootstrap, "lines", records)
    env = dict(os.environ, KAFKALOG_BOOTSTRAP=bootstrap, KAFKALOG_INPUT="lines", KAFKALOG_OUTPUT="shouted")
    flow = subprocess.run([python, "-m", "bytewax.run", "bytewax_flow:flow"], cwd=APPS, env=env, capture_output=True,
                          text=True, timeout=120)
    assert flow.returncode == 0, flow.stderr[-4000:]
    got = read_topic(bootstrap, "shouted")
    assert sorted((m.key(), m.value()) for m in got) == sorted((k, v.upper()) for k, v in records)


def test_a_faststream_consumer_group_of_two_members(kafka_server, python, tmp_path):
    bootstrap = kafka_server.get_bootstrap_server()
    create_topics(bootstrap, numbers=4, doubled=1)
    logs = {m: tmp_path / f"{m}.log" for m in "ab"}
    members = {m: _start(logs[m], python, os.path.join(APPS, "faststream_app.py"), bootstrap, "numbers", "doubled", m)
               for m in "ab"}
    try:
        _wait_for_two_members(bootstrap, "faststream-doublers")
        produce(bootstrap, "numbers", [(b"%d" % n, b"%d" % n) for n in range(2000)])
        got = [json.loads(m.value()) for m in read_topic(bootstrap, "doubled", until=2000)]
    finally:
        outputs = [_stop(members[m], logs[m]) for m in "ab"]
    assert sorted(r["n"] for r in got) == [2 * n for n in range(2000)], outputs
    assert set(Counter(r["member"] for r in got)) == {"a", "b"}  # the group shared the partitions


def _wait_for_two_members(bootstrap: str, group: str) -> None:
    """Until the group is stable with two members that each own a partition (the admin API of librdkafka)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(10)
        except Exception:  # the group does not exist yet
            desc = None
        if (desc is not None and desc.state == ConsumerGroupState.STABLE and len(desc.members) == 2
                and all(m.assignment.topic_partitions for m in desc.members)):
            return
        time.sleep(0.2)
    raise AssertionError(f"{group} never had two members with partitions")


def test_a_faust_table_is_rebuilt_from_its_changelog_after_a_restart(kafka_server, python, tmp_path):
    """A worker counts 300 words (five words, 60 each) and stops; a second worker, whose table starts empty in
    memory, counts 140 more (seven words, 20 each). Each word's counts in the second run go on from 61 only if faust
    rebuilt the table from its changelog topic (from 1 if not). Faust's guarantee is at least once, and on a real
    Kafka broker too the second run may count an input twice or not yet have counted the last ones when it stops
    (checked against the broker ../shared/tools/kafka-broker builds), so the test asks of the second run what holds
    there: the counts of each word go up by one from where the changelog left them."""
    bootstrap = kafka_server.get_bootstrap_server()
    create_topics(bootstrap, words=2, counts=2)
    log = tmp_path / "faust.log"

    def worker() -> subprocess.Popen:
        return _start(log, python, os.path.join(APPS, "faust_app.py"), bootstrap, str(tmp_path / "faust"), "words",
                      "counts")

    def counts(records: list) -> dict[bytes, list[int]]:
        out: dict[bytes, list[int]] = {}
        for m in records:
            out.setdefault(m.key(), []).append(int(m.value()))
        return out

    first = worker()
    try:
        produce(bootstrap, "words", [(b"w%d" % (i % 5), b"") for i in range(300)])
        got = read_topic(bootstrap, "counts", until=300, timeout_s=90)
    finally:
        output = _stop(first, log)
    assert counts(got) == {b"w%d" % w: list(range(1, 61)) for w in range(5)}, output
    ends = {}
    for m in got:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)

    second = worker()
    try:
        produce(bootstrap, "words", [(b"w%d" % (i % 7), b"") for i in range(140)])
        deadline = time.monotonic() + 90
        while True:
            later = counts([m for m in read_topic(bootstrap, "counts") if m.offset() >= ends.get(m.partition(), 0)])
            if len(later) == 7 and all(len(c) >= 5 for c in later.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        output = _stop(second, log)
    starts = {w: 61 if w < 5 else 1 for w in range(7)}
    assert {w: later.get(b"w%d" % w, [])[:5] for w in range(7)} == {w: list(range(starts[w], starts[w] + 5))
                                                                   for w in range(7)}, output
    for word, seen in later.items():
        assert seen == list(range(seen[0], seen[0] + len(seen))), word


def test_faust_streamings_own_live_broker_tests(kafka_server, python, tmp_path):
    """faust-streaming's sdist carries its test suite; its live-broker tests (tests/integration/broker: an aiokafka and
    a confluent-kafka round trip) take the broker from FAUST_TEST_BROKER and skip when none answers, so a skip fails
    here."""
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(tmp_path),
                    FAUST], check=True)
    (sdist,) = glob.glob(str(tmp_path / "faust_streaming-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (source,) = glob.glob(os.path.join(tmp_path, "faust_streaming-*", ""))
    env = dict(os.environ, FAUST_TEST_BROKER=f"kafka://{kafka_server.get_bootstrap_server()}")
    suite = subprocess.run([python, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-rA",
                            f"--junitxml={tmp_path / 'faust.xml'}", "tests/integration/broker"],
                           cwd=source, env=env, capture_output=True, text=True, timeout=300)
    assert suite.returncode == 0, suite.stdout[-4000:]
    suites = ElementTree.parse(tmp_path / "faust.xml").getroot().iter("testsuite")
    counts = Counter()
    for suite_element in suites:
        counts.update({k: int(suite_element.get(k)) for k in ("tests", "skipped", "failures", "errors")})
    assert counts == {"tests": 2, "skipped": 0, "failures": 0, "errors": 0}, suite.stdout[-4000:]
