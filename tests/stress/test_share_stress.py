"""Share groups under concurrency: producers appending while many in-process share consumers, each on a thread of its
own, acknowledge at random (accept, release, reject), crash (stop without closing or heartbeating: their locks and
then their sessions time out, both short here), leave and join, for KAFKALOG_STRESS_SECONDS. Seeded
(KAFKALOG_STRESS_SEED).

Checked against a model built from what every member saw and did, record by record:
- a record's deliveries are counted 1, 2, 3, ... with none repeated and none skipped (each acquisition by one member
  at a time raises the count once);
- a record accepted or rejected is never delivered again (its last delivery is the one acknowledged), and none is
  delivered more than `limit` times;
- at the end (the survivors drain the queue, accepting everything): every record produced was accepted once, or
  rejected, or reached the delivery count limit; the share-partitions' start offsets are at the log end;
- only typed errors, and no thread left running after the engine closes.
"""
from __future__ import annotations

import os
import random
import threading
import time

import engine
from engine.clients.share_consumer import AcknowledgeType
from engine.common.errors import KafkaError

SECONDS = float(os.environ.get("KAFKALOG_STRESS_SECONDS", "8"))
SEED = int(os.environ.get("KAFKALOG_STRESS_SEED", str(random.randrange(1 << 30))))
PARTITIONS, LIMIT, LOCK_MS = 4, 3, 400


def test_share_consumers_under_random_acknowledgements_crashes_and_joins(tmp_path):
    rng = random.Random(SEED)
    before = set(threading.enumerate())
    eng = engine.open(tmp_path / "d", group_config={"group_share_delivery_count_limit": LIMIT})
    eng.create_topic("q", partitions=PARTITIONS)
    eng.alter_group_configs("w", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS),
                                  "share.session.timeout.ms": "1500", "share.heartbeat.interval.ms": "300"})
    lock = threading.Lock()
    deliveries: dict[tuple[int, int], list[tuple[float, int]]] = {}  # record -> (when, delivery count) in order
    ended: dict[tuple[int, int], tuple[str, int]] = {}  # record -> (accepted/rejected, at delivery count)
    errors: list[BaseException] = []
    produced = [0]
    stop = threading.Event()

    def produce() -> None:
        with eng.producer(linger_ms=2) as p:
            while not stop.is_set():
                p.send("q", b"x", key=b"%d" % produced[0])
                produced[0] += 1
                time.sleep(0.0005)

    def member(seed: int) -> None:
        r = random.Random(seed)
        c = eng.share_consumer("w", ["q"], acknowledgement_mode="explicit", max_poll_records=r.choice([1, 5, 50]))
        try:
            for _ in range(r.randint(5, 60)):
                if stop.is_set():
                    break
                records = c.poll(50)
                now = time.monotonic()
                with lock:
                    for rec in records:
                        deliveries.setdefault((rec.partition, rec.offset), []).append((now, rec.delivery_count))
                if r.random() < 0.03:  # a crash: no acknowledgement, no close, no heartbeat: its locks run out,
                    eng.heartbeats.remove(c)  # then its session (the engine closes the object itself at the end)
                    return
                kinds = {}
                for rec in records:
                    roll = r.random()
                    kind = AcknowledgeType.ACCEPT if roll < 0.7 else \
                        AcknowledgeType.RELEASE if roll < 0.9 else AcknowledgeType.REJECT
                    c.acknowledge(rec, kind)
                    kinds[(rec.partition, rec.offset)] = (kind, rec.delivery_count)
                outcome = c.commit_sync()
                with lock:
                    for (p, o), (kind, count) in kinds.items():  # (a partition's acknowledgements apply all or none)
                        applied = all(err is None for tp, err in outcome.items() if tp.partition == p)
                        if applied and kind != AcknowledgeType.RELEASE:
                            assert (p, o) not in ended, f"{p}/{o} ended twice"
                            ended[(p, o)] = ("accepted" if kind == AcknowledgeType.ACCEPT else "rejected", count)
            c.close()
        except KafkaError as exc:  # (typed: allowed, recorded for the assertion below if it is not one we expect)
            errors.append(exc)
        except BaseException as exc:
            errors.append(exc)
            raise

    producer = threading.Thread(target=produce)
    producer.start()
    deadline = time.monotonic() + SECONDS
    running: list[threading.Thread] = []
    while time.monotonic() < deadline:
        running = [t for t in running if t.is_alive()]
        while len(running) < 6:
            t = threading.Thread(target=member, args=(rng.randrange(1 << 30),))
            t.start()
            running.append(t)
        time.sleep(0.05)
    stop.set()
    producer.join()
    for t in running:
        t.join()
    assert not [e for e in errors if not isinstance(e, KafkaError)], errors
    # the survivors drain: every record still open is delivered and accepted
    drain = eng.share_consumer("w", ["q"], acknowledgement_mode="explicit", max_poll_records=500)
    tid = eng.admin.topic_id_of("q")
    end = {p: eng.partition("q", p).high_watermark for p in range(PARTITIONS)}
    quiet_until = time.monotonic() + 30
    while time.monotonic() < quiet_until:
        records = drain.poll(LOCK_MS)
        now = time.monotonic()
        for rec in records:
            deliveries.setdefault((rec.partition, rec.offset), []).append((now, rec.delivery_count))
            drain.acknowledge(rec)
        assert all(err is None for err in drain.commit_sync().values())
        for rec in records:
            assert (rec.partition, rec.offset) not in ended
            ended[(rec.partition, rec.offset)] = ("accepted", rec.delivery_count)
        if eng.share_groups.start_offsets("w") == {(tid, p): end[p] for p in range(PARTITIONS)}:
            break
    drain.close()
    assert eng.share_groups.start_offsets("w") == {(tid, p): end[p] for p in range(PARTITIONS)}, SEED
    everything = {(p, o) for p in range(PARTITIONS) for o in range(end[p])}
    assert sum(end.values()) == produced[0] > 0
    for record in everything:
        counts = sorted(c for _, c in deliveries.get(record, []))
        assert counts == list(range(1, len(counts) + 1)), (SEED, record, counts)  # none repeated, none skipped
        assert len(counts) <= LIMIT, (SEED, record, counts)
        if record in ended:
            assert counts[-1] == ended[record][1], (SEED, record, counts, ended[record])  # never after it ended
        else:
            assert counts and counts[-1] == LIMIT, (SEED, record, counts, "neither acknowledged nor at the limit")
    eng.close()
    assert [t.name for t in set(threading.enumerate()) - before
            if t.name.startswith("kafkalog-") and t.is_alive()] == []
