"""The many-partitions curve: what one topic of N partitions costs (N = 1,000, 10,000, 100,000; --quick: 100 and
1,000). Each phase runs in a fresh interpreter that has imported kafkalog and opened an empty directory first (a
process that already uses the library), after os.sync(), so no phase pays for the imports or for the previous
phase's dirty pages:
- create: `create_topic(N)` in an open engine;
- produce: 2 N keyed records into the new topic (murmur2 spreads them: the first use of most partitions, which loads
  each), then one record to each partition, each timed to the end of `flush()`;
- close: the engine's `close()` after that;
- the file system's floor of create and of close: the directories and files that phase left in one partition's
  directory, made for every partition by a plain loop of os.mkdir/os.open/os.write (same names, same sizes) and
  synced as the engine syncs them (segments.fs.FileSystem.sync_paths: one syncfs where the file system honours it,
  else an fsync of each); what any engine writing Kafka's files pays for them on that disk, without its own work;
- clean open: `engine.open()` of the closed directory, and the process's RSS then (idle: no partition used);
- consume: one record from each partition (assign all, poll until N records are read);
- after kill -9: a process appends to one partition and is killed; then `engine.open()` and the first read of one
  other partition, which recovers that partition before it serves;
- with KAFKA_HOME, up to BROKER_MAX partitions: a real Kafka broker (bench.kafka_broker) creates the topic, stops,
  is handed the clean directory's logs (`kafkalog handoff`) and starts again; its figure is the time it reports for
  loading them ("Loaded N logs in T ms"), beside kafkalog's clean open.
Up to 10,000 partitions each figure is the median of REPEATS runs of the whole sequence; 100,000 is run once. No
point's directories are removed before the curve on that file system ends (see _point: on a disk, removals slow the
file system's metadata work for minutes after them).
The curve runs on the disk the data would live on (the scratch directory: the temp dir unless told) and again on
tmpfs (/dev/shm) beside it, where the machine has one and the scratch is not on it (the broker's load: on the first).
`python -m bench.many_partitions [--quick]` writes bench/results/many_partitions.{md,json,png} and, unless --quick,
the README's many-partitions table (between its markers, never by hand); `python -m bench` includes it."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from bench import readme_tables

RESULTS = os.path.join(os.path.dirname(__file__), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
START = "<!-- many-partitions table: written by `python -m bench.many_partitions` from one run -->"
END = "<!-- end of the many-partitions table -->"
REPEATS = 3
TARGETS = {  # (phase, partitions): seconds or MiB, from the issue that set them; None where none was set
    ("create", 10_000): 2.0, ("clean open", 10_000): 0.3, ("close", 10_000): 0.5,
    ("produce 2N keyed", 10_000): 1.0, ("idle RSS MiB", 10_000): 100,
    ("create", 100_000): 20.0, ("clean open", 100_000): 1.0, ("first read after kill -9", 100_000): 0.05,
}

PRELUDE = """
import json, os, signal, sys, tempfile, time
import engine
engine.open(tempfile.mkdtemp()).close()  # a process that already uses the library
path, n = sys.argv[1], int(sys.argv[2])
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def timed(call):
    os.sync()
    t = time.perf_counter()
    result = call()
    return time.perf_counter() - t, result
"""

WRITE = PRELUDE + """
e = engine.open(path, max_partitions=max(n + 100, 20_000))
out = {}
def files():  # (name, size) of what partition 0's directory holds
    d = os.path.join(path, "many-0")
    return sorted((f, os.path.getsize(os.path.join(d, f))) for f in os.listdir(d))
out["create"], _ = timed(lambda: e.create_topic("many", n))
created = files()
keys = [b"k%d" % i for i in range(2 * n)]
def produce(count, partitioned):
    with e.producer() as p:
        for i in range(count):
            p.send("many", b"v", key=keys[i], partition=i if partitioned else None)
        p.flush()
