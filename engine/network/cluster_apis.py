"""The listener's cluster-operation APIs, answered as a one-node cluster answers them: ElectLeaders (node 0 already
leads every partition: ELECTION_NOT_NEEDED), AlterPartitionReassignments and ListPartitionReassignments (every
replica is on node 0, so moving one there is done and no reassignment is ever in progress), DescribeLogDirs (the
engine's directory, each partition's size) and AlterReplicaLogDirs (a replica may only "move" to the directory it is
in). Thread-safety: the engine's (handlers run on the listener's request handler threads at once)."""
from __future__ import annotations

import os
from typing import Callable

from engine.common.errors import InvalidTopicError, UnknownTopicOrPartitionError
from engine.network.api_common import COORDINATOR_TOPICS, NODE_ID, check_assignment, code_of, error_of
from engine.protocol import Request
from engine.protocol import admin_messages as am

LOG_DIR_NOT_FOUND, ELECTION_NOT_NEEDED, NO_REASSIGNMENT_IN_PROGRESS = 57, 84, 85


class ClusterApis:
    def __init__(self, engine) -> None:
        self.engine = engine

    def handlers(self) -> dict[int, Callable]:
        return {am.ELECT_LEADERS.key: self.elect_leaders, am.DESCRIBE_LOG_DIRS.key: self.describe_log_dirs,
                am.ALTER_REPLICA_LOG_DIRS.key: self.alter_replica_log_dirs,
                am.ALTER_PARTITION_REASSIGNMENTS.key: self.alter_partition_reassignments,
                am.LIST_PARTITION_REASSIGNMENTS.key: self.list_partition_reassignments}

    def _partition(self, topic: str, partition: int):
        """The partition, an internal topic's included (Kafka describes those too)."""
        if topic in self.engine.internal.internal_topics():
            return self.engine.internal.internal_partition(topic, partition)
        return self.engine.partition(topic, partition)

    def _code(self, topic: str, partition: int) -> int:
        """0 when the partition exists, else its error's code."""
        return code_of(lambda: self._partition(topic, partition))

    def _wanted(self, asked: list[dict] | None) -> list[tuple[str, list[int]]]:
        """(topic, partitions) named by a request's `topic`/`partitions` entries; None: every partition, the internal
        topics' included."""
        if asked is None:
            return [(t, list(range(self.engine.partitions_for(t)))) for t in self.engine.list_topics()] + \
                [(t, list(range(n))) for t, n in sorted(self.engine.internal.internal_topics().items())
                 if t in COORDINATOR_TOPICS]
        return [(t["topic"], t["partitions"]) for t in asked]

    def elect_leaders(self, request: Request) -> dict:
        asked = request.body["topic_partitions"]
        results = []
        for topic, partitions in self._wanted(asked):
            out = []
            for p in partitions:
                code = self._code(topic, p) or ELECTION_NOT_NEEDED
                if asked is None and code == ELECTION_NOT_NEEDED:
                    continue  # (an election of every partition reports only those it changed, as Kafka's)
                why = f"node {NODE_ID} already leads {topic}-{p}: it is every partition's only replica"
                out.append({"partition_id": p, "error_code": code,
                            "error_message": why if code == ELECTION_NOT_NEEDED else None})
            if out:
                results.append({"topic": topic, "partition_result": out})
        return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}

    def alter_partition_reassignments(self, request: Request) -> dict:
        responses = []
        for t in request.body["topics"]:
            out = []
            for p in t["partitions"]:
                code, message = self._code(t["name"], p["partition_index"]), None
                if not code and p["replicas"] is None:
                    code, message = NO_REASSIGNMENT_IN_PROGRESS, "no reassignment is in progress to cancel"
                elif not code:  # every replica is on node 0 already: moving it there is done
                    code, message = error_of(lambda p=p: check_assignment([p["replicas"]]))
                out.append({"partition_index": p["partition_index"], "error_code": code, "error_message": message})
            responses.append({"name": t["name"], "partitions": out})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}

    def list_partition_reassignments(self, request: Request) -> dict:
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}  # never one ongoing

    def describe_log_dirs(self, request: Request) -> dict:
        topics = []
        for topic, partitions in self._wanted(request.body["topics"]):
            parts = []
            for p in partitions:
                try:
                    size = self._partition(topic, p).log.size_in_bytes()
                except (UnknownTopicOrPartitionError, InvalidTopicError):
                    continue  # (Kafka describes the partitions the directory holds)
                parts.append({"partition_index": p, "partition_size": size, "offset_lag": 0, "is_future_key": False})
            if parts:
                topics.append({"name": topic, "partitions": parts})
        disk = os.statvfs(self.engine.path)
        return {"throttle_time_ms": 0, "error_code": 0, "results": [
            {"error_code": 0, "log_dir": os.path.abspath(self.engine.path), "topics": topics,
             "total_bytes": disk.f_blocks * disk.f_frsize, "usable_bytes": disk.f_bavail * disk.f_frsize}]}

    def alter_replica_log_dirs(self, request: Request) -> dict:
        here = os.path.realpath(self.engine.path)
        results: dict[str, list[dict]] = {}
        for d in request.body["dirs"]:
            same = os.path.realpath(d["path"]) == here
            for t in d["topics"]:
                for p in t["partitions"]:
                    code = self._code(t["name"], p) if same else LOG_DIR_NOT_FOUND
                    results.setdefault(t["name"], []).append({"partition_index": p, "error_code": code})
        return {"throttle_time_ms": 0, "results": [{"topic_name": name, "partitions": parts}
                                                   for name, parts in results.items()]}
