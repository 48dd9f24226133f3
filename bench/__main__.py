"""`python -m bench [--quick]`: run every benchmark with its peers; write bench/results/latest.{md,json}
and the scaling plots."""
from __future__ import annotations

import argparse
import os
import sys

import tempfile

from bench import codec, log, runner

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _plot(curve: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, ys in curve["series"].items():
        ax.plot(curve["value_size"], ys, marker="o", label=name,
                linestyle="-" if name.startswith("kafkalog") else "--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("value size (bytes)")
    ax.set_ylabel("MB/s of keys+values")
    ax.set_title("Codec throughput vs record size (uncompressed, 1 MiB batches)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small data, few repetitions (CI smoke test)")
    parser.add_argument("--out", default=RESULTS, help="where latest.md, latest.json and plots go")
    parser.add_argument("--scratch", default=None, help="where benchmark logs are written (default: the temp dir)")
    args = parser.parse_args(argv)
    reps, min_time = (2, 0.05) if args.quick else (5, 0.4)
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-", dir=args.scratch) as scratch:
        doc = runner.run(codec.workloads(args.quick) + log.workloads(args.quick, scratch),
                         reps=reps, min_time=min_time)
        doc["figures"] = log.figures(args.quick, scratch)
    curve = codec.record_size_curve(args.quick)
    doc["curves"] = {"record_size": curve}
    md, js = runner.write(doc, args.out)
    _plot(curve, os.path.join(args.out, "record_size.png"))
    with open(md) as f:
        sys.stdout.write(f.read())
    print(f"\nwrote {md}, {js} and {os.path.join(args.out, 'record_size.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
