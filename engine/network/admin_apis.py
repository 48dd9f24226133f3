"""The listener's admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs and
IncrementalAlterConfigs, answered from the engine's topic admin (engine.admin_manager). A one-node listener has one
broker, so a manual replica assignment is accepted only when it places each partition's one replica on node 0
(INVALID_REPLICA_ASSIGNMENT otherwise). DescribeConfigs gives each config Kafka's type and source: a topic's
overrides are dynamic topic configs, the rest defaults; the node's listener settings are static broker configs.
Thread-safety: the engine's (handlers run on the listener's request handler threads at once)."""
from __future__ import annotations

from typing import Callable

from engine.common.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    PolicyViolationError,
    TopicAlreadyExistsError,
)
from engine.network.api_common import (
    INVALID_CONFIG,
    NODE_ID,
    check_assignment,
    error_code,
    error_of,
    partition_count,
)
from engine.protocol import Request
from engine.protocol import admin_messages as am
from engine.segments.log_config import LogConfig
from engine.segments.partition_metadata import topic_uuid

TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32  # DescribeConfigs' resource types
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3      # IncrementalAlterConfigs' operations
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, DYNAMIC_GROUP_CONFIG = 1, 4, 5, 8  # config sources
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7          # and config types
# Kafka's controller writes one metadata record per topic, partition and config and refuses an operation of more
# than this many (QuorumController.MAX_RECORDS_PER_USER_OP): the whole request fails with POLICY_VIOLATION
MAX_RECORDS_PER_USER_OP = 10_000
EXCESSIVE = "Unable to perform excessively large batch operation."
_INT_CONFIGS = {"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes", "node.id",
                "num.partitions", "min.insync.replicas", "compression.gzip.level", "compression.lz4.level",
                "compression.zstd.level"}
_LIST_CONFIGS = {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                 "advertised.listeners", "sasl.enabled.mechanisms"}


