"""Mirroring between a kafkalog directory and a Kafka cluster, both ways, exactly once (`kafkalog mirror`).

    from engine import mirror
    summary = mirror.to_kafka("data", {"bootstrap.servers": "kafka:9092"}, name="edge-7", topics=["events"])
    summary = mirror.from_kafka({"bootstrap.servers": "kafka:9092"}, "data", name="pull", groups=["billing"])

Every record goes to the same partition number with its key, value, headers and timestamp (as CreateTime); control
batches and aborted transactions are not copied. Destination topics are created with the source's partition count and
its topic configs where the destination takes them. The cluster is reached through confluent-kafka (librdkafka); the
layout of the progress each transaction carries is in engine.mirror.offset_sync, the loop in engine.mirror.mirror.
"""
from __future__ import annotations

import contextlib

import engine
from engine.mirror.cluster import Cluster
from engine.mirror.kafka_side import KafkaSink, KafkaSource
from engine.mirror.kafkalog_side import KafkalogSink, KafkalogSource
from engine.mirror.mirror import Mirror, MirrorSummary
from engine.mirror.offset_sync import PROGRESS_TOPIC

__all__ = ["to_kafka", "from_kafka", "Mirror", "MirrorSummary", "PROGRESS_TOPIC"]


def to_kafka(log, cluster: dict, *, name: str, topics: list[str] | None = None, groups: list[str] = (),
             follow: bool = False, progress_topic: str = PROGRESS_TOPIC, replication_factor: int = -1,
             timeout_s: float = 30.0, **options) -> MirrorSummary:
    """Copy a kafkalog directory's topics (`log`: a path or an open Engine) into the cluster whose client config
    is `cluster`; with `follow`, keep copying until stopped (Ctrl-C, SIGTERM). `groups`: consumer groups whose
    committed offsets are translated to the cluster. `options`: Mirror's (max_records, max_bytes, ...)."""
    kafka = Cluster(cluster, timeout_s)
    try:
        return _mirror(log, lambda eng: (KafkalogSource(eng, name), KafkaSink(kafka, name, progress_topic,
                                                                                 replication_factor)),
                       name=name, topics=topics, groups=groups, follow=follow, **options)
    finally:
        kafka.close()


def from_kafka(cluster: dict, log, *, name: str, topics: list[str] | None = None, groups: list[str] = (),
               follow: bool = False, progress_topic: str = PROGRESS_TOPIC, timeout_s: float = 30.0,
               **options) -> MirrorSummary:
    """Copy the cluster's topics (all but internal ones unless `topics`) into a kafkalog directory; as to_kafka."""
    kafka = Cluster(cluster, timeout_s)
    try:
        return _mirror(log, lambda eng: (KafkaSource(kafka, name), KafkalogSink(eng, name, progress_topic)),
                       name=name, topics=topics, groups=groups, follow=follow, **options)
    finally:
        kafka.close()


def _mirror(log, ends, **options) -> MirrorSummary:
    """Open `log` unless it is an Engine, make the source and sink (`ends(engine)`), run, close what was opened."""
    with contextlib.ExitStack() as stack:
        eng = stack.enter_context(engine.open(log)) if isinstance(log, str) else log
        source, sink = ends(eng)
        stack.callback(source.close)
        stack.callback(sink.close)
        return run(Mirror(source, sink, **options))


def run(mirror: Mirror) -> MirrorSummary:
    """Run `mirror`, stopping it cleanly on SIGTERM (and Ctrl-C) when called from the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return mirror.run()
    previous = signal.signal(signal.SIGTERM, lambda *_: mirror.stop())
    try:
        return mirror.run()
    except KeyboardInterrupt:
        mirror.stop()
        return mirror.summary
    finally:
        signal.signal(signal.SIGTERM, previous)
