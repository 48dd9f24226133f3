"""`kafkalog compact TOPIC`: compact a topic's partitions now (what the log cleaner does when they are due),
with a progress bar on a terminal and, per partition, a summary like Kafka's cleaner log line.

Opens the directory with `engine.open` (holding its lock while it runs), without the background cleaner.
"""
from __future__ import annotations

import argparse
import sys

import engine
from engine.tools.output import Output


def add_compact(sub) -> None:
    p = sub.add_parser("compact", help="compact a topic whose cleanup.policy holds compact, now")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, help="only this partition")
    p.set_defaults(func=compact)


def compact(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    with engine.open(args.data, cleaner_config={"log_cleaner_enable": False}) as eng:
        bar = tqdm(total=0, unit="B", unit_scale=True, desc=f"compacting {args.topic}", file=sys.stderr,
                   disable=not sys.stderr.isatty(), leave=False)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()
        try:
            results = eng.compact(args.topic, args.partition, progress=progress)
        finally:
            bar.close()
        rows = []
        for partition, stats in sorted(results.items()):
            name = f"{args.topic}-{partition}"
            if stats is None:
                rows.append(({"partition": partition, "cleaned": False}, f"{name}: nothing to clean"))
                continue
            rows.append(({"partition": partition, "cleaned": True, "bytesBefore": stats.bytes_read,
                          "bytesAfter": stats.bytes_written, "recordsBefore": stats.records_read,
                          "recordsAfter": stats.records_written, "keys": stats.keys,
                          "segmentsBefore": stats.segments_before, "segmentsAfter": stats.segments_after,
                          "dirtySection": list(stats.dirty), "seconds": round(stats.seconds, 3)},
                         stats.describe(name)))
        out.result([doc for doc, _ in rows], "\n".join(text for _, text in rows))
    return 0