out["produce 2N keyed"], _ = timed(lambda: produce(2 * n, False))  # (the first use of most partitions)
out["produce one to each"], _ = timed(lambda: produce(n, True))
made = {name for name, _ in files()}
out["close"], _ = timed(e.close)
out["layout"] = {"create": created, "close": [(name, size) for name, size in files() if name not in made]}
print(json.dumps(out))
"""

FLOOR = PRELUDE + """
from segments.fs import FileSystem
layout = json.loads(sys.argv[3])
def make(names, new_directories):
    paths = []
    for i in range(n):
        directory = os.path.join(path, f"floor-{i}")
        if new_directories:
            os.mkdir(directory)
            paths.append(directory)
        for name, size in names:
            fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"x" * size)
            finally:
                os.close(fd)
            paths.append(os.path.join(directory, name))
    FileSystem().sync_paths(paths, path)
out = {}
out["create: the file system's floor"], _ = timed(lambda: make(layout["create"], True))
out["close: the file system's floor"], _ = timed(lambda: make(layout["close"], False))
print(json.dumps(out))
"""

OPEN = PRELUDE + """
base = rss_mib()
out = {}
out["clean open"], e = timed(lambda: engine.open(path, max_partitions=max(n + 100, 20_000)))
out["idle RSS MiB"] = rss_mib()
out["idle RSS added MiB"] = rss_mib() - base
out["loaded on open"] = len(e._logs.loaded_logs())
def consume():
    with e.consumer(auto_offset_reset="earliest", max_poll_records=100_000) as c:
        c.assign([engine.TopicPartition("many", p) for p in range(n)])
        seen = set()
        while len(seen) < n:
            for tp, recs in c.poll(timeout_ms=10_000).items():
                if recs:
                    seen.add(tp.partition)
                    c.pause(tp)
        return len(seen)
out["consume one from each"], out["partitions read"] = timed(consume)
e.close()
print(json.dumps(out))
"""

KILLED = PRELUDE + """
e = engine.open(path, max_partitions=max(n + 100, 20_000))
with e.producer(linger_ms=0) as p:
    p.send("many", b"after", partition=0).get()
