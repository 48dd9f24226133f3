"""The listener's consumer group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups and DeleteGroups, and the consumer group protocol's ConsumerGroupHeartbeat and
ConsumerGroupDescribe (KIP-848), answered from the engine's group coordinator (engine.groups), whose members over the
wire and in the process are alike. ConsumerGroupHeartbeat v1 requires the member id the client made for itself
(Kafka 4's KIP-1082); v0 lets the coordinator make it. A JoinGroup or SyncGroup the coordinator holds until its
rebalance moves on is parked by the socket server (Delayed with a readiness check), not held on a handler thread.
Thread-safety: the engine's."""
from __future__ import annotations

import time
from typing import Callable

from engine.common.errors import InvalidRequestError, KafkaError
from engine.common.structs import TopicPartition
from engine.groups import consumer_group_records as cg_records
from engine.groups.consumer_group import Heartbeat
from engine.network.api_common import (
    GROUP_ID_NOT_FOUND,
    code_of,
    commit_split,
    committed_offsets,
    error_code,
    partition_codes,
)
from engine.network.socket_server import Delayed
from engine.protocol import Request
from engine.protocol import messages as m


def heartbeat_failure(exc: KafkaError) -> dict:
    """A ConsumerGroupHeartbeat's or ShareGroupHeartbeat's answer to a refused heartbeat."""
    return {"throttle_time_ms": 0, "error_code": error_code(exc), "error_message": exc.message, "member_epoch": -1,
            "heartbeat_interval_ms": 0}


