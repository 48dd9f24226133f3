"""`kafkalog mirror`: copy topics between the log directory and a Kafka cluster, exactly once (engine.mirror).

    kafkalog mirror --data DIR --to-kafka HOST:PORT --name NAME [--topic T ...] [--group G ...] [--follow]
    kafkalog mirror --data DIR --from-kafka HOST:PORT --name NAME [...]

On a terminal, a status line on stderr (records, bytes, lag per partition); at the end the summary, as text or with
`--json` as one document. `--config KEY=VALUE` passes client settings (security, ...) to librdkafka.
"""
from __future__ import annotations

import argparse
import sys

from engine.tools import admin
from engine.tools.output import Output


def add_mirror(sub) -> None:
    p = sub.add_parser("mirror", help="copy topics to or from a Kafka cluster, exactly once")
    way = p.add_mutually_exclusive_group(required=True)
    way.add_argument("--to-kafka", metavar="BOOTSTRAP", help="the destination cluster's bootstrap.servers")
    way.add_argument("--from-kafka", metavar="BOOTSTRAP", help="the source cluster's bootstrap.servers")
    p.add_argument("--name", required=True,
                   help="the mirror's name: its transactional id and progress records (reuse it to resume)")
    p.add_argument("--topic", action="append", help="a topic to copy (repeatable; default: every topic)")
    p.add_argument("--group", action="append", default=[], help="a consumer group whose offsets are translated")
    p.add_argument("--follow", action="store_true", help="keep copying new records until stopped (Ctrl-C, SIGTERM)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a client setting")
    p.add_argument("--progress-topic", default=None, help="where progress is kept (default kafkalog-mirror-progress)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="for topics created on the cluster (default: the broker's)")
    p.add_argument("--max-records", type=int, default=50_000, help="records per transaction at most")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cluster per request")
    p.add_argument("--progress", action="store_true",
                   help="a status line on stderr after each transaction, one per line (on a terminal: always, in place)")
    p.set_defaults(func=mirror)


def _status_line(summary) -> str:
    lags = " ".join(f"{name}:{stats.lag}" for name, stats in sorted(summary.partitions.items()))
    return f"{summary.records:,} records, {summary.bytes:,} bytes; lag {lags}"[:200]


def mirror(args: argparse.Namespace, out: Output) -> int:
    from engine import mirror as mirroring

    config = {"bootstrap.servers": args.to_kafka or args.from_kafka, **admin.parse_configs(args.config)}
    tty = sys.stderr.isatty()
    on_progress = None
    if tty:
        on_progress = lambda s: sys.stderr.write("\r" + _status_line(s))  # noqa: E731
    elif args.progress:
        on_progress = lambda s: print(_status_line(s), file=sys.stderr, flush=True)  # noqa: E731
    options = dict(name=args.name, topics=args.topic, groups=args.group, follow=args.follow,
                   max_records=args.max_records, timeout_s=args.timeout, on_progress=on_progress)
    if args.progress_topic:
        options["progress_topic"] = args.progress_topic
    if args.to_kafka:
        summary = mirroring.to_kafka(args.data, config, replication_factor=args.replication_factor, **options)
    else:
        summary = mirroring.from_kafka(config, args.data, **options)
    if tty:
        sys.stderr.write("\n")
    doc = summary.to_dict()
    lines = [f"mirror {args.name}: {summary.records:,} records ({summary.bytes:,} bytes) in "
             f"{summary.transactions} transactions, {summary.seconds:.1f} s"]
    lines += [f"  {name}: {s['records']} records, next source offset {s['next']}, lag {s['lag']}"
              for name, s in sorted(doc["partitions"].items())]
    lines += [f"  group {g}: {r.get('status', r.get('error', ''))}" for g, r in sorted(doc["groups"].items())]
    lines += [f"  note {t}: {n}" for t, n in sorted(doc["notes"].items())]
    out.result(doc, "\n".join(lines))
    return 0
