"""The listener's share group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge, and the share group offsets APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets), answered from the engine's share group coordinator
(engine.groups.share_group_coordinator).

A ShareFetch does its session step and its acknowledgements once, on its first run; its acquisition runs then and
again each time the socket server wakes it (an append to one of its partitions, or its MaxWaitMs deadline) until
records were acquired or the deadline passed. Share-partitions are named by topic id on the wire.
Thread-safety: the engine's.
"""
from __future__ import annotations

import time
import uuid
from typing import Callable

from engine.common.errors import InvalidGroupIdError, InvalidRequestError, KafkaError, UnknownTopicOrPartitionError
from engine.groups.share_group import ShareHeartbeat
from engine.groups.share_partition import RENEW
from engine.network.api_common import error_code, partition_count
from engine.network.group_apis import described_assignment, describe_failure, heartbeat_failure, heartbeat_reply
from engine.network.socket_server import Delayed
from engine.protocol import Request
from engine.protocol import share_messages as sm
from engine.segments.partition_metadata import topic_id_text, topic_uuid

Key = tuple[str, int]
ZERO_UUID = uuid.UUID(int=0)  # the topic id Kafka answers for a topic it does not know
NOT_HOSTED = "This server does not host this topic-partition."  # Kafka's text of UNKNOWN_TOPIC_OR_PARTITION


Batches = list[tuple[int, int, list[int]]]


def _acks(topics: list[dict], version: int) -> tuple[dict[Key, Batches], dict[Key, KafkaError]]:
    """The acknowledgement batches of each share-partition, and those refused before they reach the coordinator:
    RENEW (4) before v2, which Kafka 4.2 added it with."""
    out: dict[Key, list] = {}
    refused: dict[Key, KafkaError] = {}
    for t in topics:
        for p in t["partitions"]:
            if p["acknowledgement_batches"]:
                key = (topic_id_text(t["topic_id"]), p["partition_index"])
                batches = [(a["first_offset"], a["last_offset"], list(a["acknowledge_types"]))
                           for a in p["acknowledgement_batches"]]
                if version < 2 and any(RENEW in types for _, _, types in batches):
                    refused[key] = InvalidRequestError(f"acknowledge type 4 (RENEW) needs version 2 (this is "
                                                       f"v{version})")
                else:
                    out[key] = batches
    return out, refused


def _acknowledged(sg, group_id: str, member_id: str, topics: list[dict], version: int) -> dict[Key, KafkaError | None]:
    acks, refused = _acks(topics, version)
    return {**sg.acknowledge(group_id, member_id, acks), **refused}


def _named(topics: list[dict]) -> list[Key]:
    return [(topic_id_text(t["topic_id"]), p if isinstance(p, int) else p["partition_index"])
            for t in topics for p in t["partitions"]]


