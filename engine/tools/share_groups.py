"""`kafkalog share-groups`: kafka-share-groups.sh over a log directory: list share groups, describe one (its members
and assignment, and per share-partition its start offset, log end offset and lag: the records below the log end not
yet acknowledged or archived), reset an empty group's start offsets, delete an empty group's offsets of whole topics
(--delete-offsets: their share-partitions start again from share.auto.offset.reset), delete an empty group.

Opens the directory with `engine.open` (holding its lock while it runs); prints Kafka's column layout, or one JSON
document with `--json`. --reset-offsets prints the plan and applies it only with --execute, as Kafka's tool.
"""
from __future__ import annotations

import argparse

import engine
from engine.common.errors import InvalidConfigurationError
from engine.tools.admin import _table
from engine.tools.groups import add_reset_options, dispatch, named_partitions, reset_target
from engine.tools.output import Output


def add_share_groups(sub) -> None:
    p = sub.add_parser("share-groups", help="list, describe, reset and delete share groups (kafka-share-groups.sh)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every share group id")
    action.add_argument("--describe", action="store_true", help="members, start offsets and lag of --group")
    action.add_argument("--reset-offsets", action="store_true",
                        help="start --group's share-partitions afresh (the group must be empty)")
    action.add_argument("--delete", action="store_true", help="delete --group and its state (it must be empty)")
    action.add_argument("--delete-offsets", action="store_true",
                        help="forget --group's state of each --topic (the group must be empty)")
    add_reset_options(p, "topic, or topic:p1,p2 (--reset-offsets)")
    p.set_defaults(func=share_groups)


def share_groups(args: argparse.Namespace, out: Output) -> int:
    with engine.open(args.data) as eng:
        sg = eng.share_groups
        if args.delete_offsets:
            return _delete_offsets(eng, args, out)
        return dispatch(args, out, "share", lambda: [{"group": g, "state": state} for g, state in sg.list_groups()],
                        lambda: _describe(eng, args.group, out), sg.delete_group, lambda: _reset(eng, args, out))


def _describe(eng, group_id: str, out: Output) -> int:
    sg = eng.share_groups
    g = sg.describe(group_id)
    rows = []
    for (topic_id, index), start in sorted(sg.start_offsets(group_id).items()):
        topic = eng.admin.topic_named(topic_id)
        if topic is None:
            continue
        end = eng.partition(topic, index).high_watermark
        rows.append({"group": group_id, "topic": topic, "partition": index, "startOffset": start,
                     "logEndOffset": end, "lag": sg.lag(group_id, (topic_id, index), end)})
    members = [{"memberId": m.member_id, "clientId": m.client_id, "host": m.client_host, "memberEpoch": m.epoch,
                "assignment": sorted(f"{eng.admin.topic_named(t)}-{p}" for t, ps in m.assignment.items() for p in ps)}
               for m in g.members.values()]
    text = f"Share group '{group_id}' is {g.state} (group epoch {g.epoch}, assignor simple, {len(members)} " \
           f"member(s)).\n\n" + _table(
               ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG"],
               [[r["group"], r["topic"], r["partition"], r["startOffset"], r["logEndOffset"],
                 "-" if r["lag"] is None else r["lag"]] for r in rows])
    if members:
        text += "\n\n" + _table(["MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT"],
                                [[m["memberId"], m["clientId"], m["host"], m["memberEpoch"],
                                  ",".join(m["assignment"]) or "-"] for m in members])
    out.result({"group": group_id, "state": g.state, "groupEpoch": g.epoch, "members": members, "partitions": rows},
               text)
    return 0


def _delete_offsets(eng, args, out: Output) -> int:
    """Kafka's layout: each topic with "Successful" or its error; a group with members or none is refused whole."""
    if not args.group or not args.topic:
        raise InvalidConfigurationError("--delete-offsets needs --group and --topic")
    ids = {t: eng.admin.topic_id_of(t) for t in args.topic}
    done = eng.share_groups.delete_offsets(args.group, [i for i in ids.values() if i is not None])
    rows = [{"topic": t, "error": f"no topic {t!r}" if i is None else None if done[i] is None else done[i].message}
            for t, i in ids.items()]
    out.result({"group": args.group, "topics": rows},
               _table(["TOPIC", "STATUS"], [[r["topic"], "Successful" if r["error"] is None else f"Error: {r['error']}"]
                                            for r in rows]))
    return 0


def _reset(eng, args, out: Output) -> int:
    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime):
        raise InvalidConfigurationError("--reset-offsets needs --to-earliest, --to-latest, --to-offset or "
                                        "--to-datetime")
    if not args.topic:
        raise InvalidConfigurationError("--reset-offsets needs --topic")
    plan = {(tp.topic, tp.partition): reset_target(eng, tp, args) for tp in named_partitions(eng, args.topic)}
    if args.execute:
        eng.share_groups.reset_offsets(args.group, {(eng.admin.topic_id_of(t), p): o for (t, p), o in plan.items()})
    rows = [{"group": args.group, "topic": t, "partition": p, "newStartOffset": o} for (t, p), o in sorted(plan.items())]
    out.result({"executed": args.execute, "partitions": rows},
               _table(["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"],
                      [[r["group"], r["topic"], r["partition"], r["newStartOffset"]] for r in rows])
               + ("" if args.execute else "\n(dry run: add --execute to apply)"))
    return 0