os.kill(os.getpid(), signal.SIGKILL)
"""

AFTER_KILL = PRELUDE + """
out = {}
out["open after kill -9"], e = timed(lambda: engine.open(path, max_partitions=max(n + 100, 20_000)))
def first_read():
    with e.consumer(auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        c.assign([engine.TopicPartition("many", n // 2)])
        return len(list(c))
out["first read after kill -9"], out["records read"] = timed(first_read)
e.close()
print(json.dumps(out))
"""


def phase(code: str, path: str, n: int, killed: bool = False, cwd: str = ROOT, *extra: str) -> dict:
    """Run one phase's `code` (WRITE, OPEN, KILLED, AFTER_KILL, FLOOR) on `n` partitions at `path` in a fresh
    interpreter whose kafkalog is the checkout `cwd`'s; its figures."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), path, str(n), *extra], cwd=cwd,
                          capture_output=True, text=True, timeout=3600)
    if killed:
        if done.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the process to kill ended with {done.returncode}: {done.stderr[-2000:]}")
        return {}
    if done.returncode:
        raise RuntimeError(f"a many-partitions phase failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


BROKER_MAX = 10_000  # the largest point handed to a real broker (its controller creates the partitions one by one)
BROKER_STEP = 5_000  # partitions a request to its controller creates at once
LOADED = re.compile(rb"Loaded (\d+) logs in (\d+)ms")


def _broker_load(home: str, n: int, data: str, scratch: str) -> float | None:
    """Seconds a real Kafka broker (KAFKA_HOME) takes to load the `n` partition logs of the clean kafkalog directory
    `data`, handed to it (`kafkalog handoff`): its own "Loaded N logs in T ms" as it starts (None above
    BROKER_MAX)."""
    if n > BROKER_MAX:
        return None
    import confluent_kafka.admin as ck_admin

    from bench.kafka_broker import KafkaBroker
    from engine.tools.handoff import handoff

    broker = KafkaBroker(home, tempfile.mkdtemp(prefix="broker-", dir=scratch))
    with broker:
        admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        # (a KRaft controller takes at most 10,000 records per request: the topic grows a step at a time)
        admin.create_topics([ck_admin.NewTopic("many", min(n, BROKER_STEP), 1)])["many"].result(600)
        for count in range(2 * BROKER_STEP, n + BROKER_STEP, BROKER_STEP):
            admin.create_partitions([ck_admin.NewPartitions("many", min(count, n))])["many"].result(600)
        del admin  # (before the broker stops: a client left would log its failing reconnects)
        deadline = time.monotonic() + 600
        while sum(d.startswith("many-") for d in os.listdir(broker.data)) < n and time.monotonic() < deadline:
            time.sleep(1)
    handoff(data, broker.data, ["many"])
    with open(broker.log_path, "rb") as f:
        seen = len(f.read())
    with broker:
        with open(broker.log_path, "rb") as f:
            found = [m for m in LOADED.finditer(f.read()[seen:]) if int(m.group(1)) >= n]
    if not found:
        raise RuntimeError(f"the broker did not say it loaded the {n} logs: see {broker.log_path}")
    return int(found[0].group(2)) / 1000


def _point(n: int, scratch: str, broker: bool) -> dict:
    """Every phase at `n` partitions, in a directory of its own (and, with `broker` and KAFKA_HOME, a real broker's
    load of it). Nothing is removed until the scratch directory is, after every point on its file system: on this
    VM's ext4, making 10,000 directories with a file each took 0.41 s while no directory had been removed, and 2.7,
    4.6, 6.7 and 8.7 s in turn when each round removed the previous round's (the same loop, minutes apart), so a
    point measured after an earlier point's removal measures the removal's aftermath."""
    path = tempfile.mkdtemp(dir=scratch)
    got = {**phase(WRITE, path, n), **phase(OPEN, path, n)}
    floor = tempfile.mkdtemp(dir=scratch)
    got.update(phase(FLOOR, floor, n, False, ROOT, json.dumps(got.pop("layout"))))
    home = os.environ.get("KAFKA_HOME")
    if home:
        got["Kafka broker loading the same logs"] = _broker_load(home, n, path, scratch) if broker else None
    phase(KILLED, path, n, killed=True)
    got.update(phase(AFTER_KILL, path, n))
    if got["partitions read"] != n or got["loaded on open"]:
        raise RuntimeError(f"{n} partitions: read {got['partitions read']}, {got['loaded on open']} loaded on open")
    return got


def both(quick: bool, scratch: str) -> dict:
    """The curve on `scratch`'s file system, then on tmpfs (TMPFS) beside it unless `scratch` is there already or the
    machine has none: {"curves": [...]}, the first with the real broker's load."""
    curves = [curve(quick, scratch)]
    if os.path.isdir(TMPFS) and not _filesystem(scratch).startswith("tmpfs"):
        with tempfile.TemporaryDirectory(prefix="kafkalog-bench-", dir=TMPFS) as shm:
            curves.append(curve(quick, shm, broker=False))
    return {"curves": curves}


TMPFS = "/dev/shm"


def curve(quick: bool, scratch: str, broker: bool = True) -> dict:
    """Each phase's figure at each partition count (seconds, or MiB for RSS): the median of REPEATS runs of the
    whole sequence up to 10,000 partitions (this VM's disk varies several-fold from one minute to the next), one run
    at 100,000; the broker's load, in the first run only."""
    points = [100, 1_000] if quick else [1_000, 10_000, 100_000]
    rows: dict[str, list[float]] = {}
    for n in points:
        runs = [_point(n, scratch, broker=broker and not i) for i in range(1 if quick or n > 10_000 else REPEATS)]
        for phase in runs[0]:
            values = [run[phase] for run in runs if run[phase] is not None]
            rows.setdefault(phase, []).append(statistics.median(values) if values else None)
    return {"partitions": points, "rows": rows, "repeats": [1 if quick or n > 10_000 else REPEATS for n in points],
            "filesystem": _filesystem(scratch)}


def _filesystem(path: str) -> str:
    """The type of the file system holding `path` and its mount point (from /proc/mounts), e.g. "tmpfs at /dev/shm"."""
    best = ("", "unknown")
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            _, mount, kind = line.split()[:3]
            if os.path.abspath(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best[0]):
                best = (mount, kind)
    return f"{best[1]} at {best[0] or '?'}"


PHASES = ["create", "create: the file system's floor", "produce 2N keyed", "produce one to each", "close",
          "close: the file system's floor", "clean open",
          "Kafka broker loading the same logs", "idle RSS MiB", "consume one from each", "open after kill -9",
          "first read after kill -9"]


def _columns(c: dict) -> list[tuple[str, int, dict, int]]:
    """(heading, partitions, curve, index) of each column: a count's point on each file system, side by side."""
    curves = c.get("curves", [c])
    kinds = [k.get("filesystem", "?").split(" at ")[0] for k in curves]
    return [(f"{n:,} partitions" + (f", {kind}" if len(curves) > 1 else ""), n, k, i)
            for i, n in enumerate(curves[0]["partitions"]) for k, kind in zip(curves, kinds)]


def markdown(c: dict) -> str:
    """The curve(s) as a table: each phase at each partition count (on each file system, side by side), with its
    target where one was set."""
    curves = c.get("curves", [c])
    where = "The directories were on " + " and ".join(k["filesystem"] for k in curves if "filesystem" in k) + ".\n\n"
    columns = _columns(c)
    head = "| phase | " + " | ".join(heading for heading, *_ in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    for phase in [p for p in PHASES if p in curves[0]["rows"]]:
        cells = []
        for n, value in ((n, k["rows"][phase][i]) for _, n, k, i in columns):
            if value is None:
                cells.append(f"not run (above {BROKER_MAX:,} partitions)" if n > BROKER_MAX else "not run")
                continue
            unit = " MiB" if "MiB" in phase else " s"
            target = TARGETS.get((phase, n))
            mark = "" if target is None else (f" (target ≤ {target:g}: met)" if value <= target
                                              else f" (target ≤ {target:g}: **not met**)")
            cells.append(f"{value:.0f}{unit}{mark}" if "MiB" in phase else f"{value:.3f}{unit}{mark}")
        lines.append(f"| {phase.replace(' MiB', '')} | " + " | ".join(cells) + " |")
    return where + "\n".join(lines) + "\n"


def plot(c: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = c.get("curves", [c])
    for k, style in zip(curves, ["-", ":"]):
        kind = k.get("filesystem", "?").split(" at ")[0]
        for j, phase in enumerate(p for p in PHASES if p in k["rows"] and "MiB" not in p):
            points = [(n, v) for n, v in zip(k["partitions"], k["rows"][phase]) if v is not None]
            if points:
                ax.plot([n for n, _ in points], [v for _, v in points], marker="o", color=f"C{j}",
                        label=f"{phase} ({kind})" if len(curves) > 1 else phase,
                        linestyle="--" if phase.startswith("Kafka") else style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("partitions in one topic")
    ax.set_ylabel("seconds")
    ax.set_title("What N partitions cost (each phase in a fresh process)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(c: dict, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "many_partitions.md")
    with open(md, "w") as f:
        f.write(markdown(c))
    with open(os.path.join(out_dir, "many_partitions.json"), "w") as f:
        json.dump(c, f, indent=1)
    plot(c, os.path.join(out_dir, "many_partitions.png"))
    return md


def write_readme(md: str, readme: str = README) -> None:
    """Put one run's table between the README's markers."""
    readme_tables.replace_between(readme, START, END, md)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.many_partitions")
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 partitions")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--scratch", default=None, help="where the directories are written (default: the temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-", dir=args.scratch) as scratch:
        md = write(both(args.quick, scratch), args.out)
    with open(md) as f:
        table = f.read()
    if not args.quick:
        write_readme(table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
