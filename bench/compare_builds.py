"""`python -m bench.compare_builds OTHER_TREE [--suites codec,clients,aio,many] [--rounds N] [--quick]
[--instructions [--match TEXT]]`: an A/B of this checkout and another one (an older commit, built in place with
`python setup.py build_ext --inplace`), measured in one run.

Each round runs each suite once per checkout, one after the other, so both see the same machine:
- codec, clients, aio: the workloads of `python -m bench` (bench.codec, bench.clients, bench.aio without a broker) in
  a child process per checkout; a child imports engine and the layers under it from its checkout only, and the
  benchmark code from this one, so both run the same workloads. Every contender is reported: kafkalog's rows
  and its peers' (the peers run the same code on both sides: their change is the machine's).
- many: bench.many_partitions' write and open phases at MANY_N partitions, each phase in a fresh interpreter in the
  checkout measured, with the data on tmpfs where there is one (the disk's sync times vary far more than the code).
Rounds are paired and laid out at random: round r runs both checkouts with the same seed, and the side that runs first
alternates (ABBA...). The seed sets the size of the codec, clients and aio child's environment (where its stack starts)
and a pattern of blocks it allocates and frees before any workload runs (what its allocators' free lists hold); its hash
seed is CPython's own random one, per process. The same work can time differently in two processes whose code and heap
lie differently (glibc's malloc above pymalloc's and the tcache's sizes, cache-set conflicts); with one fixed layout per
side, a few rounds measure the layout, not the code. Randomized alike on both sides, each side's spread holds that
variation, and the paired ratio of round r compares the two trees under the same one.
The table gives, per row and contender, the median of each side's rounds with its min-max spread, the change, the
paired ratios' median and range, and whether this tree's median lies within the other's spread widened by the peers'
own drift between the two sides.

`--instructions [--match TEXT]` counts instead of timing: instructions per call of kafkalog's side of the codec
workloads (quick sizes), under valgrind's callgrind, one child per checkout. A timing tells "slower" but not why: the
same work can run slower in another process (where its code and heap land), and a few rounds rarely separate that
from more work. A count can: for the same binary and input it is the same whatever else the machine does. The child
calls each workload through `functools.reduce` (nothing else in it calls that), callgrind counts only inside it and
writes one dump per workload; the counts include the interpreter's work for each call.
"""
from __future__ import annotations

import argparse
import functools
import glob
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Callable

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = ("codec", "clients", "aio", "many")
MANY_N = 10_000
COUNTED_CALLS = 3  # calls of each workload that --instructions counts
_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.M)


def _this_benchmarks() -> None:
    """In a child started in the checkout measured: engine and the layers under it from there, `bench` from here."""
    sys.path.insert(0, os.getcwd())
    spec = importlib.util.spec_from_file_location("bench", os.path.join(HERE, "bench", "__init__.py"),
                                                  submodule_search_locations=[os.path.join(HERE, "bench")])
    sys.modules["bench"] = package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)


def layout(seed: int) -> tuple[dict[str, str], list[int]]:
    """Round `seed`'s process layout: the environment a child gets on top of the parent's (a padding variable whose
    length moves where the stack starts) and the sizes of the blocks it allocates in order before the workloads
    (every other one is then freed, leaving holes of those sizes in the free lists). The hash seed is not part of it:
    the child runs isolated (-I), which ignores PYTHONHASHSEED, so each process draws its own, as CPython does."""
    rng = random.Random(seed)
    env = {"KAFKALOG_AB_PAD": "x" * rng.randrange(8192)}
    return env, [rng.choice((48, 200, 600, 1100, 1800, 4000, 9000, 70_000)) for _ in range(rng.randrange(500, 20_000))]


def _lay_out_heap(sizes: list[int]) -> list[bytearray]:
    """Allocate a block of each size in order, free every other one; the survivors are returned (kept alive)."""
    blocks = [bytearray(n) for n in sizes]
    del blocks[::2]
    return blocks


