"""`python -m bench [--quick] [--long]`: every benchmark with its peers, interleaved in one run; writes
bench/results/latest.md, latest.json, the scaling plots (record_size.png, partitions.png, log_size.png) and the
many-partitions curve (many_partitions.md/.json/.png, and the README's table of it)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from bench import (
    aio,
    clients,
    codec,
    compaction,
    kafka,
    curves,
    listener,
    many_partitions,
    groups,
    log,
    replication,
    runner,
    share_groups,
    spark,
    spark_stream,
    testing_servers,
    transactions,
)

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _plot(curve: dict, x: str, path: str, title: str, xlabel: str, ylabel: str, logy: bool = True) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, ys in curve["series"].items():
        ax.plot(curve[x], ys, marker="o", label=name, linestyle="-" if name.startswith("kafkalog") else "--")
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small data, few repetitions (the CI smoke test)")
    parser.add_argument("--long", action="store_true", help="add the 10 GB point to the log-size curve")
    parser.add_argument("--out", default=RESULTS, help="where latest.md, latest.json and the plots go")
    parser.add_argument("--scratch", default=None, help="where benchmark logs are written (default: the temp dir)")
    args = parser.parse_args(argv)
    reps, min_time = (2, 0.05) if args.quick else (5, 0.4)
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-", dir=args.scratch) as scratch:
        q = args.quick
        doc = runner.run(codec.suites(q) + [
            lambda: log.workloads(q, scratch), lambda: clients.workloads(q, scratch),
            lambda: replication.workloads(q, scratch), lambda: transactions.workloads(q, scratch),
            lambda: groups.workloads(q, scratch)], reps=reps, min_time=min_time)
        # Spark reads its log from the page cache: its repetitions run on their own, so that the gigabytes the
        # other workloads write between repetitions neither evict that log nor load the disk while it is read
        os.sync()
        doc["rows"] += runner.run([lambda: spark.workloads(q, scratch)], reps=reps, min_time=min_time)["rows"]
        with kafka.session(scratch) as broker:  # a real broker when KAFKA_HOME is given
            doc["rows"] += runner.run([lambda: kafka.workloads(q, broker, scratch),
                                       lambda: aio.workloads(q, broker, scratch)], reps=reps,
                                      min_time=min_time)["rows"]
        with listener.session(scratch) as (served, broker):  # `kafkalog serve` beside a broker (KAFKA_HOME)
            doc["rows"] += runner.run([lambda: listener.workloads(q, served, broker)], reps=reps,
                                      min_time=min_time)["rows"]
            listener_figures = listener.memory_figures(served, broker)
        listener_figures += listener.startup_figures(q, scratch)
        doc["figures"] = (log.figures(args.quick, scratch) + replication.figures(args.quick, scratch)
                          + groups.figures(args.quick, scratch) + compaction.figures(args.quick, scratch)
                          + spark_stream.figures(args.quick, scratch) + aio.figures(args.quick, scratch)
                          + listener_figures + testing_servers.figures(args.quick)
                          + share_groups.figures(args.quick, scratch))
        doc["curves"] = {
            "record_size": codec.record_size_curve(args.quick),
            "partitions": curves.partitions_curve(args.quick, scratch),
            "log_size": curves.log_size_curve(args.quick, args.long, scratch),
            "memory": curves.memory_curve(args.quick, scratch),
            "spark_memory": spark.memory_curve(args.quick, scratch),
            "many_partitions": many_partitions.both(args.quick, scratch),
        }
    md, js = runner.write(doc, args.out)
    c = doc["curves"]
    _plot(c["record_size"], "value_size", os.path.join(args.out, "record_size.png"),
          "Codec throughput vs record size (uncompressed, 1 MiB batches; decode reads every field)",
          "value size (bytes)", "MB/s of keys+values")
    _plot(c["partitions"], "partitions", os.path.join(args.out, "partitions.png"),
          "Append throughput vs partitions (16 KiB batches, round-robin)", "partitions", "MB/s", logy=False)
    _plot(c["log_size"], "log_bytes", os.path.join(args.out, "log_size.png"),
          "Append and consume throughput vs log size (1 MiB batches)", "log size (bytes)", "MB/s", logy=False)
    many_md = many_partitions.write(c["many_partitions"], args.out)
    if not args.quick and args.out == RESULTS:
        with open(many_md) as f:
            many_partitions.write_readme(f.read())
    with open(md, "a") as f:
        for mem in (c["memory"], c["spark_memory"]):
            f.write("\n| peak RSS (MiB) | " + " | ".join(f"{n:,} records" for n in mem["records"]) + " |\n")
            f.write("|---|" + "---|" * len(mem["records"]) + "\n")
            for name, values in mem["series"].items():
                f.write(f"| {name} | " + " | ".join(f"{v:.0f}" for v in values) + " |\n")
    with open(js, "w") as f:
        json.dump(doc, f, indent=1)
    with open(md) as f:
        sys.stdout.write(f.read())
    print(f"\nwrote {md}, {js} and the plots in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
