"""A Quix Streams application against the listener, through Quix's public API only (tests/network/quix_app.py):
exactly-once processing, a filter and a map, and a tumbling-window sum backed by the compacted changelog topic Quix
creates. Quix Streams pins its own confluent-kafka (older than the one kafkalog's other tests use), so it lives in a
virtual environment of its own under .cache, made once. The expected windows are computed here from the inputs."""
from __future__ import annotations

import json
import os
import subprocess
import venv

import pytest

import engine
from tests.network.test_listener import ROOT

QUIX = "quixstreams==3.28.1"
BASE_MS = 1_700_000_000_000  # a whole second: window starts are multiples of 1000 ms


@pytest.fixture(scope="session")
def quix_python() -> str:
    home = os.path.join(ROOT, ".cache", QUIX.replace("==", "-"))
    python = os.path.join(home, "bin", "python")
    if not os.path.exists(os.path.join(home, ".installed")):
        venv.create(home, with_pip=True, clear=True)
        subprocess.run([python, "-m", "pip", "install", "-q", QUIX], check=True)
        open(os.path.join(home, ".installed"), "w").close()
    return python


def _inputs() -> list[tuple[bytes, dict, int]]:
    """(key, value, timestamp) of the input: 300 records over three keys, 100 ms apart, then a later record of each
    key whose timestamp closes every window before it."""
    rows = [(b"k%d" % (i % 3), {"n": i}, BASE_MS + 100 * i) for i in range(300)]
    return rows + [(b"k%d" % k, {"n": 0}, BASE_MS + 60_000) for k in range(3)]


def _expected_windows() -> dict[tuple[str, int], int]:
    """{(key, window start): sum of 10 n over the even n} of every window the closing records close."""
    out: dict[tuple[str, int], int] = {}
    for key, value, ts in _inputs()[:300]:
        if value["n"] % 2 == 0:
            start = ts - ts % 1000
            out[(key.decode(), start)] = out.get((key.decode(), start), 0) + 10 * value["n"]
    return out


def test_a_quix_exactly_once_windowed_aggregation(tmp_path, quix_python):
    from confluent_kafka import Consumer, Producer

    with engine.open(str(tmp_path / "data")) as eng:
        listener = eng.serve(port=0)
        eng.create_topic("readings", 1)
        producer = Producer({"bootstrap.servers": listener.bootstrap, "enable.idempotence": True})
        for key, value, ts in _inputs():
            producer.produce("readings", key=key, value=json.dumps(value).encode(), timestamp=ts)
        assert producer.flush(30) == 0
        app = subprocess.run([quix_python, os.path.join(ROOT, "tests", "network", "quix_app.py"), listener.bootstrap,
                              str(tmp_path / "state"), "readings", "sums"], capture_output=True, text=True,
                             timeout=300)
        assert app.returncode == 0, app.stderr[-4000:]
        consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "check",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "enable.partition.eof": True})
        consumer.subscribe(["sums"])
        got: dict[tuple[str, int], int] = {}
        eof = False
        while not eof:
            msg = consumer.poll(10)
            assert msg is not None, "the output topic ended without an end-of-partition event"
            if msg.error() is not None:
                eof = msg.error().code() == msg.error()._PARTITION_EOF
                continue
            window = json.loads(msg.value())
            assert (msg.key().decode(), window["start"]) not in got, "a window was written twice"
            got[(msg.key().decode(), window["start"])] = window["value"]
            assert window["end"] == window["start"] + 1000
        consumer.close()
        assert got == _expected_windows()
        changelogs = [t for t in eng.list_topics() if t.startswith("changelog__")]
        assert changelogs, eng.list_topics()
        assert all(eng.describe_topic(t).config["cleanup.policy"] == "compact" for t in changelogs)
