"""The concurrency stress harness (tests/stress/workload.py) and the scenario that found a reader meeting a closed
map, run on whichever twin this process loaded (`make test` runs this module on both). Seeded and bounded:
KAFKALOG_STRESS_SECONDS (CI: a few seconds each; `make stress`: minutes) and KAFKALOG_STRESS_SEED.

Invariants: only typed errors; the cross-process parts' own (tests/stress/cross_process.py); every consumer reads each offset once, in order, with the value that was acked for it;
a reader from the beginning misses no acked record below its position; read_committed never shows aborted data; no
thread is left running after close(); the reopened directory serves every acked record (the compacted topic: the
latest value of each key; the retained topic: everything above the log start).
"""
from __future__ import annotations

import os
import random
import threading
import time
from collections import defaultdict

import engine
from engine.common.errors import KafkaError
from tests.log_checks import read_log
from tests.stress import cross_process
from tests.stress.workload import COMPLETE, TOPICS, Workload

SECONDS = float(os.environ.get("KAFKALOG_STRESS_SECONDS", "8"))
SEED = int(os.environ.get("KAFKALOG_STRESS_SEED", str(random.randrange(1 << 30))))


def _engine_threads(before: set[threading.Thread]) -> list[str]:
    """kafkalog's threads started since `before` (another test's server, a session fixture, may run in this process)
    and still alive."""
    return [t.name for t in set(threading.enumerate()) - before if t.name.startswith("kafkalog-") and t.is_alive()]


def _check_reader(w: Workload, who: str, committed_only: bool) -> int:
    """Offsets strictly increasing per partition, values as acked, no acked record skipped below the last read."""
    count = 0
    for (topic, partition), got in w.seen[who].items():
        offsets = [o for o, _ in got]
        assert offsets == sorted(set(offsets)), f"{who} {topic}-{partition}: offsets repeat or go back"
        read = dict(got)
        for (t, p, offset), (_, value) in w.acked.items():
            if (t, p) != (topic, partition) or (offsets and offset > offsets[-1]):
                continue
            assert read.get(offset) == value, f"{who} {t}-{p} offset {offset}: {read.get(offset)!r}, acked {value!r}"
        if committed_only:
            assert not {v for _, v in got} & w.aborted, f"{who} read aborted records in {topic}-{partition}"
        count += len(got)
    return count


def committed_values(path: str, topic: str) -> list[bytes]:
    """The values of `topic` a read_committed reader of the reopened directory reads, in order."""
    with engine.open(path) as eng:
        return [value for _, _, value in read_log(eng, topic)]


def _reread(path: str) -> dict[tuple[str, int], dict[int, tuple]]:
    """Every record of every topic of the reopened directory: (topic, partition) -> offset -> (key, value)."""
    out: dict[tuple[str, int], dict[int, tuple]] = defaultdict(dict)
    with engine.open(path) as eng:
        with eng.consumer(*eng.list_topics(), auto_offset_reset="earliest", consumer_timeout_ms=500) as c:
            for r in c:
                out[(r.topic, r.partition)][r.offset] = (r.key, r.value)
        starts = {(t, p): eng.log(t, p).log_start_offset for t in TOPICS for p in range(TOPICS[t][0])}
    return out, starts


def test_stress_harness(tmp_path):
    path = str(tmp_path / "stress")
    before = set(threading.enumerate())
    w = Workload(path, SEED)
    try:
        _run_and_check(w, path, before)
    finally:
        w.cross.close()  # (the mock cluster the mirror wrote to, read by the checks)


def _run_and_check(w: Workload, path: str, before: set[threading.Thread]) -> None:
    w.run(SECONDS)
    assert not w.failures, f"seed {SEED}:\n" + "\n".join(w.failures[:10])
    deadline = time.monotonic() + 10
    while _engine_threads(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _engine_threads(before), f"threads left after close(): {_engine_threads(before)}"
    assert len(w.acked) > 100, f"seed {SEED}: the producers got too little done to check ({len(w.acked)} acked)"
    read = _check_reader(w, "reader-uncommitted", committed_only=False)
    _check_reader(w, "reader-committed", committed_only=True)
    assert read > 0, f"seed {SEED}: the reader read nothing"

    log, starts = _reread(path)
    cross_process.check(w.cross, log, SEED)
    latest: dict[tuple[str, int, bytes], int] = {}
    for (topic, partition, offset), (key, value) in w.acked.items():
        if topic in COMPLETE or (topic == "retained" and offset >= starts[(topic, partition)]):
            assert log[(topic, partition)].get(offset) == (key, value), \
                f"seed {SEED}: {topic}-{partition} offset {offset} lost or changed after reopen"
        elif topic == "compact":
            k = (topic, partition, key)
            latest[k] = max(latest.get(k, -1), offset)
    newest_in_log: dict[tuple[str, int, bytes], int] = {}
    for (topic, partition), records in log.items():
        if topic == "compact":
            for offset, (key, _) in records.items():
                k = (topic, partition, key)
                newest_in_log[k] = max(newest_in_log.get(k, -1), offset)
    for k, offset in latest.items():
        assert newest_in_log.get(k, -1) >= offset, f"seed {SEED}: compaction lost the latest value of {k}"
        if newest_in_log[k] == offset:
            assert log[k[:2]][offset] == w.acked[(k[0], k[1], offset)], f"seed {SEED}: {k} changed by compaction"


def test_consumers_under_rolls_and_concurrent_producers(tmp_path):
    """The scenario of the closed-map report: 3 producers (linger 0, 1 KB batches, 50 sends then get()) and 2
    consumers on a topic of 4 partitions rolling every 200 KB; each consumer reads every acked offset once, in
    order, and meets no error."""
    eng = engine.open(str(tmp_path / "d"))
    eng.create_topic("t", partitions=4, config={"segment.bytes": 200_000})
    stop, produced, lock = threading.Event(), threading.Event(), threading.Lock()
    acked: dict[tuple[int, int], bytes] = {}
    errors: list[str] = []
    seen: list[dict[int, list]] = [defaultdict(list), defaultdict(list)]

    def produce(i: int) -> None:
        try:
            with eng.producer(linger_ms=0, batch_size=1024) as p:
                n = 0
                while not stop.is_set():
                    futures = [(b"v%d-%d" % (i, n + j), p.send("t", key=b"k%d" % (n + j), value=b"v%d-%d" % (i, n + j)))
                               for j in range(50)]
                    n += 50
                    for value, f in futures:
                        md = f.get()
                        with lock:
                            acked[(md.partition, md.offset)] = value
        except Exception as exc:  # noqa: BLE001 - any error fails the test
            errors.append(f"producer {i}: {exc!r}")

    def consume(i: int) -> None:
        try:
            with eng.consumer("t", auto_offset_reset="earliest") as c:
                while True:
                    polled = c.poll(timeout_ms=100)
                    for tp, records in polled.items():
                        seen[i][tp.partition].extend((r.offset, r.value) for r in records)
                    if produced.is_set() and not polled:  # every producer done, and nothing more to read
                        return
        except Exception as exc:  # noqa: BLE001
            errors.append(f"consumer {i}: {exc!r}")

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in producers + consumers:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in producers:  # their last round is acknowledged before the consumers may stop
        t.join()
    produced.set()
    for t in consumers:
        t.join()
    eng.close()
    assert not errors, errors
    assert acked
    for i in range(2):
        for partition in range(4):
            got = seen[i][partition]
            want = sorted((o, v) for (p, o), v in acked.items() if p == partition)
            assert got == want, f"consumer {i} partition {partition}: {len(got)} records read, {len(want)} acked"
