"""The benchmark runner: kafkalog and its peers measured side by side in one run.

Every workload names kafkalog's contender first and its peers after it. Workloads come in suites: a suite's
inputs are built just before it is timed and freed after it, so the heap every contender runs with holds its own
suite's inputs and nothing else (the cyclic GC's cost grows with every live object; a peer whose objects the GC
tracks would otherwise pay for inputs it never sees). After a warm-up, each repetition runs every contender of
every workload of the suite once, in rotating order (interleaved, so machine noise hits all of them alike), each
run after a full collection; a run repeats the contender's call until `min_time` has passed. Reported: the median
time per call, the min-max spread, records/s and MB/s, and for each peer the ratio peer_time / kafkalog_time
(> 1 means kafkalog is faster) with its spread across repetitions. Nothing is asserted: the numbers are
reported, never tested. A suite that leaves an engine's or a client's threads running fails the run: they would run
beside every later suite.

glibc's allocator moves its thresholds for mapping and trimming memory as blocks are freed (each freed mapped block
larger than the threshold raises it), so without help a workload holding megabyte blocks would pay page faults or not
depending on what rows ran before it in the process. The runner pins both thresholds at the values a long-running
process reaches (32 MiB and 64 MiB), for every contender and every row alike.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from tqdm import tqdm

import engine


@dataclass
class Contender:
    name: str
    call: Callable[[], object]


@dataclass
class Workload:
    """One measured operation: `records` and `nbytes` are what a single call processes."""

    group: str
    name: str
    records: int
    nbytes: int
    contenders: list[Contender]
    targets: dict[str, float] = field(default_factory=dict)   # peer name -> wanted ratio
    not_yet: str | None = None                                 # why it cannot run yet
    close: Callable[[], None] | None = None                    # what its suite left open, closed after the suite


def _time_call(call: Callable[[], object], min_time: float) -> float:
    n, start = 0, time.perf_counter()
    while True:
        call()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n


Suite = Callable[[], list[Workload]]


def _pin_heap_thresholds() -> None:
    """Fix glibc's mmap and trim thresholds at the ceiling its own adjustment reaches (see the module docstring); a
    no-op on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt's parameter numbers (malloc.h)
    if not (libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 64 << 20)):
        raise RuntimeError("mallopt refused the benchmark's heap thresholds")


def run(suites: list[Suite | list[Workload]], *, reps: int, min_time: float) -> dict:
    """Measure every runnable workload, suite by suite; return the results document (also the JSON written out)."""
    _pin_heap_thresholds()
    rows: list[dict] = []
    for suite in suites:
        before = set(threading.enumerate())
        workloads = suite() if callable(suite) else suite
        try:
            rows += _run_suite(workloads, reps, min_time)
        finally:  # an engine left open would keep its threads (a group member's heartbeats) running into later suites
            for w in workloads:
                if w.close is not None:
                    w.close()
        del workloads
        gc.collect()
        _check_nothing_left_running(before)
    return {"machine": machine(), "reps": reps, "min_time_s": min_time, "rows": rows}


def _check_nothing_left_running(before: set) -> None:
    """RuntimeError if a suite left threads of an engine or client it opened running (`before`: the threads alive
    when it began; its workloads' `close` missed something): they would share the machine with every later suite."""
    left = sorted(t.name for t in set(threading.enumerate()) - before if t.name.startswith("kafkalog-"))
    if left:
        raise RuntimeError(f"a benchmark suite left threads running: {', '.join(left)}")


def _run_suite(workloads: list[Workload], reps: int, min_time: float) -> list[dict]:
    active = [w for w in workloads if w.not_yet is None]
    samples = {(w.group, w.name, c.name): [] for w in active for c in w.contenders}
    progress = tqdm(total=sum(len(w.contenders) for w in active) * (reps + 1), unit="run", file=sys.stderr,
                    disable=not sys.stderr.isatty(), dynamic_ncols=True)
    for rep in range(-1, reps):  # rep -1 is the warm-up
        for w in active:
            order = w.contenders[rep % len(w.contenders):] + w.contenders[:rep % len(w.contenders)]
            for c in order:
                gc.collect()
                t = _time_call(c.call, min_time / 4 if rep < 0 else min_time)
                if rep >= 0:
                    samples[(w.group, w.name, c.name)].append(t)
                progress.set_description_str(f"{w.group}: {w.name} [{c.name}]"[:60], refresh=False)
                progress.update(1)
    progress.close()
    rows = []
    for w in workloads:
        row = {"group": w.group, "workload": w.name, "records": w.records, "bytes": w.nbytes,
               "not_yet": w.not_yet, "peers": [c.name for c in w.contenders[1:]], "contenders": [], "ratios": []}
        if w.not_yet is None:
            ours = samples[(w.group, w.name, w.contenders[0].name)]
            for c in w.contenders:
                ts = samples[(w.group, w.name, c.name)]
                med = statistics.median(ts)
                row["contenders"].append({
                    "name": c.name, "median_s": med, "min_s": min(ts), "max_s": max(ts),
                    "records_per_s": w.records / med, "mb_per_s": w.nbytes / med / 1e6,
                })
                if c is not w.contenders[0]:
                    per_rep = [theirs / mine for theirs, mine in zip(ts, ours)]
                    row["ratios"].append({
                        "peer": c.name, "ratio": med / statistics.median(ours),
                        "min": min(per_rep), "max": max(per_rep), "target": w.targets.get(c.name),
                    })
        rows.append(row)
    return rows


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kafkalog_impl": engine.IMPL, "platform": platform.platform()}