class AdminApis:
    def __init__(self, engine, default_partitions: int, static_configs: dict) -> None:
        self.engine, self.default_partitions = engine, default_partitions
        self.static_configs = static_configs  # the node's own settings, described as STATIC_BROKER_CONFIG

    def handlers(self) -> dict[int, Callable]:
        return {am.CREATE_TOPICS.key: self.create_topics, am.DELETE_TOPICS.key: self.delete_topics,
                am.CREATE_PARTITIONS.key: self.create_partitions, am.DELETE_RECORDS.key: self.delete_records,
                am.DESCRIBE_CONFIGS.key: self.describe_configs,
                am.INCREMENTAL_ALTER_CONFIGS.key: self.incremental_alter_configs}

    def create_topics(self, request: Request) -> dict:
        b = request.body
        internal = self.engine.internal.internal_topics()
        existing = set(self.engine.list_topics()) | set(internal)
        records = sum(1 + len(t["configs"]) + (len(t["assignments"]) or (
            t["num_partitions"] if t["num_partitions"] != -1 else self.default_partitions))
            for t in b["topics"] if t["name"] not in existing)
        if records > MAX_RECORDS_PER_USER_OP:
            return {"topics": [{"name": t["name"], "error_code": PolicyViolationError.code, "error_message": EXCESSIVE}
                               for t in b["topics"]]}
        out = []
        for t in b["topics"]:
            entry = {"name": t["name"], "error_code": 0, "error_message": None}
            try:
                config = {c["name"]: c["value"] for c in t["configs"]}
                partitions = t["num_partitions"] if t["num_partitions"] != -1 else self.default_partitions
                rf = t["replication_factor"] if t["replication_factor"] != -1 else 1
                if t["assignments"]:
                    if t["num_partitions"] != -1 or t["replication_factor"] != -1:
                        raise InvalidRequestError("both a replica assignment and a partition count or replication "
                                                  "factor were given")
                    check_assignment([a["broker_ids"] for a in sorted(t["assignments"],
                                                                        key=lambda a: a["partition_index"])],
                                      [a["partition_index"] for a in t["assignments"]])
                    partitions = len(t["assignments"])
                if t["name"] in internal:  # (the engine's own topics are not in its catalogue API)
                    raise TopicAlreadyExistsError(f"Topic '{t['name']}' already exists.")
                if b["validate_only"]:
                    LogConfig.from_dict(config, base=self.engine.defaults)
                    if self.engine.list_topics().count(t["name"]):
                        raise TopicAlreadyExistsError(f"topic {t['name']!r} already exists")
                else:
                    self.engine.create_topic(t["name"], partitions, rf, config)
                    entry["topic_id"] = topic_uuid(self.engine.admin.topic(t["name"]).topic_id)
                entry.update(num_partitions=partitions, replication_factor=rf)
            except (KafkaError, ValueError, TypeError) as exc:
                entry.update(error_code=error_code(exc) if isinstance(exc, KafkaError) else INVALID_CONFIG,
                             error_message=str(exc))
            out.append(entry)
        return {"topics": out}

    def delete_topics(self, request: Request) -> dict:
        out = []
        for name in request.body["topic_names"]:
            code, message = error_of(lambda name=name: self.engine.delete_topic(name))
            out.append({"name": name, "error_code": code, "error_message": message})
        return {"responses": out}

    def create_partitions(self, request: Request) -> dict:
        b = request.body
        # (an unknown topic adds no partition: its own error is answered below)
        if sum(max(0, t["count"] - partition_count(self.engine, t["name"], t["count"])) for t in b["topics"]) > \
                MAX_RECORDS_PER_USER_OP:
            return {"results": [{"name": t["name"], "error_code": PolicyViolationError.code, "error_message": EXCESSIVE}
                                for t in b["topics"]]}
        out = []
        for t in b["topics"]:
            def grow(t=t):
                current = self.engine.partitions_for(t["name"])
                if t["count"] <= current:
                    raise InvalidPartitionsError(f"topic {t['name']!r} has {current} partitions already")
                if t["assignments"] is not None:
                    if len(t["assignments"]) != t["count"] - current:
                        raise InvalidReplicaAssignmentError(f"{len(t['assignments'])} replica assignments for "
                                                            f"{t['count'] - current} new partitions")
                    check_assignment([a["broker_ids"] for a in t["assignments"]])
                if not b["validate_only"]:
                    self.engine.create_partitions(t["name"], t["count"])
            code, message = error_of(grow)
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
                    effective, overrides = {**self.engine.defaults.to_dict(), **self.static_configs}, {}
                elif r["resource_type"] == GROUP_RESOURCE:
                    effective, overrides = self.engine.describe_group_configs(r["resource_name"])
                else:
                    raise InvalidRequestError(f"resource type {r['resource_type']} {r['resource_name']!r} is not "
                                              f"described by a one-node listener")
                keys = r["configuration_keys"]
                for name, value in sorted(effective.items()):
                    if keys is not None and name not in keys:
                        continue
                    static = r["resource_type"] == BROKER_RESOURCE and name in self.static_configs
                    config = {"name": name, "value": _config_text(value), "read_only": static, "is_sensitive": False,
                              "config_source": STATIC_BROKER_CONFIG if static else DEFAULT_CONFIG
                              if name not in overrides else DYNAMIC_GROUP_CONFIG
                              if r["resource_type"] == GROUP_RESOURCE else DYNAMIC_TOPIC_CONFIG,
                              "config_type": _config_type(name, value)}
                    if request.version == 0:  # (v1 replaced it with config_source)
                        config["is_default"] = name not in overrides and not static
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
                if r["resource_type"] == GROUP_RESOURCE:
                    return self._alter_group(r, b["validate_only"])
                if r["resource_type"] != TOPIC_RESOURCE:
                    raise InvalidRequestError("only topic and group configs are altered through a one-node listener")
                described = self.engine.describe_topic(r["resource_name"])
                current = described.overrides
                changes = {}
                for c in r["configs"]:
                    op, name = c["config_operation"], c["name"]
                    if op in (APPEND, SUBTRACT):
                        changes[name] = _list_change(name, op, changes.get(name, described.config.get(name)),
                                                     c["value"])
                    elif op in (SET, DELETE):
                        changes[name] = c["value"] if op == SET else None
                    else:
                        raise InvalidRequestError(f"unknown config operation {op} on {name!r}")
                if b["validate_only"]:
                    LogConfig.from_dict({k: v for k, v in {**current, **changes}.items() if v is not None},
                                        base=self.engine.defaults)
                else:
                    self.engine.alter_topic_config(r["resource_name"], changes)
            code, message = error_of(alter)
            out.append({"error_code": code, "error_message": message, "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"]})
        return {"responses": out}


    def _alter_group(self, r: dict, validate_only: bool) -> None:
        changes = {}
        for c in r["configs"]:
            op, name = c["config_operation"], c["name"]
            if op in (APPEND, SUBTRACT):
                _list_change(name, op, None, c["value"])  # (raises: no group config is a list)
            elif op not in (SET, DELETE):
                raise InvalidRequestError(f"unknown config operation {op} on {name!r}")
            changes[name] = c["value"] if op == SET else None
        self.engine.alter_group_configs(r["resource_name"], changes, validate_only=validate_only)


def _list_change(name: str, op: int, current, value: str | None) -> str:
    """A list config after IncrementalAlterConfigs' APPEND (items not yet in it added at the end) or SUBTRACT
    (items removed), as Kafka applies them; only list configs take them (InvalidConfigurationError)."""
    if name not in _LIST_CONFIGS:
        verb = "append" if op == APPEND else "subtract"
        raise InvalidConfigurationError(f"Config value {verb} is not allowed for config key: {name}")
    items = [i.strip() for i in (current if isinstance(current, str) else ",".join(current or ())).split(",")
             if i.strip()]
    given = [i.strip() for i in (value or "").split(",") if i.strip()]
    if op == APPEND:
        items += [i for i in given if i not in items]
    else:
        items = [i for i in items if i not in given]
    return ",".join(items)


def _config_type(name: str, value) -> int:
    """Kafka's ConfigType of a config, from its value's type and, for numbers and strings, its name."""
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, int):
        return INT if name in _INT_CONFIGS else LONG
    return LIST if name in _LIST_CONFIGS else STRING


def _config_text(value) -> str | None:
    """A config value as Kafka writes it (booleans in lower case)."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)
