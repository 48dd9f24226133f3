"""The requests' handlers: each Kafka API the listener speaks, answered from the embedded engine. This module holds
the dispatch (with the SASL gate), the cluster's description (ApiVersions, Metadata, FindCoordinator,
DescribeCluster), SASL, and the data path (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch); the other families
are engine.network.group_apis, txn_apis and admin_apis.

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
    InvalidRequiredAcksError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from engine.network.admin_apis import AdminApis
from engine.network.api_common import (
    COORDINATOR_TOPICS,
    FENCED_LEADER_EPOCH,
    ILLEGAL_SASL_STATE,
    INVALID_REQUEST,
    NODE_ID,
    SASL_AUTHENTICATION_FAILED,
    UNKNOWN_LEADER_EPOCH,
    UNSUPPORTED_SASL_MECHANISM,
    UNKNOWN_TOPIC_ID,
    UNSUPPORTED_VERSION,
    error_code,
)
from engine.network.cluster_apis import ClusterApis
from engine.network.delayed_produce import FIRST_WAIT_MS, DelayedProduce, ProducePurgatory
from engine.network.group_apis import GroupApis
from engine.network.share_apis import ShareApis
from engine.network.sasl import AuthenticationFailed, Authenticator, SaslConfig
from engine.network.socket_server import Close, Delayed
from engine.network.txn_apis import TxnApis
from engine.protocol import APIS, Request, encode_response
from engine.protocol.types import ZERO_UUID
from engine.protocol import admin_messages as am
from engine.protocol import messages as m
from engine.replication.partition import READ_COMMITTED, READ_UNCOMMITTED
from engine.segments.log_segments import EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP, MAX_TIMESTAMP
from engine.segments.partition_metadata import topic_id_text, topic_uuid

_BEFORE_AUTHENTICATION = {m.API_VERSIONS.key, m.SASL_HANDSHAKE.key, m.SASL_AUTHENTICATE.key}


# the ListOffsets version each later special timestamp needs
_TIMESTAMP_VERSIONS = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


class KafkaApis:
    """Answers decoded requests: `handle(request)` gives response chunks, Delayed, or None (acks=0 produce)."""

    def __init__(self, engine, host: str, port: int, *, auto_create_topics: bool = True,
                 default_partitions: int = 1, sasl: SaslConfig | None = None,
                 security_protocol: str = "PLAINTEXT") -> None:
        self.engine, self.host, self.port = engine, host, port
        self.sasl = sasl
        self.auto_create_topics, self.default_partitions = auto_create_topics, default_partitions
        self.cluster_id = _cluster_id(engine.path)
        self._purgatory = ProducePurgatory()
        self._txn = TxnApis(engine)
        self._handlers = {m.API_VERSIONS.key: self.api_versions, m.METADATA.key: self.metadata,
                          m.FIND_COORDINATOR.key: self.find_coordinator, am.DESCRIBE_CLUSTER.key: self.describe_cluster,
                          m.PRODUCE.key: self.produce, m.FETCH.key: self.fetch, m.LIST_OFFSETS.key: self.list_offsets,
                          m.OFFSET_FOR_LEADER_EPOCH.key: self.offset_for_leader_epoch,
                          m.SASL_HANDSHAKE.key: self.sasl_handshake, m.SASL_AUTHENTICATE.key: self.sasl_authenticate,
                          am.DESCRIBE_TOPIC_PARTITIONS.key: self.describe_topic_partitions,
                          **GroupApis(engine).handlers(), **self._txn.handlers(),
                          **ShareApis(engine).handlers(),
                          **ClusterApis(engine).handlers(),
                          **AdminApis(engine, default_partitions, {
                              "advertised.listeners": f"{security_protocol}://{host}:{port}",
                              "auto.create.topics.enable": auto_create_topics, "node.id": NODE_ID,
                              "num.partitions": default_partitions,
                              "sasl.enabled.mechanisms": ",".join(sasl.mechanisms) if sasl is not None else ""},
                          ).handlers()}
        if set(self._handlers) != set(APIS):
            raise RuntimeError(f"APIs without a handler or handlers without an API: {set(APIS) ^ set(self._handlers)}")

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

    # --- ApiVersions, Metadata, FindCoordinator, DescribeCluster ------------------------------------------
    def api_versions(self, request: Request) -> dict:
        keys = [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                for a in sorted(APIS.values(), key=lambda a: a.key)]
        # group.version 1 turns the consumer group protocol on (KIP-848), share.version 1 share groups (KIP-932),
        # transaction.version 2 transactions v2 (KIP-890: Kafka 4's clients then bump the epoch with every EndTxn);
        # a feature finalized at level 0 is not listed, as Kafka's controller leaves it out (the setting is read, not
        # the coordinator: ApiVersions opens no internal topic)
        supported = {"group.version": 1, "share.version": 1, "transaction.version": 2}
        finalized = {"group.version": 1, "share.version": 1,
                     "transaction.version": self.engine.coordinators.transaction_config.transaction_version}
        return {"error_code": UNSUPPORTED_VERSION if request.unsupported_version is not None else 0,
                "api_keys": keys,
                "supported_features": [{"name": f, "min_version": 0, "max_version": v} for f, v in supported.items()],
                "finalized_features_epoch": 1,
                "finalized_features": [{"name": f, "min_version_level": v, "max_version_level": v}
                                       for f, v in finalized.items() if v]}

    def _broker(self) -> dict:
        return {"node_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}

    def metadata(self, request: Request) -> dict:
        wanted = request.body["topics"]
        if wanted is None or (request.version == 0 and not wanted):
            names = self.engine.list_topics() + [t for t in COORDINATOR_TOPICS if t in self.engine.internal.internal_topics()]
            create = False
        else:
            names = [t["name"] if t["name"] is not None or request.version < 10 else t["topic_id"] for t in wanted]
            create = self.auto_create_topics and request.body["allow_auto_topic_creation"]
        topics = [self._topic_metadata(name, create) if not isinstance(name, uuid.UUID) else self._by_id(name)
                  for name in names]
        if request.version < 12:  # (a topic asked for by id alone has no name to give back before v12)
            for t in topics:
                t["name"] = t["name"] or ""
        return {"brokers": [self._broker()], "cluster_id": self.cluster_id, "controller_id": NODE_ID,
                "topics": topics}

    def _by_id(self, topic_id: uuid.UUID) -> dict:
        """A topic asked for by id alone (Metadata v10+, as the consumer group protocol's clients ask for the topics
        of their assignment): UNKNOWN_TOPIC_ID when no topic has it."""
        name = self.engine.admin.topic_named(topic_id_text(topic_id)) if topic_id != ZERO_UUID else None
        if name is None:
            return {"error_code": UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "partitions": []}
        return self._topic_metadata(name, create=False)

    def _topic_metadata(self, name: str | None, create: bool) -> dict:
        eng = self.engine
        if name in COORDINATOR_TOPICS:
            return self._internal_metadata(name, create)
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
        return {"error_code": 0, "name": name, "topic_id": topic_uuid(rec.topic_id),
                "partitions": _partitions_metadata(eng.partition, name, rec.partitions)}

    def _internal_metadata(self, name: str, create: bool) -> dict:
        """A coordinator's topic as Kafka describes it (is_internal); a missing one is created when the request may
        create topics, else UNKNOWN_TOPIC_OR_PARTITION."""
        eng = self.engine
        if name not in eng.internal.internal_topics():
            if not create:
                return {"error_code": UnknownTopicOrPartitionError.code, "name": name, "topic_id": ZERO_UUID,
                        "is_internal": True, "partitions": []}
            eng.internal.ensure_internal_topic(name)
        return {"error_code": 0, "name": name, "topic_id": topic_uuid(eng.admin.internal_topic_id(name)) or ZERO_UUID,
                "is_internal": True,
                "partitions": _partitions_metadata(eng.internal.internal_partition, name, eng.internal.internal_topics()[name])}

    def describe_topic_partitions(self, request: Request) -> dict:
        """Metadata's topics paged by partition: topics in name order (every topic when none is named) from the
        cursor's, at most `response_partition_limit` partitions, then a cursor to the next one."""
        b = request.body
        names = sorted({t["name"] for t in b["topics"]}) or self.engine.list_topics()
        cursor, room = b["cursor"], max(b["response_partition_limit"], 1)
        topics, next_cursor = [], None
        for name in names:
            if cursor is not None and name < cursor["topic_name"]:
                continue
            if room == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            t = self._topic_metadata(name, create=False)
            first = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
            parts = [dict(p, eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
                     for p in t["partitions"][first:]]
            if len(parts) > room:
                next_cursor = {"topic_name": name, "partition_index": parts[room]["partition_index"]}
                parts = parts[:room]
            room -= len(parts)
            topics.append({**t, "partitions": parts, "is_internal": False})
            if next_cursor is not None:
                break
        return {"topics": topics, "next_cursor": next_cursor}

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

    def describe_cluster(self, request: Request) -> dict:
        return {"error_code": 0, "cluster_id": self.cluster_id, "controller_id": NODE_ID,
                "brokers": [{"broker_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}]}

    # --- the data path --------------------------------------------------------------------------------------
    def produce(self, request: Request):
        b = request.body
        if request.state is not None:  # parked: its batches are appended, waiting for the ISR
            return self._produce_answer(request, 0)
        acks, timeout_ms = b["acks"], b["timeout_ms"]
        request.deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        responses, waits = [], []
        for topic in b["topic_data"]:
            parts = []
            for pd in topic["partition_data"]:
                out, info = self._append(request, topic["name"], pd["index"], pd["records"], acks)
                if info is not None and acks == -1:
                    waits.append((topic["name"], pd["index"], info, out))
                parts.append(out)
            responses.append({"name": topic["name"], "partition_responses": parts})
        if acks == 0:
            return None  # Kafka sends no response to acks=0
        request.state = (responses, waits)
        return self._produce_answer(request, min(max(timeout_ms, 0), FIRST_WAIT_MS))

    def _produce_answer(self, request: Request, wait_ms: int):
        """The Produce's answer once every acks=all batch has the ISR (waiting at most `wait_ms` in this thread),
        else Delayed: parked in the purgatory (engine.network.delayed_produce) until then or its deadline."""
        responses, waits = request.state
        until = time.monotonic() + wait_ms / 1000
        left = []
        for topic, index, info, out in waits:
            try:
                self.engine.wait_for_replication(topic, index, info, max(0, int((until - time.monotonic()) * 1000)))
            except KafkaTimeoutError as exc:
                if time.monotonic() < request.deadline:
                    left.append((topic, index, info, out))
                else:
                    _failed(out, exc)
            except KafkaError as exc:
                _failed(out, exc)
        if left:
            request.state = (responses, left)
            self.engine.replicas.wake_followers()  # (a wait cut short by the first one's budget drove none)
            return Delayed(request.deadline, source=DelayedProduce(
                self.engine, self._purgatory, [(t, i, info) for t, i, info, _ in left], request.deadline))
        return {"responses": responses}

    def _append(self, request: Request, topic: str, partition: int, records, acks: int) -> tuple[dict, object]:
        """(the partition's answer, the AppendInfo or None when the append was refused)."""
        out = {"index": partition, "error_code": 0, "base_offset": -1}
        try:
            if acks not in (-1, 0, 1):
                raise InvalidRequiredAcksError(f"acks={acks}")
            data = records if records is not None else b""
            self._txn.admit(request, topic, partition, data)
            info = self.engine.append(topic, partition, data, acks, wait=False)
            out["base_offset"] = info.first_offset
            out["log_append_time_ms"] = info.log_append_time
            out["log_start_offset"] = self.engine.partition(topic, partition).log_start_offset
            return out, info
        except KafkaError as exc:
            _failed(out, exc)
            return out, None

    def close(self) -> None:
        """Stop the purgatory's thread (the listener is closing)."""
        self._purgatory.close()

    def fetch(self, request: Request):
        b = request.body
        now = time.monotonic()
        if request.deadline is None:
            request.deadline = now + b["max_wait_ms"] / 1000
        deadline = request.deadline
        isolation = READ_COMMITTED if b["isolation_level"] == 1 else READ_UNCOMMITTED
        budget = b["max_bytes"] if b["max_bytes"] > 0 else 0x7FFFFFFF
        total = 0
        responses, keys = [], []
        for topic in b["topics"]:
            name = topic["topic"] if request.version < 13 else \
                self.engine.admin.topic_named(topic_id_text(topic["topic_id"]))
            parts = []
            for p in topic["partitions"]:
                if name is None:  # (v13+: an id no topic has)
                    parts.append({"partition_index": p["partition"], "error_code": UNKNOWN_TOPIC_ID,
                                  "high_watermark": -1, "records": b""})
                    continue
                entry, size = self._read(name, p, isolation, budget - total, first=total == 0)
                total += size
                parts.append(entry)
                keys.append((name, p["partition"]))
            responses.append({"topic": name, "topic_id": topic["topic_id"], "partitions": parts})
        if total < max(1, b["min_bytes"]) and now < deadline and b["max_wait_ms"] > 0:
            return Delayed(deadline, keys=keys)
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
                    if request.version < _TIMESTAMP_VERSIONS.get(p["timestamp"], 0):
                        raise UnsupportedVersionError(f"timestamp {p['timestamp']} needs ListOffsets v"
                                                      f"{_TIMESTAMP_VERSIONS[p['timestamp']]}")
                    part = self.engine.partition(topic["name"], p["partition_index"])
                    found = part.offset_for_timestamp(p["timestamp"], isolation)
                    if found is not None:
                        out["timestamp"], out["offset"] = found
                        if request.version >= 4:  # (a field of v4+ that is not ignorable)
                            out["leader_epoch"] = part.leader_epoch if found[1] >= 0 else -1
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


def _partitions_metadata(leader_of, name: str, count: int) -> list[dict]:
    """Metadata's partitions of topic `name`, each led by node 0 at its leader's epoch (`leader_of(name, p)`), or
    the error that finding its leader raised."""
    parts = []
    for p in range(count):
        try:
            epoch, code = leader_of(name, p).leader_epoch, 0
        except KafkaError as exc:
            epoch, code = -1, error_code(exc)
        parts.append({"error_code": code, "partition_index": p, "leader_id": NODE_ID if code == 0 else -1,
                      "leader_epoch": epoch, "replica_nodes": [NODE_ID], "isr_nodes": [NODE_ID]})
    return parts


def _cluster_id(path: str) -> str:
    """A stable id for the directory's one-node cluster (Kafka's cluster ids are 22-character base64 UUIDs)."""
    digest = zlib.crc32(path.encode()).to_bytes(4, "big") * 4
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _failed(out: dict, exc: KafkaError) -> None:
    """A Produce partition answer for a refused or unreplicated append: Kafka's error, no offset."""
    out.update(error_code=error_code(exc), error_message=str(exc), base_offset=-1,
               record_errors=[{"batch_index": i, "batch_index_error_message": why}
                              for i, why in getattr(exc, "record_errors", ())])
    out.pop("log_append_time_ms", None)
    out.pop("log_start_offset", None)
