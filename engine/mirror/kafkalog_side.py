"""A kafkalog directory as a mirror's source (a read_committed consumer) or destination (a transactional producer).

No file of its own: the destination's progress lives in its progress topic (engine.mirror.offset_sync), written in
the same kafkalog transaction as the records; a mirror killed mid-transaction leaves it open, and the next instance's
init_transactions aborts it. Thread-safety: each object is used by the one mirror thread that made it.
"""
from __future__ import annotations

from engine.common import errors
from engine.common.structs import OffsetAndMetadata, TopicPartition
import engine.mirror.offset_sync as offset_sync
from engine.mirror.cluster import NOT_COPIED
from engine.segments.log_config import LogConfig

CHUNK_FETCH_BYTES = 16 << 20


class KafkalogSource:
    def __init__(self, eng, name: str) -> None:
        self.engine = eng
        # from the log start when the progress points below it (retention removed records before they were copied)
        self._consumer = eng.consumer(isolation_level="read_committed", enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_bytes=CHUNK_FETCH_BYTES,
                                      max_partition_fetch_bytes=CHUNK_FETCH_BYTES, client_id=f"kafkalog-mirror.{name}")
        self._ends: dict[tuple[str, int], int] = {}

    def topics(self, wanted: list[str] | None) -> dict[str, int]:
        names = [t for t in self.engine.list_topics() if t != offset_sync.PROGRESS_TOPIC] if wanted is None else wanted
        out = {}
        for topic in names:
            try:
                out[topic] = self.engine.partitions_for(topic)
            except errors.UnknownTopicOrPartitionError:
                raise errors.UnknownTopicOrPartitionError(
                    f"topic {topic!r} does not exist in {self.engine.path}") from None
        return out

    def configs(self, topic: str) -> tuple[dict, str | None]:
        return dict(self.engine.describe_topic(topic).overrides or {}), None

    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        tps = [TopicPartition(t, p) for t, p in positions]
        self._consumer.assign(tps)
        for tp in tps:
            pos = positions[tuple(tp)]
            if pos >= 0:
                self._consumer.seek(tp, pos)
            else:
                self._consumer.seek_to_beginning(tp)
        self._ends = {tuple(tp): end for tp, end in self._consumer.end_offsets(tps).items()}

    def poll(self, max_records: int, timeout_s: float) -> tuple[dict, dict]:
        got = self._consumer.poll(int(timeout_s * 1000), max_records=max_records)
        chunk = {}
        for tp, recs in got.items():
            chunk[tuple(tp)] = ([r.offset for r in recs],
                                [(r.key, r.value, r.headers or None, r.timestamp) for r in recs])
        ends = {tuple(tp): self._consumer.position(tp) for tp in self._consumer.assignment()}
        return chunk, ends

    def at_end(self, tps) -> bool:
        """Whether every partition was read up to where its read_committed end was when assigned."""
        return all(self._consumer.position(TopicPartition(*tp)) >= self._ends.get(tp, 0) for tp in tps)

    def end_offset(self, topic: str, partition: int) -> int:
        tp = TopicPartition(topic, partition)
        return self._consumer.end_offsets([tp])[tp]

    def committed(self, group: str, tps) -> dict[tuple[str, int], int]:
        return _committed(self.engine, group, tps)

    def close(self) -> None:
        self._consumer.close(autocommit=False)


class KafkalogSink:
    def __init__(self, eng, name: str, progress_topic: str) -> None:
        self.engine = eng
        self.name = name
        self.progress_topic = progress_topic
        self._producer = None

    def prepare(self, topics: dict[str, tuple[int, dict]]) -> dict[str, str]:
        notes = {}
        for topic, (partitions, configs) in topics.items():
            kept, dropped = _supported(configs)
            if dropped:
                notes[topic] = "configs not copied: " + "; ".join(dropped)
            if topic in self.engine.list_topics():
                have = self.engine.partitions_for(topic)
                if have < partitions:
                    raise errors.InvalidPartitionsError(
                        f"topic {topic!r} in {self.engine.path} has {have} partitions, the source has {partitions}: "
                        f"records keep their partition number")
                continue
            self.engine.create_topic(topic, partitions, config=kept)
        if self.progress_topic not in self.engine.list_topics():
            self.engine.create_topic(self.progress_topic, 1, config={"cleanup.policy": "compact"})
        return notes

    def begin(self) -> dict[tuple[str, int], offset_sync.PartitionProgress]:
        if self._producer is not None:
            self._producer.close()
        self._producer = self.engine.producer(transactional_id=f"kafkalog-mirror.{self.name}", batch_size=1 << 20,
                                              linger_ms=0, client_id=f"kafkalog-mirror.{self.name}")
        self._producer.init_transactions()
        pairs = []
        with self.engine.consumer(isolation_level="read_committed", enable_auto_commit=False) as consumer:
            tp = TopicPartition(self.progress_topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = consumer.end_offsets([tp])[tp]
            while consumer.position(tp) < end:
                pairs += [(r.key, r.value) for r in consumer.poll(0, max_records=10_000).get(tp, ())]
        return offset_sync.load(self.name, pairs)

    def end_offset(self, topic: str, partition: int) -> int:
        return self.engine.describe_topic(topic).partitions[partition].high_watermark

    def write(self, chunk: dict, syncs: dict) -> None:
        """As KafkaSink.write, in one kafkalog transaction."""
        producer = self._producer
        try:
            producer.begin_transaction()
            for tp, (slot, sync) in syncs.items():
                if tp in chunk:
                    spans = producer.send_batch(tp[0], chunk[tp][1], tp[1])
                    sync.place(chunk[tp][0], [(s.base_offset, s.record_count) for s in spans])
                producer.send(self.progress_topic, sync.encode(), offset_sync.encode_key(self.name, *tp, slot),
                              partition=0)
            producer.commit_transaction()
        except errors.KafkaError:
            try:
                producer.abort_transaction()
            except errors.KafkaError:
                pass  # the next begin() fences and aborts it
            raise

    def committed(self, group: str, tps) -> dict[tuple[str, int], int]:
        return _committed(self.engine, group, tps)

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.engine.groups.commit_offsets(group, {TopicPartition(t, p): OffsetAndMetadata(o)
                                                  for (t, p), o in offsets.items()})

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None


def _committed(eng, group: str, tps) -> dict[tuple[str, int], int]:
    """The group's committed offsets in the directory (partitions without one left out)."""
    out = {}
    for t, p in tps:
        found = eng.committed(group, TopicPartition(t, p))
        if found is not None:
            out[(t, p)] = found.offset
    return out


def _supported(configs: dict) -> tuple[dict, list[str]]:
    """The source's topic configs kafkalog takes, and why each other one is left out."""
    kept, dropped = {}, []
    for name, value in configs.items():
        if name in NOT_COPIED:
            continue
        try:
            LogConfig.from_dict({name: value})
        except errors.KafkaError as exc:
            dropped.append(f"{name}={value} ({exc})")
            continue
        kept[name] = value
    return kept, dropped
