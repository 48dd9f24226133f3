"""The concurrency stress workload: one engine, many threads doing what users do at once, and a record of what each
thread was told, so the test can check every answer against it.

What runs (seeded, bounded by a deadline; every thread stops by itself):
- producers: a producer shared by two threads and one of each thread's own, cycling through every codec, acks='all'
  (idempotent), on a plain topic that rolls every ~150 KB and on a topic replicated to 3 brokers; a transactional
  producer committing or aborting at random;
- consumers: standalone readers from the beginning (read_uncommitted and read_committed), a seeker that jumps back to
  random offsets and to `offsets_for_times` answers, and a group of two members (read_committed);
- the log's own work: retention and `delete_records` on a topic of small segments, the cleaner (explicit compactions
  and the cleaner thread) on a compacted topic, and broker failures and restarts under the replicated topic;
- across processes (tests/stress/cross_process.py): staged writes requested by other processes, a mirror into and
  out of librdkafka's mock cluster, handoff refused while the engine is open;
- `close()` of the engine while all of it runs.
Any exception that is not a KafkaError is kept as a failure, and so is a typed error before close() that is not
retriable; a retriable one is retried as a user's loop would (a send's future, a poll, a commit).
"""
from __future__ import annotations

import random
import threading
import time
import traceback
from collections import defaultdict

import engine
from engine.common.errors import CommitFailedError, KafkaError
from engine.common.structs import TopicPartition
from tests.stress.cross_process import CrossProcess

CODECS = (None, "gzip", "snappy", "lz4", "zstd")
TOPICS = {  # name: (partitions, replication factor, config)
    "plain": (4, 1, {"segment.bytes": 150_000}),
    "repl": (2, 3, {"segment.bytes": 200_000, "min.insync.replicas": 1}),
    "txn": (2, 1, {"segment.bytes": 150_000}),
    "retained": (2, 1, {"segment.bytes": 60_000, "retention.bytes": 200_000}),
    "compact": (2, 1, {"segment.bytes": 40_000, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                       "delete.retention.ms": 0}),
    "staged": (1, 1, {"segment.bytes": 200_000}),  # what other processes stage (tests/stress/cross_process.py)
}
COMPLETE = ("plain", "repl", "txn")  # topics whose every acked record stays readable


