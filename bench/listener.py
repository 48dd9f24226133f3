"""The Kafka protocol listener (`kafkalog serve`, in a process of its own) beside a real Kafka broker (KAFKA_HOME given
to `make bench`), both on 127.0.0.1 with fresh data directories: confluent-kafka producing n x 100 B keyed records to
each (acks=all, idempotent, linger 5 ms) and consuming them back (assigned partitions), one poll() per record and in
consume(num_messages=10,000) batches (a poll loop measures the client: both servers are idle most of the time it
runs); 50 producers and 50 consumers at once, each on a partition of its own (records/s through both, the p99 of the
producers' delivery latency, the server's resident memory with the 100 clients connected); the time from starting
each process to its first acknowledged produce; each process's resident memory at idle and its peak under that load;
and the CPU time each server process spends per million records it takes or serves. Without KAFKA_HOME the rows are
listed as not run."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.kafka import PARTITIONS, QUIET, VALUE, rdkafka_read, rdkafka_send
from bench.runner import Contender, Workload, figure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDS = "needs a broker: make bench KAFKA_HOME=<a Kafka installation or build folder>"


CLIENTS = 50      # producers in the many-clients row, and as many consumers
TURN = 500        # records each of those producers sends, and each consumer takes at most, in its turn
BATCH = 10_000    # records a batched consume() call asks for


def _rows(n: int) -> list[tuple[str, str]]:
    label = f"{n // 1000}k x {VALUE} B records, keyed, {PARTITIONS} partitions"
    return [("listener", f"confluent-kafka produce of {label}, acks=all, idempotent, linger 5 ms: to kafkalog serve "
                         f"vs to a broker"),
            ("listener", f"confluent-kafka consume of {label}, partitions assigned, one poll() per record: from "
                         f"kafkalog serve vs from a broker"),
            ("listener", f"confluent-kafka consume of {label}, partitions assigned, consume(num_messages={BATCH:,}) "
                         f"batches: from kafkalog serve vs from a broker"),
            ("listener", f"{CLIENTS} confluent-kafka producers and {CLIENTS} consumers at once, {n // 1000}k x "
                         f"{VALUE} B records in all, a partition each (acks=all, idempotent, linger 5 ms; consume() "
                         f"batches), from the clients' start to the last record read: kafkalog serve vs a broker")]


def many_clients(bootstrap: str, topic: str, n: int, keys: list[bytes], values: list[bytes]) -> list[float]:
    """CLIENTS producers and CLIENTS consumers on `topic` (CLIENTS partitions) at once: producer i sends n/CLIENTS
    records to partition i, consumer i reads partition i from its start, every key and value, until it has them all;
    one thread drives the 100 clients in turns of TURN records. The producers' delivery latencies (seconds)."""
    import confluent_kafka as ck

    each, latencies = n // CLIENTS, []

    def delivered(err, msg) -> None:
        if err is None:
            latencies.append(msg.latency())

    common = {"bootstrap.servers": bootstrap, "logger": QUIET}
    producers = [ck.Producer({**common, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                              "on_delivery": delivered}) for _ in range(CLIENTS)]
    consumers = [ck.Consumer({**common, "group.id": "unused", "enable.auto.commit": False,
                              "fetch.queue.backoff.ms": 10}) for _ in range(CLIENTS)]
    for i, c in enumerate(consumers):
        c.assign([ck.TopicPartition(topic, i, 0)])
    sent, got = [0] * CLIENTS, [0] * CLIENTS
    deadline = time.monotonic() + 600
    while sum(got) < each * CLIENTS and time.monotonic() < deadline:
        for i, p in enumerate(producers):
            with contextlib.suppress(BufferError):  # its queue is full: its next turn
                for j in range(sent[i], min(each, sent[i] + TURN)):
                    p.produce(topic, values[j % len(values)], keys[j % len(keys)], partition=i)
                    sent[i] += 1
            p.poll(0)
        for i, c in enumerate(consumers):
            if got[i] < each:
                for msg in c.consume(TURN, 0):
                    if msg.error() is None:
                        msg.key(), msg.value()
                        got[i] += 1
    for p in producers:
        assert p.flush(120) == 0
    for c in consumers:
        c.close()
    assert sum(got) == each * CLIENTS
    return latencies


