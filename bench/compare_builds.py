"""`python -m bench.compare_builds OTHER_TREE [--rounds N] [--quick]`: the codec rows of this checkout and of another
one (an older commit, built in place with `make setup` or `python setup.py build_ext --inplace`), measured in one run.

Each round runs the codec suites (this checkout's bench.codec, the workloads of `python -m bench`) once in a child
process per checkout, the two alternating (ABAB...), so both see the same machine. A child imports engine, segments,
txn and replication from its checkout only, and the benchmark code from this one, so both run the same workloads.
The table gives, per row, kafkalog's median time in each checkout (the median of its rounds), the change, and
kafkalog's ratio to aiokafka measured in each checkout's own runs, which cancels what the machine did between them.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(quick: bool) -> None:
    sys.path.insert(0, os.getcwd())  # the checkout measured: its engine and the layers under it
    spec = importlib.util.spec_from_file_location("bench", os.path.join(HERE, "bench", "__init__.py"),
                                                  submodule_search_locations=[os.path.join(HERE, "bench")])
    sys.modules["bench"] = package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    from bench import codec, runner

    reps, min_time = (2, 0.05) if quick else (5, 0.4)
    rows = runner.run(codec.suites(quick), reps=reps, min_time=min_time)["rows"]
    out = {}
    for row in rows:
        times = {c["name"]: c["median_s"] for c in row["contenders"]}
        out[f'{row["group"]}: {row["workload"]}'] = {"kafkalog": times["kafkalog"], "aiokafka": times.get("aiokafka")}
    json.dump(out, sys.stdout)


def _measure(tree: str, quick: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-I", os.path.abspath(__file__), "--child"] + (["--quick"] if quick else [])
    done = subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare_builds")
    parser.add_argument("other", nargs="?", help="the other checkout (built in place)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.quick)
        return 0
    if args.other is None:
        parser.error("the other checkout is required")
    trees = {"other": os.path.abspath(args.other), "this": HERE}
    runs: dict[str, list[dict]] = {"other": [], "this": []}
    for _ in range(args.rounds):
        for side, tree in trees.items():
            runs[side].append(_measure(tree, args.quick))
    print(f"| codec row | {args.other} (ms) | this tree (ms) | this / other time | vs aiokafka: other | this |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in runs["this"][0]:
        med = {side: statistics.median(r[row]["kafkalog"] for r in runs[side]) for side in runs}
        ratio = {}
        for side in runs:
            peers = [r[row]["aiokafka"] / r[row]["kafkalog"] for r in runs[side] if r[row]["aiokafka"]]
            ratio[side] = f"{statistics.median(peers):.2f}x" if peers else "-"
        print(f"| {row} | {med['other'] * 1e3:.2f} | {med['this'] * 1e3:.2f} | {med['this'] / med['other']:.3f} "
              f"| {ratio['other']} | {ratio['this']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