class Workload:
    """Run with `run(seconds)`; then `failures` lists what went wrong and the `acked`/`seen` records tell the rest."""

    def __init__(self, path: str, seed: int) -> None:
        self.path, self.seed = path, seed
        self.eng = engine.open(path, brokers=3, replica_lag_time_max_ms=1_000)
        for name, (parts, rf, config) in TOPICS.items():
            self.eng.create_topic(name, partitions=parts, replication_factor=rf, config=config)
        self.lock = threading.Lock()
        self.acked: dict[tuple[str, int, int], tuple] = {}         # (topic, partition, offset) -> (key, value)
        self.aborted: set[bytes] = set()                            # values of aborted transactions
        self.seen: dict[str, dict[tuple[str, int], list]] = {}      # consumer -> tp -> [(offset, value)]
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.cross = CrossProcess(self)

    # --- bookkeeping ------------------------------------------------------------------------------
    def fail(self, who: str, what: str) -> None:
        with self.lock:
            self.failures.append(f"{who}: {what}")

    def guarded(self, who: str, body) -> None:
        """Run a thread's body: a typed error after close ends it quietly; anything untyped is a failure."""
        try:
            body()
        except KafkaError as exc:
            if not self.closed.is_set():
                self.fail(who, f"{type(exc).__name__} before close: {exc}")
        except Exception:  # noqa: BLE001 - the point: nothing but typed errors may come out of the engine
            self.fail(who, traceback.format_exc())

    def retriable(self, call, *args, **kwargs):
        """`call`, whose retriable typed errors (a partition between leaders, an ISR short of replicas) are left for
        the next round, as a user's loop leaves them; None then."""
        try:
            return call(*args, **kwargs)
        except KafkaError as exc:
            if not exc.retriable or self.closed.is_set():
                raise
            return None

    def running(self) -> bool:
        return not (self.stop.is_set() or self.closed.is_set())

    # --- producers --------------------------------------------------------------------------------
    def producer_thread(self, who: str, producer, own: bool) -> None:
        """Rounds of up to 60 sends to one topic, then `get()` of each; an own producer is made anew every few
        rounds with another codec, linger and batch size."""
        rng = random.Random(f"{self.seed}:{who}")
        n = 0
        try:
            while self.running():
                if own and rng.random() < 0.2:
                    producer.close()
                    producer = self.eng.producer(linger_ms=rng.choice((0, 2)), batch_size=rng.choice((1024, 16384)),
                                                 compression_type=rng.choice(CODECS))
                topic = rng.choice(("plain", "plain", "repl", "retained", "compact"))
                futures = []
                for _ in range(rng.randrange(1, 60)):
                    key, value = b"k%d" % rng.randrange(50), b"%s:%s:%d" % (who.encode(), topic.encode(), n)
                    n += 1
                    futures.append((key, value, producer.send(topic, key=key, value=value)))
                for key, value, future in futures:
                    try:
                        md = future.get(timeout=30)
                    except KafkaError as exc:
                        if self.closed.is_set() or not exc.retriable:
                            raise
                        continue
                    with self.lock:
                        self.acked[(topic, md.partition, md.offset)] = (key, value)
        finally:
            if own:
                producer.close()

    def transactional_thread(self) -> None:
        rng = random.Random(f"{self.seed}:txn")
        producer = self.eng.producer(transactional_id="stress-txn", compression_type=rng.choice(CODECS))
        producer.init_transactions()
        n = 0
        try:
            while self.running():
                producer.begin_transaction()
                values = []
                for _ in range(rng.randrange(1, 40)):
                    key, value = b"k%d" % rng.randrange(8), b"txn:%d" % n
                    n += 1
                    values.append((key, value, producer.send("txn", key=key, value=value)))
                producer.flush()
                if rng.random() < 0.3:
                    producer.abort_transaction()
                    with self.lock:
                        self.aborted.update(v for _, v, _ in values)
                    continue
                producer.commit_transaction()
                with self.lock:
                    for key, value, future in values:
                        md = future.get()
                        self.acked[("txn", md.partition, md.offset)] = (key, value)
        finally:
            producer.close()

    # --- consumers --------------------------------------------------------------------------------
    def reader_thread(self, who: str, isolation: str, topics: tuple) -> None:
        """Every partition from the beginning, no seeks: what it saw is checked for order, values and gaps."""
        seen = self.seen.setdefault(who, defaultdict(list))
        with self.eng.consumer(auto_offset_reset="earliest", isolation_level=isolation) as c:
            c.assign([TopicPartition(t, p) for t in topics for p in range(TOPICS[t][0])])
            while self.running():
                for tp, records in (self.retriable(c.poll, timeout_ms=50) or {}).items():
                    seen[(tp.topic, tp.partition)].extend((r.offset, r.value) for r in records)

    def seeker_thread(self) -> None:
        """Reads with jumps back (seek, offsets_for_times): each answer in order from where it jumped, with its value."""
        rng = random.Random(f"{self.seed}:seeker")
        tps = [TopicPartition(t, p) for t in ("plain", "retained", "compact") for p in range(TOPICS[t][0])]
        with self.eng.consumer(auto_offset_reset="earliest") as c:
            c.assign(tps)
            nxt: dict[TopicPartition, int] = {}
            while self.running():
                if rng.random() < 0.05:
                    tp = rng.choice(tps)
                    if rng.random() < 0.5:
                        target = rng.randrange(max(1, c.position(tp) + 1))
                        c.seek(tp, target)
                        nxt[tp] = target
                    else:
                        when = int(time.time() * 1000) - rng.randrange(2_000)
                        found = c.offsets_for_times({tp: when})[tp]
                        if found is not None:
                            if found.timestamp < when:
                                self.fail("seeker", f"offsets_for_times({when}) answered {found}")
                            c.seek(tp, found.offset)
                            nxt[tp] = found.offset
                for tp, records in (self.retriable(c.poll, timeout_ms=20, max_records=200) or {}).items():
                    for r in records:
                        if r.offset < nxt.get(tp, 0):
                            self.fail("seeker", f"{tp} offset {r.offset} after a jump to {nxt[tp]}")
                        nxt[tp] = r.offset + 1
                        self.check_value("seeker", tp, r)

    def group_thread(self, who: str) -> None:
        """A read_committed group member: never an aborted value, every value the one acked at its offset."""
        with self.eng.consumer("txn", "plain", group_id="stress-group", auto_offset_reset="earliest",
                               isolation_level="read_committed", session_timeout_ms=6000,
                               heartbeat_interval_ms=200, enable_auto_commit=False) as c:
            while self.running():
                polled = self.retriable(c.poll, timeout_ms=50) or {}
                for tp, records in polled.items():
                    for r in records:
                        if r.value in self.aborted:
                            self.fail(who, f"read_committed saw aborted {r.value!r} at {tp} offset {r.offset}")
                        self.check_value(who, tp, r)
                if polled:
                    try:  # __consumer_offsets may be short of replicas while a broker is down: retried next round
                        self.retriable(c.commit)
                    except CommitFailedError:
                        continue  # the group rebalanced meanwhile: as Kafka's users do, carry on (the poll rejoins)

    def check_value(self, who: str, tp: TopicPartition, record) -> None:
        with self.lock:
            want = self.acked.get((tp.topic, tp.partition, record.offset))
        if want is not None and want[1] != record.value:
            self.fail(who, f"{tp} offset {record.offset}: {record.value!r}, acked as {want!r}")

    # --- the log's own work -----------------------------------------------------------------------
    def housekeeping_thread(self) -> None:
        rng = random.Random(f"{self.seed}:housekeeping")
        while self.running():
            time.sleep(rng.uniform(0.05, 0.3))
            what = rng.random()
            if what < 0.3:
                for p in range(TOPICS["retained"][0]):
                    self.eng.log("retained", p).delete_old_segments()
            elif what < 0.5:
                part = self.eng.partition("retained", rng.randrange(TOPICS["retained"][0]))
                lo, hw = part.log.log_start_offset, part.high_watermark
                if hw > lo:
                    part.delete_records(rng.randint(lo, hw))
            else:
                self.eng.compact("compact")

    def broker_thread(self) -> None:
        rng = random.Random(f"{self.seed}:brokers")
        while self.running():
            time.sleep(rng.uniform(0.3, 1.0))
            victim = rng.choice((1, 2))
            self.eng.fail_broker(victim)
            time.sleep(rng.uniform(0.1, 0.5))
            self.eng.restart_broker(victim)

    # --- the run ----------------------------------------------------------------------------------
    def run(self, seconds: float) -> None:
        shared = self.eng.producer(linger_ms=1, compression_type="lz4")
        bodies = {
            "shared-0": lambda: self.producer_thread("shared-0", shared, own=False),
            "shared-1": lambda: self.producer_thread("shared-1", shared, own=False),
            "own-0": lambda: self.producer_thread("own-0", self.eng.producer(), own=True),
            "own-1": lambda: self.producer_thread("own-1", self.eng.producer(), own=True),
            "txn": self.transactional_thread,
            "reader-uncommitted": lambda: self.reader_thread("reader-uncommitted", "read_uncommitted", COMPLETE),
            "reader-committed": lambda: self.reader_thread("reader-committed", "read_committed", ("txn",)),
            "seeker": self.seeker_thread,
            "group-0": lambda: self.group_thread("group-0"),
            "group-1": lambda: self.group_thread("group-1"),
            "housekeeping": self.housekeeping_thread,
            "brokers": self.broker_thread,
            **self.cross.bodies(),
        }
        threads = [threading.Thread(target=self.guarded, args=(who, body), name=f"stress-{who}", daemon=True)
                   for who, body in bodies.items()]
        for t in threads:
            t.start()
        time.sleep(seconds)
        self.closed.set()  # close arrives mid-everything: the threads are still at work
        try:
            self.eng.close()
        except KafkaError as exc:
            self.fail("close", f"{type(exc).__name__}: {exc}")
        for t in threads:
            t.join(timeout=150)  # (a staged-write requester may take the directory over and apply its job)
            if t.is_alive():
                self.fail(t.name, "still running 150 s after close()")
