"""The requests' handlers: each Kafka API the listener speaks, answered from the embedded engine.

The listener is one node (id 0) of a one-node cluster: it leads every partition it lists, its replicas and ISR are
itself, and both coordinators (group, transaction) are itself. A produce request's batches go to Engine.append as
they came (the leader's validation is the engine's); a fetch returns whole batches by reference to the segment's
bytes. Thread-safety: handlers run on the listener's request handler threads at once; what they share is the engine
(thread-safe) and the listener's immutable settings. Crash policy: the engine's.
"""
from __future__ import annotations

import base64
import time
import uuid
import zlib

from engine.common.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from engine.network.sasl import AuthenticationFailed, Authenticator, SaslConfig
from engine.network.socket_server import Close, Delayed
from engine.protocol import APIS, Request, encode_response
from engine.protocol import messages as m
from engine.replication.partition import READ_COMMITTED, READ_UNCOMMITTED
from engine.segments.log_config import LogConfig

NODE_ID = 0
UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
OPERATION_NOT_ATTEMPTED = 55
INVALID_CONFIG = 40
GROUP_ID_NOT_FOUND = 69
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
_BEFORE_AUTHENTICATION = {m.API_VERSIONS.key, m.SASL_HANDSHAKE.key, m.SASL_AUTHENTICATE.key}
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4          # DescribeConfigs' resource types
SET, DELETE = 0, 1                              # IncrementalAlterConfigs' operations
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5     # DescribeConfigs' config sources


def error_code(exc: BaseException) -> int:
    """Kafka's code for an exception (UNKNOWN_SERVER_ERROR for anything not one of Kafka's errors)."""
    return getattr(exc, "code", UNKNOWN_SERVER_ERROR) if isinstance(exc, KafkaError) else UNKNOWN_SERVER_ERROR


