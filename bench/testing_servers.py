"""Start-up of engine.testing's server, as a test suite meets it (issue: the Kafka for Python test suites): in a
process that has imported kafkalog and confluent-kafka (a test session), each figure the median of REPEATS fresh
starts, beside librdkafka's mock cluster, the in-process Kafka that confluent-kafka's own users test against without
Docker:
- start: `KafkaServer().start()` (a fresh temp directory, listening on a free loopback port) to its return; the mock
  cluster: a producer made with `test.mock.num.brokers=1` (the mock starts inside it);
- first acknowledged produce: from the start of either to the first record acknowledged to a librdkafka producer
  (acks=all, a topic created on first use), not idempotent and idempotent.
librdkafka waits a fixed 500 ms after making an idempotent producer before it asks for a producer id
(rdkafka_idempotence.c: rd_kafka_idemp_init starts the PID timer "non-immediate"), whatever the server, so the
idempotent row has that floor on every server; the figure shows it rather than hide it.
`python -m bench.testing_servers [--quick]` writes bench/results/testing_servers.md and, unless --quick, the README's
table of it (between its markers, never by hand); `python -m bench` includes the figures."""
from __future__ import annotations

import argparse
import os
import sys
import time

from bench import kafka, readme_tables, runner
from bench.listener import first_ack
from bench.runner import figure

RESULTS = os.path.join(os.path.dirname(__file__), "results")
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
START = "<!-- test-server start-up table: written by `python -m bench.testing_servers` from one run -->"
END = "<!-- end of the test-server start-up table -->"
REPEATS = 7
def _ours(idempotent: bool | None) -> float:
    """Seconds from KafkaServer() to start()'s return (idempotent None), or to the first acknowledged produce."""
    from engine.testing import KafkaServer

    t0 = time.perf_counter()
    server = KafkaServer().start()
    try:
        if idempotent is not None:
            first_ack({"bootstrap.servers": server.get_bootstrap_server(), "enable.idempotence": idempotent})
        return time.perf_counter() - t0
    finally:
        server.stop()


def _mock(idempotent: bool | None) -> float:
    """The same for librdkafka's mock cluster, started by the producer that measures it."""
    import confluent_kafka

    t0 = time.perf_counter()
    if idempotent is None:
        confluent_kafka.Producer({"test.mock.num.brokers": 1, "logger": kafka.QUIET})
        return time.perf_counter() - t0
    first_ack({"test.mock.num.brokers": 1, "enable.idempotence": idempotent})
    return time.perf_counter() - t0


def figures(quick: bool) -> list[dict]:
    repeats = 2 if quick else REPEATS
    _ours(False), _mock(False)  # imports and first-use costs of both, outside the figures
    out = []
    for label, idempotent, limit in (("start", None, 0.05),
                                     ("start to the first acknowledged produce, not idempotent", False, 0.1),
                                     ("start to the first acknowledged produce, idempotent", True, 0.3)):
        ours, theirs = [], []
        for rep in range(repeats):
            pair = [lambda: _ours(idempotent), lambda: _mock(idempotent)]
            if rep % 2:
                pair.reverse()
            a, b = (f() for f in pair)
            ours.append(a if rep % 2 == 0 else b)
            theirs.append(b if rep % 2 == 0 else a)
        fig = figure(f"engine.testing KafkaServer: {label}", ours, "s", "librdkafka's mock cluster", theirs, True)
        fig["ceilings"] = [["KafkaServer", fig["value"], limit]]
        out.append(fig)
    return out


def table(figs: list[dict]) -> str:
    """The figures in milliseconds, with the machine they ran on."""
    m = runner.machine()
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; median of {len(figs[0]['samples'][0])} "
             "fresh starts each, min-max in brackets.", "",
             "| from the start of the server | KafkaServer (in process) | librdkafka's mock cluster | target |",
             "|---|---|---|---|"]
    for f in figs:
        ours, theirs = (sorted(s) for s in f["samples"])
        (_, value, limit), = f["ceilings"]
        lines.append(f"| {f['name'].split(': ', 1)[1]} | {value * 1000:.0f} ms ({ours[0] * 1000:.0f}–"
                     f"{ours[-1] * 1000:.0f}) | {f['peer_value'] * 1000:.0f} ms ({theirs[0] * 1000:.0f}–"
                     f"{theirs[-1] * 1000:.0f}) | ≤ {limit * 1000:.0f} ms {'met' if value <= limit else 'NOT met'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.testing_servers")
    parser.add_argument("--quick", action="store_true", help="two repetitions")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    md = table(figures(args.quick))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "testing_servers.md"), "w") as f:
        f.write(md)
    if not args.quick and args.out == RESULTS:
        readme_tables.replace_between(README, START, END, md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
