"""The Kafka protocol listener (`kafkalog serve`, in a process of its own) beside a real Kafka broker (KAFKA_HOME given
to `make bench`), both on 127.0.0.1 with fresh data directories: confluent-kafka producing n x 100 B keyed records to
each (acks=all, idempotent, linger 5 ms) and consuming them back (assigned partitions); the time from starting each
process to its first acknowledged produce; each process's resident memory at idle and its peak under that load; and
the CPU time each server process spends per million records it takes or serves (confluent-kafka's consumer, not the
server, bounds the consume row's rate on this machine: both servers are idle most of the time it runs). Without
KAFKA_HOME the rows are listed as not run."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.kafka import PARTITIONS, QUIET, VALUE, rdkafka_read, rdkafka_send
from bench.log import _figure
from bench.runner import Contender, Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDS = "needs a broker: make bench KAFKA_HOME=<a Kafka installation or build folder>"


def _rows(n: int) -> list[tuple[str, str]]:
    label = f"{n // 1000}k x {VALUE} B records, keyed, {PARTITIONS} partitions"
    return [("listener", f"confluent-kafka produce of {label}, acks=all, idempotent, linger 5 ms: to kafkalog serve "
                         f"vs to a broker"),
            ("listener", f"confluent-kafka consume of {label}, partitions assigned: from kafkalog serve vs from a "
                         f"broker")]


class Served:
    """`kafkalog serve` on a fresh directory, in a process of its own."""

    def __init__(self, scratch: str) -> None:
        data = tempfile.mkdtemp(prefix="serve-", dir=scratch)
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--data", data, "--listen",
                                      "127.0.0.1:0", "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.bootstrap = json.loads(self.proc.stdout.readline())["bootstrap"]
        self.cpu: dict[str, dict[bool, list[float]]] = {}  # "taken"/"served": {ours?: CPU s per 1M records}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def _group(pid: int):
    """(its /proc folder, its status fields) for each live process of `pid`'s process group (a launcher script and
    the JVM it starts count together)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        folder = f"/proc/{entry}"
        try:
            with open(f"{folder}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pid:
                    continue
            with open(f"{folder}/status") as f:
                yield folder, dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile


def group_memory(pid: int) -> tuple[float, float]:
    """(resident MiB now, peak resident MiB) summed over `pid`'s process group."""
    found = [(int(st.get("VmRSS", "0 kB").split()[0]), int(st.get("VmHWM", "0 kB").split()[0]))
             for _, st in _group(pid)]
    return sum(r for r, _ in found) / 1024, sum(h for _, h in found) / 1024


def group_cpu(pid: int) -> float:
    """CPU seconds used so far by the threads of `pid`'s process group (the scheduler's nanosecond count: the clock
    ticks of /proc/PID/stat are too coarse for a quick run)."""
    total = 0
    for folder, _ in _group(pid):
        try:
            for task in os.listdir(f"{folder}/task"):
                with open(f"{folder}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (OSError, ValueError):
            continue  # a thread or the process gone meanwhile
    return total / 1e9


def _first_ack(bootstrap: str) -> None:
    """One record produced with acks=all and acknowledged (not idempotent: librdkafka's idempotent producer, made
    before any broker is up, asks for its producer id on a 500 ms timer, whichever server it talks to)."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": QUIET})
    producer.produce("first", b"x")
    assert producer.flush(120) == 0


def startup_seconds(scratch: str, home: str) -> tuple[float, float]:
    """(kafkalog serve, the broker): seconds from starting the process (the broker's storage format included, as
    its quickstart does) to the first acknowledged produce (acks=all), topic creation included."""
    from bench.kafka_broker import KafkaBroker

    t0 = time.monotonic()
    served = Served(scratch)
    try:
        _first_ack(served.bootstrap)
        ours = time.monotonic() - t0
    finally:
        served.close()
    t0 = time.monotonic()
    with KafkaBroker(home, tempfile.mkdtemp(prefix="broker-", dir=scratch), {"num.partitions": 1}) as broker:
        _first_ack(broker.bootstrap)
        theirs = time.monotonic() - t0
    return ours, theirs


@contextlib.contextmanager
def session(scratch: str):
    """(kafkalog serve, a broker), both stopped on exit; (None, None) without KAFKA_HOME."""
    home = os.environ.get("KAFKA_HOME")
    if not home:
        yield None, None
        return
    from bench.kafka_broker import KafkaBroker

    served = Served(scratch)
    try:
        with KafkaBroker(home, tempfile.mkdtemp(prefix="broker-", dir=scratch)) as broker:
            time.sleep(2)  # both settled, nothing asked of them yet
            served.idle_mib = (group_memory(served.proc.pid)[0], group_memory(broker._proc.pid)[0])
            yield served, broker
    finally:
        served.close()


def workloads(quick: bool, served, broker) -> list[Workload]:
    n = 100_000 if quick else 1_000_000
    peer = "confluent-kafka with a Kafka broker"
    if broker is None:
        return [Workload(g, name, 0, 0, [Contender("kafkalog", None), Contender(peer, None)], not_yet=NEEDS)
                for g, name in _rows(n)]
    import confluent_kafka as ck
    import confluent_kafka.admin  # noqa: F401

    counter = iter(range(10**9))
    keys = [b"key-%05d" % i for i in range(1000)]
    values = [os.urandom(VALUE) for _ in range(1000)]

    def new_topic(bootstrap: str, prefix: str) -> str:
        topic = f"{prefix}{next(counter)}"
        admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap, "logger": QUIET})
        admin.create_topics([ck.admin.NewTopic(topic, PARTITIONS, 1)])[topic].result()
        return topic

    def server_cpu(bootstrap: str, kind: str, call) -> None:
        """Run `call`, adding the CPU time the server it talks to spent meanwhile to served.cpu[kind]."""
        pid = served.proc.pid if bootstrap == served.bootstrap else broker._proc.pid
        before = group_cpu(pid)
        call()
        served.cpu.setdefault(kind, {}).setdefault(bootstrap == served.bootstrap, []).append(
            (group_cpu(pid) - before) * 1e6 / n)

    def produce(bootstrap: str, topic: str | None = None) -> str:
        topic = topic or new_topic(bootstrap, "p")
        server_cpu(bootstrap, "taken", lambda: rdkafka_send({"bootstrap.servers": bootstrap, "logger": QUIET},
                                                             topic, n, keys, values))
        return topic

    def consume(bootstrap: str, topic: str) -> None:
        server_cpu(bootstrap, "served", lambda: rdkafka_read({"bootstrap.servers": bootstrap, "logger": QUIET},
                                                              topic, n, "unused", subscribe=False))

    ours_topic = produce(served.bootstrap, new_topic(served.bootstrap, "c"))
    their_topic = produce(broker.bootstrap, new_topic(broker.bootstrap, "c"))
    served.cpu.clear()  # (the topics' filling is not a measured repetition)
    (g0, produce_row), (g1, consume_row) = _rows(n)
    return [Workload(g0, produce_row, n, n * VALUE, [Contender("kafkalog serve", lambda: produce(served.bootstrap)),
                                                     Contender(peer, lambda: produce(broker.bootstrap))],
                     targets={peer: 1.0}),
            Workload(g1, consume_row, n, n * VALUE,
                     [Contender("kafkalog serve", lambda: consume(served.bootstrap, ours_topic)),
                      Contender(peer, lambda: consume(broker.bootstrap, their_topic))], targets={peer: 1.0})]


def memory_figures(served, broker) -> list[dict]:
    """Resident memory of `kafkalog serve` and of the broker: at idle (before the load rows) and at peak (after);
    and the CPU time each server spent per million records in the load rows' repetitions."""
    if broker is None:
        return []
    ours, theirs = group_memory(served.proc.pid), group_memory(broker._proc.pid)
    return [_figure("listener: resident memory at idle, MiB", [served.idle_mib[0]], "MiB", "a Kafka broker",
                    [served.idle_mib[1]], True),
            _figure("listener: peak resident memory under the load rows, MiB", [ours[1]], "MiB", "a Kafka broker",
                    [theirs[1]], True)] + \
        [_figure(f"listener: server CPU seconds per 1 M records {kind} ({row} row)",
                 served.cpu[kind][True], "s", "a Kafka broker", served.cpu[kind][False], True)
         for kind, row in (("taken", "produce"), ("served", "consume")) if kind in served.cpu]


def startup_figures(quick: bool, scratch: str) -> list[dict]:
    """Start-up to the first acknowledged produce (target ≤ 0.3 s), beside the broker's."""
    home = os.environ.get("KAFKA_HOME")
    if not home:
        return []
    starts = [startup_seconds(scratch, home) for _ in range(1 if quick else 3)]
    fig = _figure("listener: process start to the first acknowledged produce (the broker's storage format "
                  "included)", [s[0] for s in starts], "s", "a Kafka broker", [s[1] for s in starts], True)
    fig["ceilings"] = [["kafkalog serve", fig["value"], 0.3]]
    return [fig]