class Served:
    """`kafkalog serve` on a fresh directory, in a process of its own."""

    def __init__(self, scratch: str) -> None:
        self.data = data = tempfile.mkdtemp(prefix="serve-", dir=scratch)
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--data", data, "--listen",
                                      "127.0.0.1:0", "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.bootstrap = json.loads(self.proc.stdout.readline())["bootstrap"]
        self.cpu: dict[str, dict[bool, list[float]]] = {}  # row: {ours?: server CPU s per 1M records}
        self.p99: dict[bool, list[float]] = {}   # {ours?: p99 delivery latency (ms) of each many-clients run}
        self.crowd_mib: dict[bool, list[float]] = {}  # {ours?: server resident MiB with the 100 clients connected}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        shutil.rmtree(self.data, ignore_errors=True)  # (a scratch on tmpfs is memory: the later suites need it)


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


def first_ack(config: dict, topic: str = "first") -> None:
    """One record produced with acks=all through a new librdkafka producer made with `config`, and acknowledged
    (its delivery report checked; not idempotent unless `config` says so: librdkafka's idempotent producer, made before
    any broker is up, asks for its producer id on a 500 ms timer, whichever server it talks to)."""
    import confluent_kafka as ck

    reports: list = []
    producer = ck.Producer({**config, "acks": "all", "linger.ms": 0, "logger": QUIET})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err))
    if producer.flush(120) != 0 or reports != [None]:
        raise RuntimeError(f"the first produce was not acknowledged: {reports}")


def startup_seconds(scratch: str, home: str) -> tuple[float, float]:
    """(kafkalog serve, the broker): seconds from starting the process (the broker's storage format included, as
    its quickstart does) to the first acknowledged produce (acks=all), topic creation included."""
    from bench.kafka_broker import KafkaBroker

    t0 = time.monotonic()
    served = Served(scratch)
    try:
        first_ack({"bootstrap.servers": served.bootstrap})
        ours = time.monotonic() - t0
    finally:
        served.close()
    t0 = time.monotonic()
    with KafkaBroker(home, tempfile.mkdtemp(prefix="broker-", dir=scratch), {"num.partitions": 1}) as broker:
        first_ack({"bootstrap.servers": broker.bootstrap})
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

    served, workdir = Served(scratch), tempfile.mkdtemp(prefix="broker-", dir=scratch)
    try:
        with KafkaBroker(home, workdir) as broker:
            time.sleep(2)  # both settled, nothing asked of them yet
            served.idle_mib = (group_memory(served.proc.pid)[0], group_memory(broker._proc.pid)[0])
            yield served, broker
    finally:
        served.close()
        shutil.rmtree(workdir, ignore_errors=True)


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

    def new_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
        topic = f"{prefix}{next(counter)}"
        admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap, "logger": QUIET})
        admin.create_topics([ck.admin.NewTopic(topic, partitions, 1)])[topic].result()
        return topic

    def pid_of(bootstrap: str) -> int:
        return served.proc.pid if bootstrap == served.bootstrap else broker._proc.pid

    def server_cpu(bootstrap: str, kind: str, call) -> None:
        """Run `call`, adding the CPU time the server it talks to spent meanwhile to served.cpu[kind]."""
        pid = pid_of(bootstrap)
        before = group_cpu(pid)
        call()
        served.cpu.setdefault(kind, {}).setdefault(bootstrap == served.bootstrap, []).append(
            (group_cpu(pid) - before) * 1e6 / n)

    def produce(bootstrap: str, topic: str | None = None) -> str:
        topic = topic or new_topic(bootstrap, "p")
        server_cpu(bootstrap, "taken", lambda: rdkafka_send({"bootstrap.servers": bootstrap, "logger": QUIET},
                                                             topic, n, keys, values))
        return topic

    def consume(bootstrap: str, topic: str, batch: int) -> None:
        server_cpu(bootstrap, f"served{batch}", lambda: rdkafka_read(
            {"bootstrap.servers": bootstrap, "logger": QUIET}, topic, n, "unused", subscribe=False, batch=batch))

    crowd_topics: dict[str, list[str]] = {}  # made before the rows, so that no run's time includes a topic's making

    def crowd(bootstrap: str) -> None:
        ours = bootstrap == served.bootstrap
        topic = crowd_topics[bootstrap].pop() if crowd_topics[bootstrap] else new_topic(bootstrap, "m", CLIENTS)
        latencies: list[float] = []
        server_cpu(bootstrap, "crowd", lambda: latencies.extend(many_clients(bootstrap, topic, n, keys, values)))
        served.p99.setdefault(ours, []).append(statistics.quantiles(latencies, n=100)[98] * 1000)
        served.crowd_mib.setdefault(ours, []).append(group_memory(pid_of(bootstrap))[0])

    for bootstrap in (served.bootstrap, broker.bootstrap):
        crowd_topics[bootstrap] = [new_topic(bootstrap, "m", CLIENTS) for _ in range(8)]
    ours_topic = produce(served.bootstrap, new_topic(served.bootstrap, "c"))
    their_topic = produce(broker.bootstrap, new_topic(broker.bootstrap, "c"))
    served.cpu.clear()  # (the topics' filling is not a measured repetition)
    (g0, produce_row), (g1, consume_row), (g2, batched_row), (g3, crowd_row) = _rows(n)
    return [Workload(g0, produce_row, n, n * VALUE, [Contender("kafkalog serve", lambda: produce(served.bootstrap)),
                                                     Contender(peer, lambda: produce(broker.bootstrap))],
                     targets={peer: 1.5}),
            Workload(g1, consume_row, n, n * VALUE,
                     [Contender("kafkalog serve", lambda: consume(served.bootstrap, ours_topic, 0)),
                      Contender(peer, lambda: consume(broker.bootstrap, their_topic, 0))], targets={peer: 1.0}),
            Workload(g2, batched_row, n, n * VALUE,
                     [Contender("kafkalog serve", lambda: consume(served.bootstrap, ours_topic, BATCH)),
                      Contender(peer, lambda: consume(broker.bootstrap, their_topic, BATCH))], targets={peer: 1.5}),
            Workload(g3, crowd_row, n, n * VALUE, [Contender("kafkalog serve", lambda: crowd(served.bootstrap)),
                                                   Contender(peer, lambda: crowd(broker.bootstrap))],
                     targets={peer: 1.0})]


