"""The listener's transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
and the describing ones (DescribeProducers, DescribeTransactions, ListTransactions), answered from the engine's
transaction coordinator (engine.transactions) and partitions' producer state, and the transaction verification of
a transactional Produce (KIP-890, `admit`).
Versions as Kafka reads them: EndTxn v5+, Produce v12+ and TxnOffsetCommit v5+ come from a transactions v2 client
(EndTxn bumps its epoch and answers the next one; Produce and TxnOffsetCommit add their partition to the
transaction themselves); before them, a producer's first batch in a partition must be in its transaction, or it is
TRANSACTION_ABORTABLE (Produce v11, TxnOffsetCommit v4) or INVALID_TXN_STATE (older versions, which do not know it).
Thread-safety: the engine's."""
from __future__ import annotations

from typing import Callable

from engine.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
)
from engine.common.structs import ConsumerGroupMetadata, TopicPartition
from engine.network.api_common import (
    OPERATION_NOT_ATTEMPTED,
    code_of,
    commit_split,
    committed_offsets,
    error_code,
    partition_codes,
)
from engine.groups import offsets
from engine.protocol import Request
from engine.protocol import messages as m
from engine.record.batch_format import HEADER_SIZE, BatchHeader
from engine.txn.transaction_coordinator import TV2

PRODUCER_FENCED, INVALID_PRODUCER_EPOCH = ProducerFencedError.code, InvalidProducerEpochError.code
# KIP-588: the versions before these learnt no PRODUCER_FENCED; Kafka answers them INVALID_PRODUCER_EPOCH instead
FENCED_SINCE = {m.INIT_PRODUCER_ID.key: 4, m.ADD_PARTITIONS_TO_TXN.key: 2, m.ADD_OFFSETS_TO_TXN.key: 2,
                m.END_TXN.key: 2}

# the first versions of a transactions v2 client (KIP-890's second part) and of one that knows TRANSACTION_ABORTABLE
ADDS_ITSELF = {m.PRODUCE.key: 12, m.TXN_OFFSET_COMMIT.key: 5}
ABORTABLE_SINCE = {m.PRODUCE.key: 11, m.TXN_OFFSET_COMMIT.key: 4}
TRANSACTION_STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "PrepareEpochFence", "Dead"}


class TxnApis:
    def __init__(self, engine) -> None:
        self.engine = engine

    def handlers(self) -> dict[int, Callable]:
        return {key: self._kip588(handler) for key, handler in self._handlers().items()}

    @staticmethod
    def _kip588(handler: Callable[[Request], dict]) -> Callable[[Request], dict]:
        """`handler` with PRODUCER_FENCED answered INVALID_PRODUCER_EPOCH to the versions before KIP-588."""
        def answer(request: Request) -> dict:
            response = handler(request)
            since = FENCED_SINCE.get(request.api.key)
            if since is None or request.version >= since:
                return response
            if response.get("error_code") == PRODUCER_FENCED:
                response["error_code"] = INVALID_PRODUCER_EPOCH
            for topic in response.get("results_by_topic_v3_and_below", ()):
                for p in topic["results_by_partition"]:
                    if p["partition_error_code"] == PRODUCER_FENCED:
                        p["partition_error_code"] = INVALID_PRODUCER_EPOCH
            return response
        return answer

    def _handlers(self) -> dict[int, Callable]:
        return {m.INIT_PRODUCER_ID.key: self.init_producer_id,
                m.ADD_PARTITIONS_TO_TXN.key: self.add_partitions_to_txn,
                m.ADD_OFFSETS_TO_TXN.key: self.add_offsets_to_txn, m.END_TXN.key: self.end_txn,
                m.TXN_OFFSET_COMMIT.key: self.txn_offset_commit, m.DESCRIBE_PRODUCERS.key: self.describe_producers,
                m.DESCRIBE_TRANSACTIONS.key: self.describe_transactions,
                m.LIST_TRANSACTIONS.key: self.list_transactions}

    def admit(self, request: Request, topic: str, partition: int, data) -> None:
        """Transaction verification before a Produce's batches are appended (engine.transactions.admit): nothing for
        a non-transactional request or batch."""
        tid = request.body["transactional_id"]
        if tid is None or len(data) < HEADER_SIZE:
            return
        head = BatchHeader(data)
        if head.is_transactional and not head.is_control:
            self._verify(request, tid, (topic, partition), head.producer_id, head.producer_epoch,
                         self.engine.partition(topic, partition))

    def _verify(self, request: Request, tid: str, tp: tuple[str, int], producer_id: int, producer_epoch: int,
                part) -> None:
        key = request.api.key
        try:
            self.engine.transactions.admit(tid, tp, producer_id, producer_epoch, part.log.producer_state,
                                           add=request.version >= ADDS_ITSELF[key])
        except TransactionAbortableError as exc:
            if request.version >= ABORTABLE_SINCE[key]:
                raise
            raise InvalidTxnStateError(f"Partition was not added to the transaction ({exc.message})") from None

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
            code = code_of(lambda: self.engine.transactions.coordinator.add_partitions(
                b["v3_and_below_transactional_id"], b["v3_and_below_producer_id"], b["v3_and_below_producer_epoch"],
                wanted))
            codes = dict.fromkeys(wanted, code)
        return {"results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": codes[TopicPartition(t["name"], p)]}
                for p in t["partitions"]]} for t in b["v3_and_below_topics"]]}

    def add_offsets_to_txn(self, request: Request) -> dict:
        b = request.body
        return {"error_code": code_of(lambda: self.engine.transactions.add_offsets(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["group_id"]))}

    def end_txn(self, request: Request) -> dict:
        b = request.body
        try:  # (v5+: transactions v2, answered with the producer id and epoch to use next)
            pid, epoch = self.engine.transactions.coordinator.end_txn(
                b["transactional_id"], b["producer_id"], b["producer_epoch"], b["committed"],
                TV2 if request.version >= 5 else 0)
            return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}
        except KafkaError as exc:
            return {"error_code": error_code(exc), "producer_id": -1, "producer_epoch": -1}

    def txn_offset_commit(self, request: Request) -> dict:
        b = request.body
        committed, unknown = commit_split(self.engine, committed_offsets(b["topics"]))
        member = ConsumerGroupMetadata(b["group_id"], b["generation_id"], b["member_id"], b["group_instance_id"])
        pid, epoch = b["producer_id"], b["producer_epoch"]

        def commit() -> None:
            if committed:  # the group's partition must be in the transaction (v5+ adds it), as a Produce's
                txns = self.engine.transactions
                txns.ensure_topic(offsets.TOPIC)
                tp = (offsets.TOPIC, offsets.partition(b["group_id"]))
                self._verify(request, b["transactional_id"], tp, pid, epoch,
                             self.engine.internal.internal_partition(*tp))
            self.engine.groups.commit_transactional(member, committed, pid, epoch)
        return {"topics": partition_codes(b["topics"], code_of(commit), unknown)}

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
        states, pids = set(b["state_filters"]), set(b["producer_id_filters"])
        now = self.engine.clock.time_ms()
        listed = [d for d in self.engine.transactions.coordinator.list()
                  if (not states or d.state in states) and (not pids or d.producer_id in pids)
                  and (b["duration_filter"] < 0 or d.start_ms >= 0 and now - d.start_ms >= b["duration_filter"])]
        return {"error_code": 0, "unknown_state_filters": sorted(states - TRANSACTION_STATES),
                "transaction_states": [{"transactional_id": d.transactional_id, "producer_id": d.producer_id,
                                        "transaction_state": d.state} for d in listed]}