def _rate(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} "


def markdown(doc: dict) -> str:
    """The results table: one line per (workload, peer)."""
    m = doc["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, kafkalog core `{m['kafkalog_impl']}`; "
        f"{doc['reps']} interleaved repetitions after a warm-up, medians with min-max spread.",
        "",
        "| group | workload | kafkalog | peer | peer figure | ratio (spread) | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        if row["not_yet"]:
            lines.append(f"| {row['group']} | {row['workload']} | not yet | {', '.join(row['peers'])} | | | "
                         f"{row['not_yet']} |")
            continue
        ours = row["contenders"][0]
        figure = f"{_rate(ours['records_per_s'])}rec/s, {ours['mb_per_s']:.0f} MB/s"
        spread = f"(±{(ours['max_s'] - ours['min_s']) / ours['median_s'] * 50:.0f}%)"
        if not row["ratios"]:
            lines.append(f"| {row['group']} | {row['workload']} | {figure} {spread} | — | | | |")
        for r, peer in zip(row["ratios"], row["contenders"][1:]):
            target = "" if r["target"] is None else (
                f"≥ {r['target']:g}× {'met' if r['ratio'] >= r['target'] else 'NOT met'}")
            lines.append(
                f"| {row['group']} | {row['workload']} | {figure} {spread} | {peer['name']} | "
                f"{_rate(peer['records_per_s'])}rec/s, {peer['mb_per_s']:.0f} MB/s | "
                f"**{r['ratio']:.2f}×** ({r['min']:.2f}–{r['max']:.2f}) | {target} |")
    if doc.get("figures"):
        lines += ["", "| figure (median of 3) | kafkalog | peer | peer figure | ratio, > 1: kafkalog better "
                  "(spread) | target |", "|---|---|---|---|---|---|"]
        for f in doc["figures"]:
            target = "" if "target" not in f else (
                f"≥ {f['target']:g} {f['unit']} {'met' if f['value'] >= f['target'] else 'NOT met'}")
            if "ratio_target" in f:
                target = f"≥ {f['ratio_target']:g}× {'met' if f['ratio'] >= f['ratio_target'] else 'NOT met'}"
            if "ceilings" in f:  # [what, value, limit]: values (in the figure's unit) wanted at most `limit`
                target = "; ".join(f"{what} ≤ {limit:g} {f['unit']} {'met' if value <= limit else 'NOT met'}"
                                   for what, value, limit in f["ceilings"])
            lines.append(f"| {f['name']} | {f['value']:.3g} {f['unit']} | {f['peer']} | "
                         f"{f['peer_value']:.3g} {f['unit']} | **{f['ratio']:.2f}×** "
                         f"({f['spread'][0]:.2f}–{f['spread'][1]:.2f}) | {target} |")
    return "\n".join(lines) + "\n"


def write(doc: dict, out_dir) -> tuple[str, str]:
    """Write latest.md and latest.json into out_dir; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    md, js = os.path.join(out_dir, "latest.md"), os.path.join(out_dir, "latest.json")
    with open(md, "w") as f:
        f.write(markdown(doc))
    with open(js, "w") as f:
        json.dump(doc, f, indent=1)
    return md, js


def figure(name: str, ours: list[float], unit: str, peer: str, theirs: list[float], lower_is_better: bool,
            target: float | None = None, ratio_target: float | None = None) -> dict:
    """Repeated paired measurements beside a peer: medians, the ratio (> 1: kafkalog better) and its
    min-max spread over the repetitions."""
    ratios = [(t / o) if lower_is_better else (o / t) for o, t in zip(ours, theirs)]
    value, peer_value = statistics.median(ours), statistics.median(theirs)
    fig = {"name": name, "value": value, "unit": unit, "peer": peer, "peer_value": peer_value,
           "ratio": (peer_value / value) if lower_is_better else (value / peer_value),
           "spread": [min(ratios), max(ratios)], "samples": [ours, theirs]}
    if target is not None:  # a value in the figure's unit
        fig["target"] = target
    if ratio_target is not None:  # a ratio to the peer
        fig["ratio_target"] = ratio_target
    return fig


def rotated(rep: int, calls: list) -> list:
    """Each call's result, the calls run in an order rotated by `rep` (repetitions interleave the contenders, so no
    one always runs first, on a cold cache or a warm one); results in the calls' order."""
    order = list(range(len(calls)))
    order = order[rep % len(calls):] + order[:rep % len(calls)]
    out: list = [None] * len(calls)
    for i in order:
        out[i] = calls[i]()
    return out


def percentile(samples: list[int], pct: float) -> float:
    """The pct-th percentile of nanosecond samples, in microseconds."""
    return sorted(samples)[int(len(samples) * pct)] / 1000