def _by_topic(entries: dict[Key, dict]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (tid, index), entry in sorted(entries.items()):
        topics.setdefault(tid, []).append({"partition_index": index, **entry})
    return [{"topic_id": topic_uuid(tid), "partitions": parts} for tid, parts in topics.items()]


def _ack_entry(exc: KafkaError | None, prefix: str) -> dict:
    return {f"{prefix}error_code": 0 if exc is None else error_code(exc),
            f"{prefix}error_message": None if exc is None else exc.message}


class ShareApis:
    def __init__(self, engine) -> None:
        self.engine = engine

    def handlers(self) -> dict[int, Callable]:
        return {sm.SHARE_GROUP_HEARTBEAT.key: self.share_group_heartbeat,
                sm.SHARE_GROUP_DESCRIBE.key: self.share_group_describe,
                sm.SHARE_FETCH.key: self.share_fetch, sm.SHARE_ACKNOWLEDGE.key: self.share_acknowledge,
                sm.DESCRIBE_SHARE_GROUP_OFFSETS.key: self.describe_share_group_offsets,
                sm.ALTER_SHARE_GROUP_OFFSETS.key: self.alter_share_group_offsets,
                sm.DELETE_SHARE_GROUP_OFFSETS.key: self.delete_share_group_offsets}

    def share_group_heartbeat(self, request: Request) -> dict:
        b = request.body
        session = request.session
        host = f"/{session.peer[0]}" if session is not None and session.peer else "/127.0.0.1"
        hb = ShareHeartbeat(b["group_id"], b["member_id"], b["member_epoch"], b["rack_id"],
                            b["subscribed_topic_names"], request.client_id or "", host)
        try:
            if not hb.member_id and request.version >= 1:
                raise InvalidRequestError("MemberId can't be empty: ShareGroupHeartbeat v1 carries the member id the "
                                          "client made (v0 lets the coordinator make it)")
            answer = self.engine.share_groups.heartbeat(hb)
        except KafkaError as exc:
            return heartbeat_failure(exc)
        return heartbeat_reply(answer)

    def share_group_describe(self, request: Request) -> dict:
        out = []
        for gid in request.body["group_ids"]:
            try:
                g = self.engine.share_groups.describe(gid)
            except KafkaError as exc:
                out.append(describe_failure(gid, exc))
                continue
            names = {tid: name for name, (tid, _) in g.subscribed.items()}
            out.append({"error_code": 0, "group_id": gid, "group_state": g.state, "group_epoch": g.epoch,
                        "assignment_epoch": g.epoch, "assignor_name": "simple", "members": [
                            {"member_id": m.member_id, "rack_id": m.rack, "member_epoch": m.epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.topics),
                             "assignment": described_assignment(m.assignment, names)}
                            for m in g.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    def _failed(self, exc: KafkaError, **extra) -> dict:
        return {"throttle_time_ms": 0, "error_code": error_code(exc), "error_message": exc.message, "responses": [],
                "node_endpoints": [], **extra}

    def share_fetch(self, request: Request):
        b = request.body
        sg = self.engine.share_groups
        group_id, member_id, epoch = b["group_id"], b["member_id"], b["share_session_epoch"]
        if request.state is None:  # the session step and the acknowledgements: once
            request.deadline = time.monotonic() + max(0, b["max_wait_ms"]) / 1000
            try:
                if not group_id or not member_id:
                    raise InvalidRequestError("a ShareFetch names its group and member")
                if b.get("share_acquire_mode", 0) not in (0, 1):
                    raise InvalidRequestError(f"ShareAcquireMode {b['share_acquire_mode']}: 0 (batch_optimized) or 1 "
                                              f"(record_limit)")
                forgotten = _named(b["forgotten_topics_data"])
                keys = sg.session(group_id, member_id, epoch, _named(b["topics"]), forgotten)
                acked = _acknowledged(sg, group_id, member_id, b["topics"], request.version)
                sg.release_partitions(group_id, member_id, forgotten)
                if epoch == -1:
                    sg.close_session(group_id, member_id)
                    keys = []
            except KafkaError as exc:
                return self._failed(exc, acquisition_lock_timeout_ms=0)
            if request.session is not None:  # (the share session closes with its connection, as on Kafka's brokers)
                closers = request.session.on_close
                if epoch == -1:
                    closers.pop(("share", group_id, member_id), None)
                else:
                    current = sg.sessions.get((group_id, member_id))
                    closers[("share", group_id, member_id)] = lambda: sg.close_session(group_id, member_id, current)
            request.state = (keys, acked, _named(b["topics"]))
        keys, acked, named = request.state
        try:
            # (MaxBytes 0 acquires nothing, as Kafka answers it; otherwise at least one batch is returned)
            # (a renewing ShareFetch, IsRenewAck, only acknowledges: KIP-1222)
            got = sg.acquire(group_id, member_id, keys, max(1, b["max_records"]), b["max_bytes"],
                             strict=b.get("share_acquire_mode") == 1) \
                if keys and b["max_bytes"] > 0 and not b.get("is_renew_ack") else {}
            lock_ms = sg.lock_duration_ms(group_id)
        except KafkaError as exc:
            return self._failed(exc, acquisition_lock_timeout_ms=0)
        if not got and time.monotonic() < request.deadline and keys and not b.get("is_renew_ack"):
            names = [(self.engine.admin.topic_named(tid), p) for tid, p in keys]
            return Delayed(request.deadline, keys=[k for k in names if k[0] is not None])
        entries: dict[Key, dict] = {}
        for key in set(named) | set(acked) | set(got):
            entry = {"error_code": 0, "error_message": None, **_ack_entry(acked.get(key), "acknowledge_"),
                     "records": b"", "acquired_records": []}
            found = got.get(key)
            if isinstance(found, KafkaError):
                entry.update(error_code=error_code(found), error_message=found.message)
            elif found is not None:
                entry["records"] = found.records
                entry["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                              "delivery_count": a.delivery_count} for a in found.acquired]
            entries[key] = entry
        return {"throttle_time_ms": 0, "error_code": 0, "acquisition_lock_timeout_ms": lock_ms,
                "responses": _by_topic(entries), "node_endpoints": []}

    def share_acknowledge(self, request: Request) -> dict:
        b = request.body
        sg = self.engine.share_groups
        group_id, member_id, epoch = b["group_id"], b["member_id"], b["share_session_epoch"]
        try:
            if not group_id or not member_id:
                raise InvalidRequestError("a ShareAcknowledge names its group and member")
            sg.session(group_id, member_id, epoch, [], [], acknowledging_only=True)
            acked = _acknowledged(sg, group_id, member_id, b["topics"], request.version)
            lock_ms = sg.lock_duration_ms(group_id)
            if epoch == -1:
                sg.close_session(group_id, member_id)
                if request.session is not None:
                    request.session.on_close.pop(("share", group_id, member_id), None)
        except KafkaError as exc:
            return self._failed(exc, acquisition_lock_timeout_ms=0)
        entries = {key: _ack_entry(exc, "") for key, exc in acked.items()}
        return {"throttle_time_ms": 0, "error_code": 0, "acquisition_lock_timeout_ms": lock_ms,
                "responses": _by_topic(entries), "node_endpoints": []}

    # --- the share group offsets APIs (Kafka 4.1) -------------------------------------------------------------
    def describe_share_group_offsets(self, request: Request) -> dict:
        """Each share-partition's start offset (-1 where the group holds no state of it, or the topic is unknown, as
        Kafka answers: not an error) and, from v1, its lag: the records below the high watermark neither
        acknowledged nor archived. Without topics: every share-partition the group holds state of."""
        sg, admin = self.engine.share_groups, self.engine.admin
        out = []
        for g in request.body["groups"]:
            gid = g["group_id"]
            starts = sg.start_offsets(gid)
            if g["topics"] is None:
                wanted: dict[str, list[int]] = {}
                for tid, index in sorted(starts):
                    name = admin.topic_named(tid)
                    if name is not None:
                        wanted.setdefault(name, []).append(index)
            else:  # (unknown topics first, as Kafka answers: they never reach its share coordinator)
                wanted = {t["topic_name"]: list(t["partitions"]) for t in sorted(
                    g["topics"], key=lambda t: admin.topic_id_of(t["topic_name"]) is not None)}
            topics = []
            for name, indexes in wanted.items():
                tid = admin.topic_id_of(name)
                rows = []
                for index in indexes:
                    start = starts.get((tid, index), -1) if tid is not None else -1
                    lag = sg.lag(gid, (tid, index), self.engine.partition(name, index).high_watermark) \
                        if start >= 0 else None
                    rows.append({"partition_index": index, "start_offset": start, "leader_epoch": 0,
                                 "lag": -1 if lag is None else lag, "error_code": 0, "error_message": None})
                topics.append({"topic_name": name, "topic_id": ZERO_UUID if tid is None else topic_uuid(tid),
                               "partitions": rows})
            out.append({"group_id": gid, "topics": topics, "error_code": 0, "error_message": None})
        return {"throttle_time_ms": 0, "groups": out}

    def alter_share_group_offsets(self, request: Request) -> dict:
        """New start offsets for share-partitions of an empty share group that exists (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP for the whole request otherwise); an unknown topic or partition is refused alone."""
        b = request.body
        topics, starts = [], {}
        ids = {t["topic_name"]: self.engine.admin.topic_id_of(t["topic_name"]) for t in b["topics"]}
        for t in sorted(b["topics"], key=lambda t: ids[t["topic_name"]] is not None):  # (unknown ones first: Kafka's)
            tid = ids[t["topic_name"]]
            count = partition_count(self.engine, t["topic_name"], 0) if tid is not None else 0
            rows = []
            for p in t["partitions"]:
                refused = None if 0 <= p["partition_index"] < count else UnknownTopicOrPartitionError(NOT_HOSTED)
                if refused is None and p["start_offset"] < 0:
                    refused = InvalidRequestError(f"start offset {p['start_offset']}: an offset is >= 0")
                if refused is None:
                    starts[(tid, p["partition_index"])] = p["start_offset"]
                rows.append({"partition_index": p["partition_index"], **_ack_entry(refused, "")})
            topics.append({"topic_name": t["topic_name"], "topic_id": ZERO_UUID if tid is None else topic_uuid(tid),
                           "partitions": rows})
        try:
            if not b["group_id"]:
                raise InvalidGroupIdError("a share group's id may not be empty")
            self.engine.share_groups.reset_offsets(b["group_id"], starts, create=False)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, **_ack_entry(exc, ""), "responses": []}
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": topics}

    def delete_share_group_offsets(self, request: Request) -> dict:
        """Forget an empty share group's state of whole topics; a topic unknown, or one the group holds no state of,
        is refused alone (UNKNOWN_TOPIC_OR_PARTITION)."""
        b = request.body
        admin = self.engine.admin
        names = [t["topic_name"] for t in b["topics"]]
        ids = {name: admin.topic_id_of(name) for name in names}
        try:
            if not b["group_id"]:
                raise InvalidGroupIdError("a share group's id may not be empty")
            done = self.engine.share_groups.delete_offsets(b["group_id"], [i for i in ids.values() if i is not None])
        except KafkaError as exc:
            return {"throttle_time_ms": 0, **_ack_entry(exc, ""), "responses": []}
        # (a topic refused is answered with the zero topic id, as Kafka answers it)
        failed = {name: done[tid] if tid is not None else UnknownTopicOrPartitionError(NOT_HOSTED)
                  for name, tid in ids.items()}
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": name, "topic_id": ZERO_UUID if failed[name] is not None else topic_uuid(tid),
             **_ack_entry(failed[name], "")} for name, tid in ids.items()]}
