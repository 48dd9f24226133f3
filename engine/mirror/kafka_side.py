"""A Kafka cluster as a mirror's source (a read_committed consumer) or destination (a transactional producer).

No file of its own: the destination's progress lives in its progress topic (engine.mirror.offset_sync).
Thread-safety: each object is used by the one mirror thread that made it.
"""
from __future__ import annotations

import contextlib

from engine.common import errors
import engine.mirror.offset_sync as offset_sync
from engine.mirror.cluster import Cluster, kafka, typed

FETCH_CONFIG = {"enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
                "auto.offset.reset": "earliest", "queued.max.messages.kbytes": 32768,
                "fetch.max.bytes": 16 << 20}


class KafkaSource:
    """Reads the source partitions from given positions: records of committed transactions only."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        ck = kafka()
        self._consumer = ck.Consumer(cluster.client_config(**{"group.id": f"kafkalog-mirror.{name}", **FETCH_CONFIG}))
        self._eof: set[tuple[str, int]] = set()

    def topics(self, wanted: list[str] | None) -> dict[str, int]:
        found = self.cluster.topics()
        if wanted is None:
            return {t: n for t, n in found.items() if t != offset_sync.PROGRESS_TOPIC}
        out = {}
        for topic in wanted:
            n = self.cluster.partitions(topic)
            if n is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist on {self.cluster.servers}")
            out[topic] = n
        return out

    def configs(self, topic: str) -> tuple[dict, str | None]:
        return self.cluster.topic_configs(topic)

    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        ck = kafka()
        self._eof.clear()
        self._consumer.assign([ck.TopicPartition(t, p, pos if pos >= 0 else ck.OFFSET_BEGINNING)
                               for (t, p), pos in positions.items()])

    def poll(self, max_records: int, timeout_s: float) -> tuple[dict, dict]:
        """({(topic, partition): (source offsets, [(key, value, headers, timestamp)])}, {(topic, partition): the
        position after what was read, where known beyond the last record: a partition's end when reached})."""
        ck = kafka()
        chunk: dict = {}
        ends: dict = {}
        try:
            messages = self._consumer.consume(max_records, timeout_s)
        except ck.KafkaException as exc:
            raise typed(exc, "reading the source") from None
        for m in messages:
            err = m.error()
            tp = (m.topic(), m.partition())
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    self._eof.add(tp)
                    ends[tp] = m.offset()
                    continue
                raise typed(err, f"reading {tp[0]}-{tp[1]}")
            self._eof.discard(tp)
            offsets, records = chunk.get(tp) or chunk.setdefault(tp, ([], []))
            offsets.append(m.offset())
            records.append((m.key(), m.value(), m.headers(), m.timestamp()[1]))
        return chunk, ends

    def at_end(self, tps) -> bool:
        return all(tp in self._eof for tp in tps)

    def end_offset(self, topic: str, partition: int) -> int:
        return self.cluster.end_offset(self._consumer, topic, partition)

    def committed(self, group: str, tps) -> dict[tuple[str, int], int]:
        return self.cluster.committed(group, list(tps))

    def close(self) -> None:
        self._consumer.close()


class KafkaSink:
    """Writes chunks into the cluster, each in one transaction with its progress records."""

    def __init__(self, cluster: Cluster, name: str, progress_topic: str, replication_factor: int = -1) -> None:
        self.cluster = cluster
        self.name = name
        self.progress_topic = progress_topic
        self.replication_factor = replication_factor
        self._producer = None
        self._offsets = None  # the consumer end_offset asks

    def prepare(self, topics: dict[str, tuple[int, dict]]) -> dict[str, str]:
        """Create the destination topics and the progress topic; {topic: note} for those not created as asked."""
        self.cluster.metadata()  # BrokerNotAvailableError now rather than a timeout per topic
        notes = {}
        for topic, (partitions, configs) in topics.items():
            note = self.cluster.create_topic(topic, partitions, configs, self.replication_factor)
            if note:
                notes[topic] = note
        note = self.cluster.create_topic(self.progress_topic, 1, {"cleanup.policy": "compact"}, self.replication_factor)
        if note:
            notes[self.progress_topic] = note
        return notes

    def begin(self) -> dict[tuple[str, int], offset_sync.PartitionProgress]:
        """Fence any older instance of this mirror (its open transaction is aborted), then read the progress it
        committed."""
        ck = kafka()
        if self._producer is not None:
            self._producer.flush(0)
        self._producer = ck.Producer(self.cluster.client_config(**{
            "transactional.id": f"kafkalog-mirror.{self.name}", "linger.ms": 5, "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 65536, "transaction.timeout.ms": 60_000}))
        try:
            self._producer.init_transactions(self.cluster.timeout_s)
        except ck.KafkaException as exc:
            raise typed(exc, f"initialising the mirror's transactions on {self.cluster.servers}") from None
        return self._read_progress()

    def _read_progress(self) -> dict[tuple[str, int], offset_sync.PartitionProgress]:
        ck = kafka()
        consumer = ck.Consumer(self.cluster.client_config(**{"group.id": f"kafkalog-mirror.{self.name}",
                                                             **FETCH_CONFIG, "fetch.wait.max.ms": 10}))
        pairs = []
        try:
            consumer.assign([ck.TopicPartition(self.progress_topic, 0, ck.OFFSET_BEGINNING)])
            while True:
                m = consumer.poll(self.cluster.timeout_s)
                if m is None:
                    raise errors.KafkaTimeoutError(f"reading {self.progress_topic}-0 on {self.cluster.servers}")
                if m.error() is not None:
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        break
                    raise typed(m.error(), f"reading {self.progress_topic}-0")
                pairs.append((m.key(), m.value()))
        finally:
            consumer.close()
        return offset_sync.load(self.name, pairs)

    def end_offset(self, topic: str, partition: int) -> int:
        """The destination partition's high watermark (where the first record copied into it will land, or after)."""
        if self._offsets is None:  # one client for every partition's, kept until close
            self._offsets = kafka().Consumer(self.cluster.client_config(**{
                "group.id": f"kafkalog-mirror.{self.name}", **FETCH_CONFIG}))
        return self.cluster.end_offset(self._offsets, topic, partition)

    def write(self, chunk: dict, syncs: dict[tuple[str, int], tuple[int, offset_sync.Sync]]) -> None:
        """Copy `chunk` ({(topic, partition): (source offsets, records)}) and the progress records `syncs`
        ({(topic, partition): (slot, Sync)}, whose runs and dest_next this fills in) in one transaction."""
        ck = kafka()
        producer = self._producer
        try:
            spans = self._copy(chunk, every=False)
            if spans is None:  # another producer wrote into a partition meanwhile: learn each record's offset
                producer.abort_transaction(self.cluster.timeout_s)
                spans = self._copy(chunk, every=True)
            for tp, (slot, sync) in syncs.items():
                if tp in spans:
                    sync.place(chunk[tp][0], spans[tp])
                producer.produce(self.progress_topic, sync.encode(), offset_sync.encode_key(self.name, *tp, slot), 0)
            producer.commit_transaction(self.cluster.timeout_s)
        except ck.KafkaException as exc:
            raise typed(exc, f"writing to {self.cluster.servers}") from None

    def _copy(self, chunk: dict, every: bool) -> dict | None:
        """Begin a transaction and produce the chunk; {(topic, partition): [(first destination offset, count)]},
        or None when a partition's records did not land on consecutive offsets. Only the first and last record
        of a partition report their offset unless `every` (a per-record report costs as much as the send)."""
        ck = kafka()
        producer = self._producer
        landed: dict[tuple[str, int], list] = {tp: [] for tp in chunk}
        failed: list = []

        def delivered(err, msg) -> None:
            if err is not None:
                failed.append(err)
            else:
                landed[(msg.topic(), msg.partition())].append(msg.offset())
        producer.begin_transaction()
        for (topic, partition), (_, records) in chunk.items():
            last = len(records) - 1
            for i, (key, value, headers, ts) in enumerate(records):
                report = delivered if every or i == 0 or i == last else None
                while True:
                    try:
                        producer.produce(topic, value, key, partition, on_delivery=report, timestamp=ts,
                                         headers=headers)
                        break
                    except BufferError:  # the client's queue is full: let it send
                        producer.poll(0.05)
            producer.poll(0)
        left = producer.flush(self.cluster.timeout_s)
        if left:  # not all delivered: the transaction is aborted, the mirror resumes from its committed progress
            with contextlib.suppress(ck.KafkaException):
                producer.abort_transaction(self.cluster.timeout_s)
            raise errors.KafkaTimeoutError(f"{left} records were not delivered to {self.cluster.servers} within "
                                           f"{self.cluster.timeout_s} s: the transaction is aborted")
        if failed:
            raise ck.KafkaException(failed[0])
        spans = {}
        for tp, offsets in landed.items():
            n = len(chunk[tp][0])
            if every:
                spans[tp] = [(o, 1) for o in offsets]
            elif offsets[-1] - offsets[0] == n - 1:
                spans[tp] = [(offsets[0], n)]
            else:
                return None
        return spans

    def committed(self, group: str, tps) -> dict[tuple[str, int], int]:
        return self.cluster.committed(group, list(tps))

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.cluster.commit(group, offsets)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(0)
            self._producer = None
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