class KafkaApis:
    """Answers decoded requests: `handle(request)` gives response chunks, Delayed, or None (acks=0 produce)."""

    def __init__(self, engine, host: str, port: int, *, auto_create_topics: bool = True,
                 default_partitions: int = 1, sasl: SaslConfig | None = None) -> None:
        self.engine, self.host, self.port = engine, host, port
        self.sasl = sasl
        self.auto_create_topics, self.default_partitions = auto_create_topics, default_partitions
        self.cluster_id = _cluster_id(engine.path)
        self._handlers = {m.API_VERSIONS.key: self.api_versions, m.METADATA.key: self.metadata,
                          m.PRODUCE.key: self.produce, m.FETCH.key: self.fetch, m.LIST_OFFSETS.key: self.list_offsets,
                          m.FIND_COORDINATOR.key: self.find_coordinator, m.INIT_PRODUCER_ID.key: self.init_producer_id,
                          m.JOIN_GROUP.key: self.join_group, m.SYNC_GROUP.key: self.sync_group,
                          m.HEARTBEAT.key: self.heartbeat, m.LEAVE_GROUP.key: self.leave_group,
                          m.OFFSET_COMMIT.key: self.offset_commit, m.OFFSET_FETCH.key: self.offset_fetch,
                          m.ADD_PARTITIONS_TO_TXN.key: self.add_partitions_to_txn,
                          m.ADD_OFFSETS_TO_TXN.key: self.add_offsets_to_txn, m.END_TXN.key: self.end_txn,
                          m.TXN_OFFSET_COMMIT.key: self.txn_offset_commit,
                          m.CREATE_TOPICS.key: self.create_topics, m.DELETE_TOPICS.key: self.delete_topics,
                          m.CREATE_PARTITIONS.key: self.create_partitions, m.DELETE_RECORDS.key: self.delete_records,
                          m.DESCRIBE_CONFIGS.key: self.describe_configs,
                          m.INCREMENTAL_ALTER_CONFIGS.key: self.incremental_alter_configs,
                          m.DESCRIBE_CLUSTER.key: self.describe_cluster, m.LIST_GROUPS.key: self.list_groups,
                          m.DESCRIBE_GROUPS.key: self.describe_groups,
                          m.OFFSET_FOR_LEADER_EPOCH.key: self.offset_for_leader_epoch,
                          m.DESCRIBE_PRODUCERS.key: self.describe_producers,
                          m.DESCRIBE_TRANSACTIONS.key: self.describe_transactions,
                          m.LIST_TRANSACTIONS.key: self.list_transactions,
                          m.SASL_HANDSHAKE.key: self.sasl_handshake, m.SASL_AUTHENTICATE.key: self.sasl_authenticate}

    def handle(self, request: Request):
        session = request.session
        if session is not None and not session.authenticated and request.api.key not in _BEFORE_AUTHENTICATION:
            return Close(f"{request.api.name} before SASL authentication")
        body = self._handlers[request.api.key](request)
        if body is None or isinstance(body, Delayed):
            return body
        return encode_response(request.api, request.version, request.correlation_id, body)

    # --- SASL (engine.network.sasl) ----------------------------------------------------------------------------
    def sasl_handshake(self, request: Request):
        offered = self.sasl.mechanisms if self.sasl is not None else []
        session, mechanism = request.session, request.body["mechanism"]
        if self.sasl is None or session.authenticated or session.authenticator is not None:
            session.close_after_send = "SaslHandshake out of place"
            return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": offered}
        if mechanism not in offered:
            session.close_after_send = f"SASL mechanism {mechanism!r} is not offered"
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
        session.authenticator = Authenticator(self.sasl, mechanism)
        return {"error_code": 0, "mechanisms": offered}

    def sasl_authenticate(self, request: Request):
        session = request.session
        auth = session.authenticator
        if auth is None or session.authenticated:
            session.close_after_send = "SaslAuthenticate out of place"
            return {"error_code": ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate out of place",
                    "auth_bytes": b""}
        try:
            reply = auth.step(bytes(request.body["auth_bytes"]))
        except AuthenticationFailed as exc:
            session.close_after_send = f"SASL {auth.mechanism}: {exc}"
            return {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": str(exc), "auth_bytes": b""}
        session.authenticated = auth.done
        return {"error_code": 0, "error_message": None, "auth_bytes": reply}

    # --- ApiVersions, Metadata, FindCoordinator ---------------------------------------------------------
    def api_versions(self, request: Request) -> dict:
        keys = [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                for a in sorted(APIS.values(), key=lambda a: a.key)]
        return {"error_code": UNSUPPORTED_VERSION if request.unsupported_version is not None else 0,
                "api_keys": keys}

    def _broker(self) -> dict:
        return {"node_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}

    def metadata(self, request: Request) -> dict:
        wanted = request.body["topics"]
        if wanted is None or (request.version == 0 and not wanted):
            names = self.engine.list_topics()
            create = False
        else:
            names = [t["name"] for t in wanted]
            create = self.auto_create_topics and request.body["allow_auto_topic_creation"]
        topics = [self._topic_metadata(name, create) for name in names]
        if request.version < 12:  # (a topic asked for by id alone has no name to give back before v12)
            for t in topics:
                t["name"] = t["name"] or ""
        return {"brokers": [self._broker()], "cluster_id": self.cluster_id, "controller_id": NODE_ID,
                "topics": topics}

    def _topic_metadata(self, name: str | None, create: bool) -> dict:
        eng = self.engine
        try:
            if name is None:
                raise UnknownTopicOrPartitionError("a topic asked for by id only")
            try:
                rec = eng.admin.topic(name)
            except UnknownTopicOrPartitionError:
                if not create:
                    raise
                try:
                    eng.create_topic(name, self.default_partitions)
                except TopicAlreadyExistsError:
                    pass  # a concurrent request made it
                rec = eng.admin.topic(name)
        except KafkaError as exc:
            return {"error_code": error_code(exc), "name": name, "partitions": []}
        parts = []
        for p in range(rec.partitions):
            try:
                epoch = eng.partition(name, p).leader_epoch
                code = 0
            except KafkaError as exc:
                epoch, code = -1, error_code(exc)
            parts.append({"error_code": code, "partition_index": p, "leader_id": NODE_ID if code == 0 else -1,
                          "leader_epoch": epoch, "replica_nodes": [NODE_ID], "isr_nodes": [NODE_ID]})
        return {"error_code": 0, "name": name, "topic_id": _uuid(rec.topic_id), "partitions": parts}

    def find_coordinator(self, request: Request) -> dict:
        b = request.body
        if request.version < 4:
            if b["key_type"] not in (0, 1):
                return {"error_code": INVALID_REQUEST, "error_message": f"key type {b['key_type']}", "node_id": -1,
                        "host": "", "port": -1}
            return {"error_code": 0, "node_id": NODE_ID, "host": self.host, "port": self.port}
        code = 0 if b["key_type"] in (0, 1) else INVALID_REQUEST
        return {"coordinators": [{"key": key, "node_id": NODE_ID if not code else -1, "host": self.host,
                                  "port": self.port, "error_code": code} for key in b["coordinator_keys"]]}

    # --- the data path --------------------------------------------------------------------------------------
    def produce(self, request: Request):
        b = request.body
        acks, timeout_ms = b["acks"], b["timeout_ms"]
        responses = []
        for topic in b["topic_data"]:
            parts = []
            for pd in topic["partition_data"]:
                parts.append(self._append(topic["name"], pd["index"], pd["records"], acks, timeout_ms))
            responses.append({"name": topic["name"], "partition_responses": parts})
        if acks == 0:
            return None  # Kafka sends no response to acks=0
        return {"responses": responses}

    def _append(self, topic: str, partition: int, records, acks: int, timeout_ms: int) -> dict:
        out = {"index": partition, "error_code": 0, "base_offset": -1}
        try:
            if acks not in (-1, 0, 1):
                raise InvalidRequiredAcksError(f"acks={acks}")
            info = self.engine.append(topic, partition, records if records is not None else b"", acks, timeout_ms)
            out["base_offset"] = info.first_offset
            out["log_append_time_ms"] = info.log_append_time
            out["log_start_offset"] = self.engine.partition(topic, partition).log_start_offset
        except KafkaError as exc:
            out["error_code"] = error_code(exc)
            out["error_message"] = str(exc)
        return out

    def fetch(self, request: Request):
        b = request.body
        now = time.monotonic()
        if request.deadline is None:
            request.deadline = now + b["max_wait_ms"] / 1000
        deadline = request.deadline
        isolation = READ_COMMITTED if b["isolation_level"] == 1 else READ_UNCOMMITTED
        budget = b["max_bytes"] if b["max_bytes"] > 0 else 0x7FFFFFFF
        total = 0
        responses = []
        for topic in b["topics"]:
            parts = []
            for p in topic["partitions"]:
                entry, size = self._read(topic["topic"], p, isolation, budget - total, first=total == 0)
                total += size
                parts.append(entry)
            responses.append({"topic": topic["topic"], "partitions": parts})
        if total < max(1, b["min_bytes"]) and now < deadline and b["max_wait_ms"] > 0:
            return Delayed(deadline)
        return {"error_code": 0, "session_id": 0, "responses": responses}

    def _read(self, topic: str, p: dict, isolation: str, budget: int, first: bool) -> tuple[dict, int]:
        out = {"partition_index": p["partition"], "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
               "log_start_offset": -1, "aborted_transactions": None, "records": b""}
        try:
            part = self.engine.partition(topic, p["partition"])
            out["high_watermark"] = part.high_watermark
            out["last_stable_offset"] = part.fetch_upper_bound(READ_COMMITTED)
            out["log_start_offset"] = part.log_start_offset
            max_bytes = min(p["partition_max_bytes"], budget)
            if max_bytes <= 0 and not first:
                return out, 0
            data = part.fetch(p["fetch_offset"], max(1, max_bytes), isolation)
            if data is None:
                if isolation == READ_COMMITTED:
                    out["aborted_transactions"] = []
                return out, 0
            out["records"] = data.records
            if isolation == READ_COMMITTED:
                out["aborted_transactions"] = [{"producer_id": t.producer_id, "first_offset": t.first_offset}
                                               for t in part.aborted_transactions(data)]
            return out, len(data.records)
        except KafkaError as exc:
            out["error_code"] = error_code(exc)
            return out, 0

    def list_offsets(self, request: Request) -> dict:
        b = request.body
        isolation = READ_COMMITTED if b["isolation_level"] == 1 else READ_UNCOMMITTED
        topics = []
        for topic in b["topics"]:
            parts = []
            for p in topic["partitions"]:
                out = {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1, "offset": -1}
                try:
                    part = self.engine.partition(topic["name"], p["partition_index"])
                    found = part.offset_for_timestamp(p["timestamp"], isolation)
                    if found is not None:
                        out["timestamp"], out["offset"] = found
                        if request.version >= 4:  # (a field of v4+ that is not ignorable)
                            out["leader_epoch"] = part.leader_epoch
                except KafkaError as exc:
                    out["error_code"] = error_code(exc)
                parts.append(out)
            topics.append({"name": topic["name"], "partitions": parts})
        return {"topics": topics}

    def offset_for_leader_epoch(self, request: Request) -> dict:
        topics = []
        for t in request.body["topics"]:
            parts = []
            for p in t["partitions"]:
                entry = {"error_code": 0, "partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
                try:
                    part = self.engine.partition(t["topic"], p["partition"])
                    current = p["current_leader_epoch"]
                    if current >= 0 and current != part.leader_epoch:
                        entry["error_code"] = FENCED_LEADER_EPOCH if current < part.leader_epoch \
                            else UNKNOWN_LEADER_EPOCH
                    else:
                        entry["leader_epoch"], entry["end_offset"] = part.offsets_for_leader_epoch(p["leader_epoch"])
                except KafkaError as exc:
                    entry["error_code"] = error_code(exc)
                parts.append(entry)
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"topics": topics}

    # --- producers --------------------------------------------------------------------------------------------
    def init_producer_id(self, request: Request) -> dict:
        b = request.body
        try:
            if b["transactional_id"] is None:
                return {"error_code": 0, "producer_id": self.engine.allocate_producer_id(), "producer_epoch": 0}
            pid, epoch = self.engine.transactions.init_producer_id(b["transactional_id"],
                                                                   b["transaction_timeout_ms"])
            return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}
        except KafkaError as exc:
            return {"error_code": error_code(exc), "producer_id": -1, "producer_epoch": -1}


    # --- admin ------------------------------------------------------------------------------------------------
    def create_topics(self, request: Request) -> dict:
        b = request.body
        out = []
        for t in b["topics"]:
            entry = {"name": t["name"], "error_code": 0, "error_message": None}
            try:
                if t["assignments"]:
                    raise InvalidRequestError("manual replica assignments are not supported by a one-node listener")
                config = {c["name"]: c["value"] for c in t["configs"]}
                partitions = t["num_partitions"] if t["num_partitions"] != -1 else self.default_partitions
                rf = t["replication_factor"] if t["replication_factor"] != -1 else 1
                if b["validate_only"]:
                    LogConfig.from_dict(config, base=self.engine.defaults)
                    if self.engine.list_topics().count(t["name"]):
                        raise TopicAlreadyExistsError(f"topic {t['name']!r} already exists")
                else:
                    self.engine.create_topic(t["name"], partitions, rf, config)
                    entry["topic_id"] = _uuid(self.engine.admin.topic(t["name"]).topic_id)
                entry.update(num_partitions=partitions, replication_factor=rf)
            except (KafkaError, ValueError, TypeError) as exc:
                entry.update(error_code=error_code(exc) if isinstance(exc, KafkaError) else INVALID_CONFIG,
                             error_message=str(exc))
            out.append(entry)
        return {"topics": out}

    def delete_topics(self, request: Request) -> dict:
        out = []
        for name in request.body["topic_names"]:
            code, message = self._error_of(lambda name=name: self.engine.delete_topic(name))
            out.append({"name": name, "error_code": code, "error_message": message})
        return {"responses": out}

    def create_partitions(self, request: Request) -> dict:
        b = request.body
        out = []
        for t in b["topics"]:
            def grow(t=t):
                if t["assignments"]:
                    raise InvalidRequestError("manual replica assignments are not supported by a one-node listener")
                current = self.engine.partitions_for(t["name"])
                if t["count"] <= current:
                    raise InvalidPartitionsError(f"topic {t['name']!r} has {current} partitions already")
                if not b["validate_only"]:
                    self.engine.create_partitions(t["name"], t["count"])
            code, message = self._error_of(grow)
            out.append({"name": t["name"], "error_code": code, "error_message": message})
        return {"results": out}

    def delete_records(self, request: Request) -> dict:
        topics = []
        for t in request.body["topics"]:
            parts = []
            for p in t["partitions"]:
                entry = {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": 0}
                try:
                    entry["low_watermark"] = self.engine.partition(t["name"], p["partition_index"]).delete_records(
                        p["offset"])
                except KafkaError as exc:
                    entry["error_code"] = error_code(exc)
                parts.append(entry)
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    def describe_configs(self, request: Request) -> dict:
        results = []
        for r in request.body["resources"]:
            entry = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                     "resource_name": r["resource_name"], "configs": []}
            try:
                if r["resource_type"] == TOPIC_RESOURCE:
                    described = self.engine.describe_topic(r["resource_name"])
                    effective, overrides = described.config, described.overrides
                elif r["resource_type"] == BROKER_RESOURCE and r["resource_name"] in ("", str(NODE_ID)):
                    effective, overrides = self.engine.defaults.to_dict(), {}
                else:
                    raise InvalidRequestError(f"resource type {r['resource_type']} {r['resource_name']!r} is not "
                                              f"described by a one-node listener")
                keys = r["configuration_keys"]
                for name, value in sorted(effective.items()):
                    if keys is not None and name not in keys:
                        continue
                    config = {"name": name, "value": _config_text(value), "read_only": False, "is_sensitive": False,
                              "config_source": DYNAMIC_TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG}
                    if request.version == 0:  # (v1 replaced it with config_source)
                        config["is_default"] = name not in overrides
                    entry["configs"].append(config)
            except KafkaError as exc:
                entry.update(error_code=error_code(exc), error_message=str(exc))
            results.append(entry)
        return {"results": results}

    def incremental_alter_configs(self, request: Request) -> dict:
        b = request.body
        out = []
        for r in b["resources"]:
            def alter(r=r):
                if r["resource_type"] != TOPIC_RESOURCE:
                    raise InvalidRequestError("only topic configs are altered through a one-node listener")
                changes = {}
                for c in r["configs"]:
                    if c["config_operation"] not in (SET, DELETE):
                        raise InvalidRequestError(f"config operation {c['config_operation']} (APPEND/SUBTRACT) on "
                                                  f"{c['name']!r} is not supported yet")
                    changes[c["name"]] = c["value"] if c["config_operation"] == SET else None
                if b["validate_only"]:
                    current = self.engine.describe_topic(r["resource_name"]).overrides
                    LogConfig.from_dict({k: v for k, v in {**current, **changes}.items() if v is not None},
                                        base=self.engine.defaults)
                else:
                    self.engine.alter_topic_config(r["resource_name"], changes)
            code, message = self._error_of(alter)
            out.append({"error_code": code, "error_message": message, "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"]})
        return {"responses": out}

    def describe_cluster(self, request: Request) -> dict:
        return {"error_code": 0, "cluster_id": self.cluster_id, "controller_id": NODE_ID,
                "brokers": [{"broker_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}]}

    def list_groups(self, request: Request) -> dict:
        wanted = {s.lower() for s in request.body["states_filter"]}
        groups = [{"group_id": gid, "protocol_type": ptype, "group_state": state}
                  for gid, state, ptype in self.engine.groups.list_groups()
                  if not wanted or state.lower() in wanted]
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

    @staticmethod
    def _error_of(call) -> tuple[int, str | None]:
        try:
            call()
            return 0, None
        except KafkaError as exc:
            return error_code(exc), str(exc)
        except (ValueError, TypeError) as exc:
            return INVALID_CONFIG, str(exc)

    # --- transactions (the engine's transaction coordinator) -----------------------------------------------
    def add_partitions_to_txn(self, request: Request) -> dict:
        b = request.body
        wanted = [TopicPartition(t["name"], p) for t in b["v3_and_below_topics"] for p in t["partitions"]]
        codes = {}
        for tp in wanted:  # every partition must exist; otherwise none is added (Kafka answers the others 111)
            try:
                self.engine.partition(*tp)
            except KafkaError as exc:
                codes[tp] = error_code(exc)
        if codes:
            codes = {tp: codes.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
        else:
            code = self._code_of(lambda: self.engine.transactions.coordinator.add_partitions(
                b["v3_and_below_transactional_id"], b["v3_and_below_producer_id"], b["v3_and_below_producer_epoch"],
                wanted))
            codes = dict.fromkeys(wanted, code)
        return {"results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": codes[TopicPartition(t["name"], p)]}
                for p in t["partitions"]]} for t in b["v3_and_below_topics"]]}

    def add_offsets_to_txn(self, request: Request) -> dict:
        b = request.body
        return {"error_code": self._code_of(lambda: self.engine.transactions.add_offsets(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["group_id"]))}

    def end_txn(self, request: Request) -> dict:
        b = request.body
        return {"error_code": self._code_of(lambda: self.engine.transactions.coordinator.end_txn(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["committed"]))}

    def txn_offset_commit(self, request: Request) -> dict:
        b = request.body
        committed = {TopicPartition(t["name"], p["partition_index"]):
                     OffsetAndMetadata(p["committed_offset"], p["committed_metadata"] or "", p["committed_leader_epoch"])
                     for t in b["topics"] for p in t["partitions"]}
        member = ConsumerGroupMetadata(b["group_id"], b["generation_id"], b["member_id"], b["group_instance_id"])
        code = self._code_of(lambda: self.engine.groups.commit_transactional(
            member, committed, b["producer_id"], b["producer_epoch"]))
        return {"topics": [{"name": t["name"], "partitions": [{"partition_index": p["partition_index"],
                                                               "error_code": code} for p in t["partitions"]]}
                           for t in b["topics"]]}

    def describe_producers(self, request: Request) -> dict:
        topics = []
        for t in request.body["topics"]:
            parts = []
            for index in t["partition_indexes"]:
                entry = {"partition_index": index, "error_code": 0, "active_producers": []}
                try:
                    state = self.engine.partition(t["name"], index).log.producer_state
                    for pid, e in sorted(dict(state.producers).items()):
                        entry["active_producers"].append({
                            "producer_id": pid, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                            "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                            "current_txn_start_offset": e.txn_first_offset if e.txn_first_offset is not None
                            else -1})
                except KafkaError as exc:
                    entry.update(error_code=error_code(exc), error_message=str(exc))
                parts.append(entry)
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    def describe_transactions(self, request: Request) -> dict:
        out = []
        for tid in request.body["transactional_ids"]:
            try:
                d = self.engine.transactions.coordinator.describe(tid)
            except KafkaError as exc:
                out.append({"error_code": error_code(exc), "transactional_id": tid, "transaction_state": "",
                            "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                            "producer_epoch": -1, "topics": []})
                continue
            names = sorted({tp.topic for tp in d.partitions})
            out.append({"error_code": 0, "transactional_id": tid, "transaction_state": d.state,
                        "transaction_timeout_ms": d.timeout_ms, "transaction_start_time_ms": d.start_ms,
                        "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                        "topics": [{"topic": n, "partitions": sorted(tp.partition for tp in d.partitions
                                                                     if tp.topic == n)} for n in names]})
        return {"transaction_states": out}

    def list_transactions(self, request: Request) -> dict:
        b = request.body
        known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                 "PrepareEpochFence", "Dead"}
        states, pids = set(b["state_filters"]), set(b["producer_id_filters"])
        now = self.engine.clock.time_ms()
        listed = [d for d in self.engine.transactions.coordinator.list()
                  if (not states or d.state in states) and (not pids or d.producer_id in pids)
                  and (b["duration_filter"] < 0 or d.start_ms >= 0 and now - d.start_ms >= b["duration_filter"])]
        return {"error_code": 0, "unknown_state_filters": sorted(states - known),
                "transaction_states": [{"transactional_id": d.transactional_id, "producer_id": d.producer_id,
                                        "transaction_state": d.state} for d in listed]}

    # --- consumer groups (the engine's group coordinator) ---------------------------------------------------
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
            return Delayed(request.deadline, ready=lambda: pending.done), 0
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
        return {"error_code": self._code_of(lambda: self.engine.groups.heartbeat(
            b["group_id"], b["member_id"], b["generation_id"], b["group_instance_id"]))}

    def leave_group(self, request: Request) -> dict:
        b = request.body
        if request.version < 3:
            return {"error_code": self._code_of(lambda: self.engine.groups.leave_group(b["group_id"],
                                                                                    b["member_id"]))}
        members = [{"member_id": x["member_id"], "group_instance_id": x["group_instance_id"],
                    "error_code": self._code_of(lambda x=x: self.engine.groups.leave_group(
                        b["group_id"], x["member_id"], x["group_instance_id"]))} for x in b["members"]]
        return {"error_code": 0, "members": members}

    def offset_commit(self, request: Request) -> dict:
        b = request.body
        committed = {TopicPartition(t["name"], p["partition_index"]):
                     OffsetAndMetadata(p["committed_offset"], p["committed_metadata"] or "", p["committed_leader_epoch"])
                     for t in b["topics"] for p in t["partitions"]}
        code = self._code_of(lambda: self.engine.groups.commit_offsets(
            b["group_id"], committed, b["member_id"], b["generation_id_or_member_epoch"], b["group_instance_id"]))
        return {"topics": [{"name": t["name"], "partitions": [{"partition_index": p["partition_index"],
                                                               "error_code": code} for p in t["partitions"]]}
                           for t in b["topics"]]}

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

    @staticmethod
    def _code_of(call) -> int:
        try:
            call()
            return 0
        except KafkaError as exc:
            return error_code(exc)


def _config_text(value) -> str | None:
    """A config value as Kafka writes it (booleans in lower case)."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _uuid(text: str | None) -> uuid.UUID | None:
    """A topic id's text form (22 characters of URL-safe base64) as a UUID."""
    if not text:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError):
        return None


def _cluster_id(path: str) -> str:
    """A stable id for the directory's one-node cluster (Kafka's cluster ids are 22-character base64 UUIDs)."""
    digest = zlib.crc32(path.encode()).to_bytes(4, "big") * 4
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
