"""`kafkalog topics`, `get-offsets` and `delete-records`: kafka-topics.sh, kafka-get-offsets.sh and
kafka-delete-records.sh over a log directory, with Kafka's option names and output shapes; `kafkalog health`: the
directory's storage checked by running its flush and checkpoint tasks once (exit status 1 when one fails).

Each opens the directory with `engine.open` (so it holds the directory's lock while it runs) and prints
human text, or one JSON document with `--json`.
"""
from __future__ import annotations

import argparse
import json

import engine
from engine.common.errors import InvalidConfigurationError, not_supported_yet
from engine.replica_manager import STRAY
from engine.tools.output import Output


def parse_configs(pairs: list[str] | None, option: str = "--config") -> dict:
    """`k=v` strings as a dict (values stay strings: LogConfig parses Kafka's config syntax)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidConfigurationError(f"{option} takes key=value, got {pair!r}")
        out[key] = value
    return out


# --- topics ---------------------------------------------------------------------------------------
def add_topics(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter or delete topics (kafka-topics.sh)")
    action = p.add_mutually_exclusive_group(required=True)
    for name in ("create", "list", "describe", "alter", "delete"):
        action.add_argument(f"--{name}", action="store_true", help=f"{name} topics")
    p.add_argument("--topic", help="the topic (for --describe, all topics when omitted)")
    p.add_argument("--partitions", type=int, help="partition count (--create)")
    p.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (--create; 1)")
    p.add_argument("--brokers", type=int, help="in-process brokers of a new directory (stored; default 1)")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config override (repeatable)")
    p.add_argument("--delete-config", action="append", metavar="KEY", help="remove an override (--alter)")
    p.add_argument("--all-configs", action="store_true",
                   help="show every topic config with its value, defaults included (--describe; default: overrides)")
    p.set_defaults(func=topics)


def _describe(eng, name: str, all_configs: bool = False) -> dict:
    d = eng.describe_topic(name)
    return {"topic": d.name, "topicId": d.topic_id, "partitionCount": len(d.partitions),
            "replicationFactor": len(d.partitions[0].replicas), "configs": d.config if all_configs else d.overrides,
            "partitions": [{"partition": p.partition, "leader": p.leader, "leaderEpoch": p.leader_epoch,
                            "replicas": p.replicas, "isr": p.isr,
                            "logStartOffset": p.log_start_offset, "logEndOffset": p.log_end_offset,
                            "highWatermark": p.high_watermark, "sizeInBytes": p.size_bytes, "segments": p.segments,
                            **({} if p.dirty_ratio is None else {"dirtyRatio": round(p.dirty_ratio, 4)}),
                            **({"setAside": list(p.set_aside)} if p.set_aside else {})}
                           for p in d.partitions]}


def _describe_text(doc: dict) -> str:
    configs = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(doc["configs"].items()))
    lines = [f"Topic: {doc['topic']}\tTopicId: {doc['topicId']}\tPartitionCount: {doc['partitionCount']}\t"
             f"ReplicationFactor: {doc['replicationFactor']}\tConfigs: {configs}"]
    for p in doc["partitions"]:
        leader = p["leader"] if p["leader"] >= 0 else "none"
        lines.append(f"\tTopic: {doc['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                     f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}\t"
                     f"LogStartOffset: {p['logStartOffset']}\tLogEndOffset: {p['logEndOffset']}\t"
                     f"HighWatermark: {p['highWatermark']}"
                     + (f"\tDirtyRatio: {p['dirtyRatio']:.2f}" if "dirtyRatio" in p else "")
                     + (f"\tSetAside: {','.join(p['setAside'])}" if "setAside" in p else ""))
    return "\n".join(lines)


def _need_topic(args) -> str:
    if not args.topic:
        raise InvalidConfigurationError("--topic is required for this action")
    return args.topic


def topics(args: argparse.Namespace, out: Output) -> int:
    with engine.open(args.data, brokers=args.brokers) as eng:
        if args.list:
            names = eng.list_topics()
            out.result(names, "\n".join(names))
        elif args.create:
            name = _need_topic(args)
            if args.partitions is None:
                raise InvalidConfigurationError("--partitions is required with --create")
            eng.create_topic(name, partitions=args.partitions, replication_factor=args.replication_factor,
                             config=parse_configs(args.config))
            out.result(_describe(eng, name), f"Created topic {name}.")
        elif args.describe:
            docs = [_describe(eng, t, args.all_configs) for t in ([args.topic] if args.topic else eng.list_topics())]
            out.result(docs, "\n".join(_describe_text(d) for d in docs))
        elif args.alter:
            name = _need_topic(args)
            changes = {**parse_configs(args.config), **{k: None for k in args.delete_config or []}}
            if not changes and args.partitions is None:
                raise InvalidConfigurationError(
                    "--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
            if args.partitions is not None:
                eng.create_partitions(name, args.partitions)
            if changes:
                eng.alter_topic_config(name, changes)
            out.result(_describe(eng, name), f"Altered topic {name}.")
        else:
            name = _need_topic(args)
            eng.delete_topic(name)
            out.result({"deleted": name}, f"Deleted topic {name}.")
    return 0


# --- get-offsets ----------------------------------------------------------------------------------
def add_get_offsets(sub) -> None:
    p = sub.add_parser("get-offsets", help="offsets by time for topic partitions (kafka-get-offsets.sh)")
    p.add_argument("--topic", help="the topic (every topic when omitted)")
    p.add_argument("--partitions", help="comma-separated partition ids (all when omitted)")
    p.add_argument("--time", default="-1", help="-1 latest (the high watermark), -2 earliest, or a timestamp in ms")
    p.set_defaults(func=get_offsets)


def get_offsets(args: argparse.Namespace, out: Output) -> int:
    try:
        when = int(args.time)
    except ValueError:
        raise InvalidConfigurationError(f"--time takes -1, -2 or a timestamp in ms, got {args.time!r}") from None
    if when < -2:
        raise not_supported_yet(f"--time {when} (only -1, -2 and timestamps)")
    try:
        wanted = None if args.partitions is None else {int(p) for p in args.partitions.split(",")}
    except ValueError:
        raise InvalidConfigurationError(f"--partitions takes comma-separated ids, got {args.partitions!r}") from None
    rows = []
    with engine.open(args.data) as eng:
        for topic in [args.topic] if args.topic else eng.list_topics():
            for p in range(eng.partitions_for(topic)):
                if wanted is None or p in wanted:
                    found = eng.partition(topic, p).offset_for_timestamp(when)
                    rows.append({"topic": topic, "partition": p, "offset": None if found is None else found[1]})
    out.result(rows, "\n".join(f"{r['topic']}:{r['partition']}:{'' if r['offset'] is None else r['offset']}"
                               for r in rows))
    return 0


# --- delete-records -------------------------------------------------------------------------------
def add_delete_records(sub) -> None:
    p = sub.add_parser("delete-records", help="raise log start offsets (kafka-delete-records.sh)")
    p.add_argument("--offset-json-file", required=True,
                   help='JSON: {"partitions": [{"topic": "t", "partition": 0, "offset": 42}], "version": 1}')
    p.set_defaults(func=delete_records)


def _offsets(path: str) -> list[tuple[str, int, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return [(str(e["topic"]), int(e["partition"]), int(e["offset"])) for e in doc["partitions"]]
    except OSError as exc:
        raise InvalidConfigurationError(f"--offset-json-file {path!r}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidConfigurationError(
            f"--offset-json-file {path!r} is not {{\"partitions\": [{{\"topic\", \"partition\", \"offset\"}}]}}: "
            f"{exc!r}") from None


def delete_records(args: argparse.Namespace, out: Output) -> int:
    wanted = _offsets(args.offset_json_file)
    rows = []
    with engine.open(args.data) as eng:
        for topic, p, offset in wanted:
            low = eng.partition(topic, p).delete_records(offset)
            rows.append({"topic": topic, "partition": p, "lowWatermark": low})
    out.result(rows, "Records delete operation completed:\n" + "\n".join(
        f"partition: {r['topic']}-{r['partition']}\tlow_watermark: {r['lowWatermark']}" for r in rows))
    return 0


# --- transactions -------------------------------------------------------------------------------------
def add_transactions(sub) -> None:
    p = sub.add_parser("transactions", help="list and describe transactions, open ones per partition "
                                            "(kafka-transactions.sh)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every transactional id and its state")
    action.add_argument("--describe", action="store_true",
                        help="coordinator state and the transactions open in each partition (hanging ones too)")
    p.add_argument("--transactional-id", help="only this transactional id (--describe)")
    p.set_defaults(func=transactions)


def _txn_row(d, now: int) -> dict:
    return {"transactionalId": d.transactional_id, "coordinator": 0, "producerId": d.producer_id,
            "producerEpoch": d.producer_epoch, "transactionState": d.state, "transactionTimeoutMs": d.timeout_ms,
            "currentTransactionStartTimeMs": d.start_ms,
            "transactionDurationMs": now - d.start_ms if d.start_ms >= 0 else None,
            "topicPartitions": [f"{t}-{p}" for t, p in d.partitions]}


def transactions(args: argparse.Namespace, out: Output) -> int:
    with engine.open(args.data) as eng:
        txn, now = eng.transactions, eng.clock.time_ms()
        if args.list:
            rows = [_txn_row(d, now) for d in txn.coordinator.list()]
            out.result(rows, _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                                    [[r["transactionalId"], r["coordinator"], r["producerId"], r["transactionState"]]
                                     for r in rows]))
            return 0
        ids = [txn.coordinator.describe(args.transactional_id)] if args.transactional_id else txn.coordinator.list()
        rows = [_txn_row(d, now) for d in ids]
        starts = {d.producer_id: d.start_ms for d in ids}
        opened = [{"topic": o.topic, "partition": o.partition, "producerId": o.producer_id,
                   "producerEpoch": o.producer_epoch, "startOffset": o.first_offset,
                   "lastTimestamp": o.last_timestamp, "transactionalId": o.transactional_id,
                   "durationMs": now - starts.get(o.producer_id, o.last_timestamp)}
                  for o in txn.open_transactions()
                  if not args.transactional_id or o.transactional_id == args.transactional_id]
        text = _table(["TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
                       "TransactionDurationMs", "TopicPartitions"],
                      [[r["transactionalId"], r["producerId"], r["producerEpoch"], r["transactionState"],
                        r["transactionTimeoutMs"], "" if r["transactionDurationMs"] is None
                        else r["transactionDurationMs"], ",".join(r["topicPartitions"])] for r in rows])
        text += "\n\nOpen transactions by partition:\n" + _table(
            ["Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "DurationMs", "TransactionalId"],
            [[o["topic"], o["partition"], o["producerId"], o["producerEpoch"], o["startOffset"], o["durationMs"],
              o["transactionalId"] or "(unknown)"] for o in opened])
        out.result({"transactions": rows, "openTransactions": opened}, text)
    return 0


def _table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# --- health ---------------------------------------------------------------------------------------------
def add_health(sub) -> None:
    p = sub.add_parser("health", help="run the flush and checkpoint tasks once and report what fails (a full disk)")
    p.set_defaults(func=health)


def health(args: argparse.Namespace, out: Output) -> int:
    with engine.open(args.data) as eng:  # a close that cannot write its checkpoints fails after the report
        failing = eng.check_storage()
        rows = [f._asdict() for f in failing]
        out.result({"healthy": not rows, "failing": rows}, "healthy" if not rows else "\n".join(
            f"SET ASIDE in {f.where}: {f.error}" if f.task == STRAY else
            f"FAILING {f.task} in {f.where}: {f.error} ({f.attempts} attempt(s))" for f in failing))
    return 1 if rows else 0
