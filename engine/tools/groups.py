"""`kafkalog groups`: kafka-consumer-groups.sh over a log directory: list groups, describe one (members,
assignment, committed offset, log end offset and lag per partition), reset an empty group's offsets, delete an empty
group; groups of both protocols (classic, and the consumer group protocol of KIP-848, whose group epoch and server
assignor stand where a classic group's generation and protocol do).

Opens the directory with `engine.open` (holding its lock while it runs); prints Kafka's column layout, or one
JSON document with `--json`. --reset-offsets prints the plan and applies it only with --execute, as Kafka's tool.
"""
from __future__ import annotations

import argparse
from datetime import datetime
from typing import Callable

import engine
from engine.common.errors import InvalidConfigurationError
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.tools.admin import _table
from engine.tools.output import Output


def add_groups(sub) -> None:
    p = sub.add_parser("groups", help="list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every group id")
    action.add_argument("--describe", action="store_true", help="members, offsets and lag of --group")
    action.add_argument("--reset-offsets", action="store_true", help="set --group's offsets (the group must be empty)")
    action.add_argument("--delete", action="store_true", help="delete --group and its offsets (it must be empty)")
    add_reset_options(p, "topic, or topic:p1,p2 (--reset-offsets; default: the group's)")
    p.set_defaults(func=groups)


def add_reset_options(p, topic_help: str) -> None:
    """--group, --topic, the --to-* targets and --execute, as Kafka's group tools take them."""
    p.add_argument("--group", help="the group (--describe, --reset-offsets, --delete)")
    p.add_argument("--topic", action="append", help=topic_help)
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss, local time unless it ends with Z or an offset")
    p.add_argument("--execute", action="store_true", help="apply the reset (without it: a dry run)")


def groups(args: argparse.Namespace, out: Output) -> int:
    with engine.open(args.data) as eng:
        return dispatch(args, out, "consumer", lambda: [{"group": g, "state": state, "protocolType": ptype}
                                                        for g, state, ptype in eng.groups.list_groups()],
                        lambda: _describe(eng, args.group, out), eng.groups.delete_group, lambda: _reset(eng, args, out))


def dispatch(args: argparse.Namespace, out: Output, kind: str, rows: Callable[[], list[dict]],
             describe: Callable[[], int], delete: Callable[[str], None], reset: Callable[[], int]) -> int:
    """What a group command's action asks for: --list (`rows`), or with --group: --describe, --delete, or else the
    --reset-offsets it is (kafka-consumer-groups.sh's and kafka-share-groups.sh's shape)."""
    if args.list:
        listed = rows()
        out.result(listed, "\n".join(r["group"] for r in listed))
        return 0
    if not args.group:
        raise InvalidConfigurationError("--describe, --reset-offsets and --delete need --group")
    if args.describe:
        return describe()
    if args.delete:
        delete(args.group)
        out.result({"deleted": args.group}, f"Deletion of requested {kind} groups ('{args.group}') was successful.")
        return 0
    return reset()


def _describe(eng, group_id: str, out: Output) -> int:
    d = eng.groups.describe_group(group_id)
    owner = {tp: m for m in d.members for tp in m["assignment"]}
    committed = eng.groups.fetch_offsets(group_id)
    rows = []
    for tp in sorted(set(owner) | set(committed)):
        leo = eng.partition(tp.topic, tp.partition).high_watermark
        current = committed.get(tp)
        m = owner.get(tp, {})
        rows.append({"group": group_id, "topic": tp.topic, "partition": tp.partition,
                     "currentOffset": None if current is None else current.offset, "logEndOffset": leo,
                     "lag": None if current is None else leo - current.offset,
                     "consumerId": m.get("member_id"), "host": m.get("client_host"), "clientId": m.get("client_id")})
    members = [{k: (v if k != "assignment" else [f"{tp.topic}-{tp.partition}" for tp in v]) for k, v in m.items()
                if k not in ("metadata", "assignment_bytes")} for m in d.members]  # (the raw bytes are the wire's)
    kind = "consumer" if group_id in eng.groups.consumer.groups else "classic"
    shape = f"the consumer group protocol, group epoch {d.generation}, assignor {d.protocol}" if kind == "consumer" \
        else f"generation {d.generation}, protocol {d.protocol or '-'}"
    text = f"Consumer group '{group_id}' is {d.state} ({shape}, {len(d.members)} member(s)).\n\n" + _table(
               ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                "CLIENT-ID"],
               [[r["group"], r["topic"], r["partition"], _dash(r["currentOffset"]), r["logEndOffset"], _dash(r["lag"]),
                 _dash(r["consumerId"]), _dash(r["host"]), _dash(r["clientId"])] for r in rows])
    out.result({"group": group_id, "type": kind, "state": d.state, "generation": d.generation, "protocol": d.protocol,
                "leader": d.leader, "members": members, "partitions": rows}, text)
    return 0


def _dash(v) -> str:
    return "-" if v is None else str(v)


def _targets(eng, args) -> list[TopicPartition]:
    if not args.topic:
        found = sorted(eng.groups.fetch_offsets(args.group))
        if not found:
            raise InvalidConfigurationError(f"group {args.group!r} has no committed offsets: name --topic")
        return found
    return named_partitions(eng, args.topic)


def named_partitions(eng, specs: list[str]) -> list[TopicPartition]:
    """The partitions `--topic` options name (topic, or topic:p1,p2); an unknown one raises."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        try:
            ids = [int(p) for p in parts.split(",")] if parts else list(range(eng.partitions_for(topic)))
        except ValueError:
            raise InvalidConfigurationError(f"--topic takes topic or topic:p1,p2, got {spec!r}") from None
        for p in ids:
            eng.partition(topic, p)  # raises for an unknown partition
            out.append(TopicPartition(topic, p))
    return out


def _timestamp(text: str) -> int:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidConfigurationError(f"--to-datetime takes YYYY-MM-DDTHH:mm:SS.sss, got {text!r}") from None
    return int(when.timestamp() * 1000)


def reset_target(eng, tp: TopicPartition, args) -> int:
    """The offset --to-earliest, --to-latest, --to-offset (clamped to the partition's range, as Kafka's tool does) or
    --to-datetime names for `tp`."""
    part = eng.partition(tp.topic, tp.partition)
    low, high = part.log_start_offset, part.high_watermark
    if args.to_earliest:
        return low
    if args.to_latest:
        return high
    if args.to_offset is not None:
        return min(max(args.to_offset, low), high)
    found = part.offset_for_timestamp(_timestamp(args.to_datetime))
    return high if found is None else found[1]


def _reset(eng, args, out: Output) -> int:
    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime):
        raise InvalidConfigurationError("--reset-offsets needs --to-earliest, --to-latest, --to-offset or "
                                        "--to-datetime")
    plan = {tp: OffsetAndMetadata(reset_target(eng, tp, args)) for tp in _targets(eng, args)}
    if args.execute:
        eng.groups.reset_offsets(args.group, plan)
    rows = [{"group": args.group, "topic": tp.topic, "partition": tp.partition, "newOffset": om.offset}
            for tp, om in sorted(plan.items())]
    text = _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                  [[r["group"], r["topic"], r["partition"], r["newOffset"]] for r in rows])
    if not args.execute:
        text += "\n\n(dry run: add --execute to apply)"
    out.result({"executed": args.execute, "offsets": rows}, text)
    return 0