def heartbeat_reply(answer) -> dict:
    """A ConsumerGroupHeartbeat's or ShareGroupHeartbeat's answer (member id and epoch, interval, assignment)."""
    assignment = None if answer.assignment is None else {
        "topic_partitions": cg_records.partitions_out(answer.assignment)}
    return {"throttle_time_ms": 0, "error_code": 0, "member_id": answer.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": answer.heartbeat_interval_ms, "assignment": assignment}


def describe_failure(group_id: str, exc: KafkaError) -> dict:
    """A ConsumerGroupDescribe's or ShareGroupDescribe's entry for a group it cannot describe."""
    return {"error_code": error_code(exc), "error_message": exc.message, "group_id": group_id, "group_state": "Dead",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}


def described_assignment(parts: dict, names: dict[str, str]) -> dict:
    """A member's {topic id: partitions} as a describe answer's Assignment (`names`: topic id -> name)."""
    return {"topic_partitions": [{**row, "topic_name": names.get(cg_records.topic_id_text(row["topic_id"]), "")}
                                 for row in cg_records.partitions_out(parts)]}


class GroupApis:
    def __init__(self, engine) -> None:
        self.engine = engine

    def handlers(self) -> dict[int, Callable]:
        return {m.JOIN_GROUP.key: self.join_group, m.SYNC_GROUP.key: self.sync_group,
                m.HEARTBEAT.key: self.heartbeat, m.LEAVE_GROUP.key: self.leave_group,
                m.OFFSET_COMMIT.key: self.offset_commit, m.OFFSET_FETCH.key: self.offset_fetch,
                m.LIST_GROUPS.key: self.list_groups, m.DESCRIBE_GROUPS.key: self.describe_groups,
                m.DELETE_GROUPS.key: self.delete_groups,
                m.CONSUMER_GROUP_HEARTBEAT.key: self.consumer_group_heartbeat,
                m.CONSUMER_GROUP_DESCRIBE.key: self.consumer_group_describe}

    def _wait(self, request: Request, start, timeout_ms: int):
        """The group coordinator's Pending for `request` (made by `start()` on its first run), or Delayed until it
        completes; (value, error code) once it has."""
        if request.state is None:
            try:
                request.state = start()
            except KafkaError as exc:
                return None, error_code(exc)
            request.deadline = time.monotonic() + max(timeout_ms, 0) / 1000 + 5
        pending = request.state
        if not pending.done:
            return Delayed(request.deadline, source=pending), 0
        return (pending.value, 0) if pending.error is None else (None, error_code(pending.error))

    def join_group(self, request: Request):
        b = request.body
        rebalance_ms = b["rebalance_timeout_ms"] if b["rebalance_timeout_ms"] >= 0 else b["session_timeout_ms"]
        result, code = self._wait(request, lambda: self.engine.groups.join_group(
            b["group_id"], b["member_id"], request.client_id or "", b["protocol_type"],
            [(p["name"], bytes(p["metadata"])) for p in b["protocols"]], b["session_timeout_ms"], rebalance_ms,
            b["group_instance_id"]), rebalance_ms)
        if isinstance(result, Delayed):
            return result
        if code:
            member_id = request.state.member_id if request.state is not None else b["member_id"]
            return {"error_code": code, "generation_id": -1, "protocol_name": None if request.version >= 7 else "",
                    "leader": "", "member_id": member_id or b["member_id"], "members": []}
        return {"error_code": 0, "generation_id": result.generation_id, "protocol_type": result.protocol_type,
                "protocol_name": result.protocol_name, "leader": result.leader_id,
                "skip_assignment": result.skip_assignment, "member_id": result.member_id,
                "members": [{"member_id": mid, "group_instance_id": iid, "metadata": meta}
                            for mid, iid, meta in result.members]}

    def sync_group(self, request: Request):
        b = request.body
        assignments = {a["member_id"]: bytes(a["assignment"]) for a in b["assignments"]} or None
        result, code = self._wait(request, lambda: self.engine.groups.sync_group(
            b["group_id"], b["generation_id"], b["member_id"], b["protocol_type"], b["protocol_name"], assignments,
            b["group_instance_id"]), 300_000)
        if isinstance(result, Delayed):
            return result
        return {"error_code": code, "protocol_type": b["protocol_type"], "protocol_name": b["protocol_name"],
                "assignment": result if not code else b""}

    def heartbeat(self, request: Request) -> dict:
        b = request.body
        return {"error_code": code_of(lambda: self.engine.groups.heartbeat(
            b["group_id"], b["member_id"], b["generation_id"], b["group_instance_id"]))}

    def leave_group(self, request: Request) -> dict:
        b = request.body
        if request.version < 3:
            return {"error_code": code_of(lambda: self.engine.groups.leave_group(b["group_id"],
                                                                                    b["member_id"]))}
        members = [{"member_id": x["member_id"], "group_instance_id": x["group_instance_id"],
                    "error_code": code_of(lambda x=x: self.engine.groups.leave_group(
                        b["group_id"], x["member_id"], x["group_instance_id"]))} for x in b["members"]]
        return {"error_code": 0, "members": members}

    def offset_commit(self, request: Request) -> dict:
        b = request.body
        committed, unknown = commit_split(self.engine, committed_offsets(b["topics"]))
        code = code_of(lambda: self.engine.groups.commit_offsets(
            b["group_id"], committed, b["member_id"], b["generation_id_or_member_epoch"], b["group_instance_id"],
            stale_epoch_error=request.version >= 9))
        return {"topics": partition_codes(b["topics"], code, unknown)}

    def offset_fetch(self, request: Request) -> dict:
        b = request.body
        if request.version >= 8:
            return {"groups": [self._group_offsets(g["group_id"], g["topics"], "partition_indexes")
                               for g in b["groups"]]}
        found = self._group_offsets(b["group_id"], b["topics"], "partition_indexes")
        return {"topics": found["topics"], "error_code": found["error_code"]}

    def _group_offsets(self, group_id: str, topics: list | None, key: str) -> dict:
        try:
            committed = self.engine.groups.fetch_offsets(group_id)
        except KafkaError as exc:
            return {"group_id": group_id, "topics": [], "error_code": error_code(exc)}
        if topics is None:  # every partition the group has an offset for
            names = sorted({tp.topic for tp in committed})
            topics = [{"name": n, key: sorted(tp.partition for tp in committed if tp.topic == n)} for n in names]
        out = []
        for t in topics:
            parts = []
            for p in t[key]:
                om = committed.get(TopicPartition(t["name"], p))
                parts.append({"partition_index": p, "committed_offset": om.offset if om else -1,
                              "committed_leader_epoch": om.leader_epoch if om else -1,
                              "metadata": om.metadata if om else "", "error_code": 0})
            out.append({"name": t["name"], "partitions": parts})
        return {"group_id": group_id, "topics": out, "error_code": 0}

    def list_groups(self, request: Request) -> dict:
        wanted = {s.lower() for s in request.body["states_filter"]}
        types = {t.lower() for t in request.body["types_filter"]}
        consumer = self.engine.groups.consumer.groups
        groups = [{"group_id": gid, "protocol_type": ptype, "group_state": state,
                   "group_type": "consumer" if gid in consumer else "classic"}
                  for gid, state, ptype in self.engine.groups.list_groups()
                  if not wanted or state.lower() in wanted]
        groups += [{"group_id": gid, "protocol_type": "share", "group_state": state, "group_type": "share"}
                   for gid, state in self.engine.share_groups.list_groups() if not wanted or state.lower() in wanted]
        groups = [g for g in groups if not types or g["group_type"] in types]
        return {"error_code": 0, "groups": groups}

    def describe_groups(self, request: Request) -> dict:
        out = []
        for gid in request.body["groups"]:
            try:
                d = self.engine.groups.describe_group(gid)
            except KafkaError as exc:
                code = error_code(exc)
                out.append({"error_code": 0 if code == GROUP_ID_NOT_FOUND else code, "group_id": gid,
                            "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": []})
                continue
            out.append({"error_code": 0, "group_id": gid, "group_state": d.state, "protocol_type": d.protocol_type,
                        "protocol_data": d.protocol, "members": [
                            {"member_id": x["member_id"], "group_instance_id": x["group_instance_id"],
                             "client_id": x["client_id"], "client_host": x["client_host"],
                             "member_metadata": x["metadata"], "member_assignment": x["assignment_bytes"]}
                            for x in d.members]})
        return {"groups": out}


    def delete_groups(self, request: Request) -> dict:
        return {"throttle_time_ms": 0, "results": [
            {"group_id": gid, "error_code": code_of(lambda gid=gid: self._delete_group(gid))}
            for gid in request.body["groups_names"]]}

    def _delete_group(self, group_id: str) -> None:
        """A share group's or another group's (DeleteGroups serves both, as Kafka's)."""
        share = self.engine.share_groups
        if group_id in dict(share.list_groups()):
            share.delete_group(group_id)
        else:
            self.engine.groups.delete_group(group_id)

    def consumer_group_heartbeat(self, request: Request) -> dict:
        b = request.body
        owned = None if b["topic_partitions"] is None else cg_records.partitions_in(b["topic_partitions"])
        hb = Heartbeat(b["group_id"], b["member_id"], b["member_epoch"], b["instance_id"], b["rack_id"],
                       b["rebalance_timeout_ms"], b["subscribed_topic_names"], b["subscribed_topic_regex"],
                       b["server_assignor"], owned, request.client_id or "")
        try:
            if request.version >= 1 and not hb.member_id:
                raise InvalidRequestError("MemberId can't be empty: ConsumerGroupHeartbeat v1 carries the member "
                                          "id the client made")
            answer = self.engine.groups.consumer_group_heartbeat(hb)
        except KafkaError as exc:
            return heartbeat_failure(exc)
        return heartbeat_reply(answer)

    def consumer_group_describe(self, request: Request) -> dict:
        out = []
        for gid in request.body["group_ids"]:
            try:
                d = self.engine.groups.describe_consumer_group(gid)
            except KafkaError as exc:
                out.append(describe_failure(gid, exc))
                continue

            def described(parts: dict, names=d.topic_names) -> dict:
                return described_assignment(parts, names)
            out.append({"error_code": 0, "group_id": gid, "group_state": d.state, "group_epoch": d.group_epoch,
                        "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor_name, "members": [
                            {"member_id": x.member_id, "instance_id": x.instance_id, "rack_id": x.rack_id,
                             "member_epoch": x.member_epoch, "client_id": x.client_id, "client_host": x.client_host,
                             "subscribed_topic_names": x.subscribed_topic_names,
                             "subscribed_topic_regex": x.subscribed_topic_regex,
                             "assignment": described(x.assignment),
                             "target_assignment": described(x.target_assignment)} for x in d.members]})
        return {"throttle_time_ms": 0, "groups": out}