def _child(suites: list[str], quick: bool, seed: int) -> None:
    _this_benchmarks()
    kept = _lay_out_heap(layout(seed)[1])  # (alive until the workloads are done)
    from bench import aio, clients, codec, runner

    reps, min_time = (2, 0.05) if quick else (5, 0.4)
    with tempfile.TemporaryDirectory(prefix="kafkalog-ab-") as scratch:
        chosen = {"codec": codec.suites(quick), "clients": [lambda: clients.workloads(quick, scratch)],
                  "aio": [lambda: aio.workloads(quick, None, scratch)]}
        rows = runner.run([s for name in suites for s in chosen[name]], reps=reps, min_time=min_time)["rows"]
    json.dump({f'{row["group"]}: {row["workload"]}': {c["name"]: c["median_s"] for c in row["contenders"]}
               for row in rows}, sys.stdout)
    del kept


def counted(fn: Callable[[], object]) -> None:
    """Call `fn` inside the one C function callgrind counts in (`functools_reduce`, there and unstripped on every
    Python from 3.10; `operator.call` would be simpler but is 3.11's)."""
    functools.reduce(lambda _, f: f(), (fn,), None)


def _counting_child(match: str) -> None:
    """Call kafkalog's side of each codec workload whose name holds `match` COUNTED_CALLS times inside one
    `counted` (what callgrind counts); print the workloads' names in that order."""
    _this_benchmarks()
    from bench import codec

    rows = []
    for suite in codec.suites(True):
        for w in suite():
            if match in f"{w.group}: {w.name}":
                call = w.contenders[0].call  # (kafkalog's: every workload names it first)
                call()  # (warm)
                counted(lambda: [call() for _ in range(COUNTED_CALLS)])
                rows.append(f"{w.group}: {w.name}")
    json.dump(rows, sys.stdout)


def counted_calls(cmd: list[str], cwd: str) -> tuple[str, list[int]]:
    """Run the Python child `cmd` in `cwd` under callgrind, counting only inside its `counted` calls: its standard
    output, and the instructions each of those calls took, in order."""
    with tempfile.TemporaryDirectory(prefix="kafkalog-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONHASHSEED": "0"}
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
                               "--toggle-collect=functools_reduce", "--dump-after=functools_reduce", *cmd],
                              cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} under callgrind, in {cwd}, ended with {done.returncode}: "
                               f"{done.stderr[-2000:]}")
        dumps = sorted((p for p in glob.glob(out + ".*") if p.rsplit(".", 1)[1].isdigit()),
                       key=lambda p: int(p.rsplit(".", 1)[1]))
        totals = []
        for path in dumps:
            with open(path, "rb") as f:
                totals.append(int(_TOTAL.search(f.read()).group(1)))
    return done.stdout, totals


def instructions(tree: str, match: str) -> dict[str, float]:
    """{workload: instructions per call of kafkalog's side} in the checkout `tree` (see the module docstring)."""
    out, totals = counted_calls([sys.executable, "-I", os.path.abspath(__file__), "--child", "count", "--match", match],
                                tree)
    rows = json.loads(out)
    if len(totals) != len(rows):
        raise RuntimeError(f"{tree}: {len(rows)} workloads but {len(totals)} callgrind dumps")
    return {row: total / COUNTED_CALLS for row, total in zip(rows, totals)}


def instruction_table(this: dict[str, float], other: dict[str, float], other_name: str) -> str:
    lines = [f"| workload (kafkalog's side) | {other_name} (instructions per call) | this tree | this / other |",
             "|---|---:|---:|---:|"]
    lines += [f"| {row} | {other[row]:,.0f} | {n:,.0f} | {n / other[row]:.4f} |" for row, n in this.items()
              if row in other]
    return "\n".join(lines) + "\n"


def _measure(tree: str, suites: list[str], quick: bool, seed: int) -> dict:
    out = {}
    child = [s for s in suites if s != "many"]
    if child:
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **layout(seed)[0]}
        cmd = [sys.executable, "-I", os.path.abspath(__file__), "--child", ",".join(child),
               "--seed", str(seed)] + (["--quick"] * quick)
        out.update(json.loads(subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.PIPE,
                                             text=True).stdout))
    if "many" in suites:
        out.update(_many(tree, 1_000 if quick else MANY_N))
    return out