def memory_figures(served, broker) -> list[dict]:
    """Resident memory of `kafkalog serve` and of the broker: at idle (before the load rows) and at peak (after);
    and the CPU time each server spent per million records in the load rows' repetitions."""
    if broker is None:
        return []
    ours, theirs = group_memory(served.proc.pid), group_memory(broker._proc.pid)
    rows = {"taken": "produce", "served0": "poll() consume", f"served{BATCH}": "batched consume",
            "crowd": f"{CLIENTS} + {CLIENTS} clients"}
    out = [figure("listener: resident memory at idle, MiB", [served.idle_mib[0]], "MiB", "a Kafka broker",
                   [served.idle_mib[1]], True, ratio_target=5),
           figure("listener: peak resident memory under the load rows, MiB", [ours[1]], "MiB", "a Kafka broker",
                   [theirs[1]], True, ratio_target=5)]
    if served.crowd_mib:
        out.append(figure(f"listener: resident memory with {CLIENTS} producers and {CLIENTS} consumers connected "
                           f"(at the end of each run of that row), MiB", served.crowd_mib[True], "MiB",
                           "a Kafka broker", served.crowd_mib[False], True, ratio_target=5))
        out.append(figure(f"listener: p99 delivery latency of the {CLIENTS} producers' records (acks=all, linger "
                           f"5 ms) with {CLIENTS} consumers reading at once, ms", served.p99[True], "ms",
                           "a Kafka broker", served.p99[False], True))
    return out + [figure(f"listener: server CPU seconds per 1 M records ({row} row)", served.cpu[kind][True], "s",
                          "a Kafka broker", served.cpu[kind][False], True)
                  for kind, row in rows.items() if kind in served.cpu]


def startup_figures(quick: bool, scratch: str) -> list[dict]:
    """Start-up to the first acknowledged produce (target ≤ 0.3 s), beside the broker's."""
    home = os.environ.get("KAFKA_HOME")
    if not home:
        return []
    starts = [startup_seconds(scratch, home) for _ in range(1 if quick else 3)]
    fig = figure("listener: process start to the first acknowledged produce (the broker's storage format "
                  "included)", [s[0] for s in starts], "s", "a Kafka broker", [s[1] for s in starts], True)
    fig["ceilings"] = [["kafkalog serve", fig["value"], 0.3]]
    return [fig]
