"""A Quix Streams application against the pytest plugin's server, through Quix's public API only
(tests/network/apps/quix_app.py): exactly-once processing, a filter and a map, and a tumbling-window sum backed by the
compacted changelog topic Quix creates. The application is killed with SIGKILL twice while it runs, restarted once
with its local state (RocksDB) and once without it (Quix rebuilds it from the changelog), and the read_committed
output must still be every window exactly once. Quix Streams pins its own confluent-kafka (older than the one
kafkalog's other tests use), so it runs in a virtual environment of its own (tests/network/third_party.py). The
expected windows are computed here from the inputs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.network.third_party import APPS, create_topics, produce, read_topic, virtualenv

QUIX = "quixstreams==3.28.1"
BASE_MS = 1_700_000_000_000  # a whole second: window starts are multiples of 1000 ms
RECORDS = 30_000


@pytest.fixture(scope="session")
def quix_python() -> str:
    return virtualenv(QUIX.replace("==", "-"), [QUIX])


def _inputs() -> list[tuple[bytes, dict, int]]:
    """(key, value, timestamp) of the input: RECORDS records over three keys, 100 ms apart, then a later record of
    each key whose timestamp closes every window before it."""
    rows = [(b"k%d" % (i % 3), {"n": i}, BASE_MS + 100 * i) for i in range(RECORDS)]
    return rows + [(b"k%d" % k, {"n": 0}, BASE_MS + 100 * RECORDS + 60_000) for k in range(3)]


def _expected_windows() -> dict[tuple[str, int], int]:
    """{(key, window start): sum of 10 n over the even n} of every window the closing records close."""
    out: dict[tuple[str, int], int] = {}
    for key, value, ts in _inputs()[:RECORDS]:
        if value["n"] % 2 == 0:
            start = ts - ts % 1000
            out[(key.decode(), start)] = out.get((key.decode(), start), 0) + 10 * value["n"]
    return out


class _Committed:
    """The output topic read_committed as it grows, by one consumer kept open."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", "enable.partition.eof": True})
        self.consumer.subscribe(["sums"])
        self.windows: list[tuple[str, dict]] = []

    def wait_for(self, count: int, app: subprocess.Popen, timeout_s: float = 120.0) -> None:
        """Read until `count` windows are committed."""
        deadline = time.monotonic() + timeout_s
        while len(self.windows) < count:
            assert time.monotonic() < deadline and app.poll() is None, \
                f"{len(self.windows)} windows committed, waiting for {count} (the application ended: {app.poll()})"
            msg = self.consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                self.windows.append((msg.key().decode(), json.loads(msg.value())))


def _kill_with_a_transaction_open(app: subprocess.Popen, bootstrap: str, timeout_s: float = 60.0) -> None:
    """SIGKILL the application at a moment its open transaction has written output: it is frozen (SIGSTOP) and
    killed only if the output's end lies beyond its last stable offset (ListOffsets read_uncommitted against
    read_committed), else let go for a moment and tried again. A kill just after a commit would leave nothing to
    abort, and the test could not tell a kill mid-transaction from none."""
    from confluent_kafka import Consumer, TopicPartition

    probes = [Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": level})
              for level in ("read_committed", "read_uncommitted")]
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            app.send_signal(signal.SIGSTOP)
            stable, end = (p.get_watermark_offsets(TopicPartition("sums", 0), timeout=10, cached=False)[1]
                           for p in probes)
            if end > stable:
                app.send_signal(signal.SIGKILL)
                app.wait()
                return
            app.send_signal(signal.SIGCONT)
            assert time.monotonic() < deadline and app.poll() is None, "no moment with uncommitted output was found"
            time.sleep(0.01)
    except BaseException:
        app.kill()  # (never left frozen behind a failed test)
        app.wait()
        raise
    finally:
        for p in probes:
            p.close()


def test_a_quix_exactly_once_windowed_aggregation_killed_and_restarted(kafka_server, quix_python, tmp_path):
    bootstrap = kafka_server.get_bootstrap_server()
    create_topics(bootstrap, readings=1)
    produce(bootstrap, "readings", [(key, json.dumps(value).encode(), ts) for key, value, ts in _inputs()])
    state = tmp_path / "state"
    log = tmp_path / "quix.log"

    def app(idle_s: float) -> subprocess.Popen:
        with open(log, "a") as out:  # the child has its own copy of the descriptor
            return subprocess.Popen([quix_python, os.path.join(APPS, "quix_app.py"), bootstrap, str(state),
                                     "readings", "sums", "0.2", str(idle_s)], stdout=out, stderr=subprocess.STDOUT)

    committed = _Committed(bootstrap)
    total = len(_expected_windows())
    for kill_at, drop_state in ((total // 5, False), (total // 2, True)):
        running = app(60)
        committed.wait_for(kill_at, running)
        _kill_with_a_transaction_open(running, bootstrap)
        if drop_state:  # the next run has only the changelog topic to rebuild its windows from
            shutil.rmtree(state)
    last = app(3)
    assert last.wait(300) == 0, log.read_text()[-4000:]
    committed.consumer.close()

    got: dict[tuple[str, int], int] = {}
    for msg in read_topic(bootstrap, "sums", committed=True):
        window = json.loads(msg.value())
        assert (msg.key().decode(), window["start"]) not in got, "a window was written twice"
        got[(msg.key().decode(), window["start"])] = window["value"]
        assert window["end"] == window["start"] + 1000
    assert got == _expected_windows()
    eng = kafka_server.engine
    changelogs = [t for t in eng.list_topics() if t.startswith("changelog__")]
    assert changelogs, eng.list_topics()
    assert all(eng.describe_topic(t).config["cleanup.policy"] == "compact" for t in changelogs)
    # each kill left output of an open transaction: it is there, aborted, beside the committed windows
    assert len(read_topic(bootstrap, "sums")) > len(got)