def _many(tree: str, n: int) -> dict:
    """bench.many_partitions' write and open phases of `n` partitions, run in the checkout `tree`."""
    from bench import many_partitions as mp

    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="kafkalog-ab-many-", dir=shm) as scratch:
        path = os.path.join(scratch, "d")
        figures = {**mp.phase(mp.WRITE, path, n, cwd=tree), **mp.phase(mp.OPEN, path, n, cwd=tree)}
    where = "tmpfs" if shm else "disk"
    return {f"many partitions ({n:,}, {where}): {k}": {"kafkalog": v} for k, v in figures.items()
            if k in mp.PHASES and "MiB" not in k}


def table(runs: dict[str, list[dict]], other: str) -> str:
    """The A/B table of `runs` ({"other": rounds, "this": rounds}, round r of each side run with the same layout)."""
    lines = [f"| row | contender | {other} (ms) | this tree (ms) | this / other | paired ratios | within spread |",
             "|---|---|---:|---:|---:|---:|---|"]
    first = runs["this"][0]
    for row in first:
        names = list(first[row])
        drift = []  # the peers' change between the two sides: what the machine did, not the code
        for name in names[1:]:
            both = {side: [r[row][name] for r in runs[side] if r[row].get(name)] for side in runs}
            if all(both.values()):
                drift.append(statistics.median(both["this"]) / statistics.median(both["other"]))
        slack = max([abs(d - 1) for d in drift], default=0.0)
        for name in names:
            vals = {side: [r[row][name] for r in runs[side] if r[row].get(name)] for side in runs}
            if not all(vals.values()):
                continue
            med = {side: statistics.median(v) for side, v in vals.items()}
            lo, hi = min(vals["other"]) * (1 - slack), max(vals["other"]) * (1 + slack)
            spread = {side: f"{med[side] * 1e3:.2f} ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f})" for side, v in vals.items()}
            within = "yes" if lo <= med["this"] <= hi else ("faster" if med["this"] < lo else "**slower**")
            paired = [r[row][name] / o[row][name] for r, o in zip(runs["this"], runs["other"])
                      if r[row].get(name) and o[row].get(name)]
            lines.append(f"| {row} | {name} | {spread['other']} | {spread['this']} | "
                         f"{med['this'] / med['other']:.3f} | {statistics.median(paired):.3f} "
                         f"({min(paired):.2f}-{max(paired):.2f}) | {within if name == names[0] else '(peer)'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare_builds")
    parser.add_argument("other", nargs="?", help="the other checkout (built in place)")
    parser.add_argument("--suites", default="codec", help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per call of the codec workloads instead of timing (valgrind)")
    parser.add_argument("--match", default="", help="with --instructions: only the workloads whose name holds this")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "count":
        _counting_child(args.match)
        return 0
    if args.child is not None:
        _child(args.child.split(","), args.quick, args.seed)
        return 0
    if args.other is None:
        parser.error("the other checkout is required")
    if args.instructions:
        if shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind (Debian's valgrind package)")
        other = instructions(os.path.abspath(args.other), args.match)
        sys.stdout.write(instruction_table(instructions(HERE, args.match), other, args.other))
        return 0
    suites = args.suites.split(",")
    if set(suites) - set(SUITES):
        parser.error(f"unknown suites: {sorted(set(suites) - set(SUITES))}")
    trees = {"other": os.path.abspath(args.other), "this": HERE}
    runs: dict[str, list[dict]] = {"other": [], "this": []}
    for seed in range(args.rounds):
        for side in (("other", "this") if seed % 2 == 0 else ("this", "other")):
            runs[side].append(_measure(trees[side], suites, args.quick, seed))
    sys.stdout.write(table(runs, args.other))
    return 0


if __name__ == "__main__":
    sys.exit(main())
