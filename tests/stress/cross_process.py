"""The stress workload's parts that cross a process boundary, run beside the in-process ones (tests/stress/workload.py):

- staged writes requested by other processes (`python -m engine.staged_writes`, as Spark's JVM sink runs it), with
  timeouts from none to long: each job is applied, withdrawn, or (its commit under way at the deadline) unknown to its
  requester; a requester still waiting when the engine closes takes the directory over and applies it itself;
- a mirror into and out of librdkafka's mock cluster (`mirror.to_kafka` of a topic being written, `mirror.from_kafka`
  of records produced there meanwhile), run again and again on the open engine;
- `kafkalog handoff` of the open directory, which must be refused every time before close.
`check(w, log)` then holds the invariants: a job's rows appear once each if it was applied, never if it was withdrawn,
all or none if its outcome was unknown, and never in part; nothing staged is left behind; the cluster holds a prefix
of each mirrored partition, and the engine exactly the records the cluster had, in order, once.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter

import pyarrow as pa

from engine import mirror
from engine.common.errors import LogDirectoryLockedError
from engine.staged_writes import layout
from engine.tools.handoff import handoff

STAGED = "staged"
INBOUND = "inbound"
OUTBOUND = "plain"


class CrossProcess:
    """The state the cross-process threads share with the checks."""

    def __init__(self, w) -> None:
        self.w = w
        self.jobs: dict[str, tuple[str, list[bytes]]] = {}  # job -> (outcome, values)
        self.inbound: list[bytes] = []  # produced into the mock cluster's INBOUND, in order
        self.mock = None
        try:
            from tests.mirror.kafka_cluster import MockCluster
            self.mock = MockCluster(brokers=1)
        except ImportError:  # confluent-kafka is a test dependency: CI has it
            self.w.fail("mirror", "confluent-kafka is not installed: the mirror part cannot run")

    def close(self) -> None:
        if self.mock is not None:
            self.mock.close()

    def bodies(self) -> dict:
        out = {"staged": self.staged_thread, "handoff": self.handoff_thread}
        if self.mock is not None:
            out["mirror"] = self.mirror_thread
        return out

    # --- staged writes from other processes ---------------------------------------------------------
    def staged_thread(self) -> None:
        w = self.w
        rng = random.Random(f"{w.seed}:staged")
        schema = layout.staged_schema()
        n = 0
        while w.running():
            job, n = f"stress-{n}", n + 1
            values = [b"%s:%d" % (job.encode(), i) for i in range(rng.randrange(1, 3000))]
            os.makedirs(layout.staging_dir(w.path, job), exist_ok=True)
            file = os.path.join(layout.staging_dir(w.path, job), "attempt-0.arrow")
            with pa.OSFile(file, "wb") as sink, pa.ipc.new_file(sink, schema) as out:
                for start in range(0, len(values), 500):
                    chunk = values[start:start + 500]
                    k = len(chunk)
                    out.write_batch(pa.RecordBatch.from_arrays(
                        [pa.array([STAGED] * k), pa.nulls(k, pa.int32()), pa.nulls(k, pa.binary()),
                         pa.array(chunk, pa.binary()), pa.nulls(k, schema.field("headers").type),
                         pa.nulls(k, pa.int64())], schema=schema))
            req = {"job": job, "files": [file], "transactional_id": "stress-staged", "sink_id": "stress-sink",
                   "batch_id": None}
            timeout_ms = rng.choice((0, 50, 5_000, 30_000))
            run = subprocess.run([sys.executable, "-m", "engine.staged_writes", w.path, str(timeout_ms)],
                                 input=json.dumps(req), capture_output=True, text=True, timeout=120)
            if run.returncode == 0:
                outcome = "applied" if int(run.stdout) == len(values) else f"applied {run.stdout.strip()} rows"
            elif "withdrawn" in run.stderr:
                outcome = "withdrawn"
            elif "unknown" in run.stderr:
                outcome = "unknown"
            else:
                outcome = f"failed: {run.stderr.strip()[-500:]}"
            with w.lock:
                self.jobs[job] = (outcome, values)

    # --- a mirror both ways ---------------------------------------------------------------------------
    def mirror_thread(self) -> None:
        import confluent_kafka as ck

        w = self.w
        rng = random.Random(f"{w.seed}:mirror")
        from tests.mirror.kafka_cluster import config as client_config

        config = client_config(self.mock.bootstrap)
        producer = ck.Producer(config)
        n = 0
        while w.running():
            for _ in range(rng.randrange(1, 200)):
                value = b"inbound:%d" % n
                n += 1
                producer.produce(INBOUND, value, None, 0)
                self.inbound.append(value)
            assert producer.flush(30) == 0, "the mock cluster did not take the inbound records"
            mirror.to_kafka(w.eng, config, name="stress-out", topics=[OUTBOUND], timeout_s=10)
            mirror.from_kafka(config, w.eng, name="stress-in", topics=[INBOUND], timeout_s=10)
            time.sleep(rng.uniform(0.05, 0.3))

    # --- handoff refusals ---------------------------------------------------------------------------
    def handoff_thread(self) -> None:
        w = self.w
        broker = os.path.join(os.path.dirname(w.path), "handoff-broker")
        os.makedirs(os.path.join(broker, f"{OUTBOUND}-0"), exist_ok=True)
        with open(os.path.join(broker, "meta.properties"), "w") as f:
            f.write("version=1\nnode.id=1\ncluster.id=stress\n")
        while w.running():
            before_close = not w.closed.is_set()
            try:
                handoff(w.path, broker, [OUTBOUND])
            except LogDirectoryLockedError:
                pass
            else:
                if before_close:
                    w.fail("handoff", "handed the directory over while its engine was open")
            time.sleep(0.2)


def check(cp: CrossProcess, log: dict, seed: int) -> None:
    """The invariants above, against `log` ((topic, partition) -> offset -> (key, value), read_uncommitted) and the
    committed records of the staged topic."""
    from tests.stress.test_stress import committed_values

    counts = Counter(committed_values(cp.w.path, STAGED))
    assert cp.jobs, f"seed {seed}: no staged write was requested"
    for job, (outcome, values) in cp.jobs.items():
        landed = [counts[v] for v in values]
        assert set(landed) <= {0, 1}, f"seed {seed}: staged write {job} appended twice"
        assert len(set(landed)) == 1, f"seed {seed}: staged write {job} landed in part ({sum(landed)}/{len(values)})"
        if outcome == "applied":
            assert landed[0] == 1, f"seed {seed}: staged write {job} acknowledged but not in the log"
        elif outcome == "withdrawn":
            assert landed[0] == 0, f"seed {seed}: staged write {job} withdrawn yet in the log"
        else:
            assert outcome == "unknown", f"seed {seed}: staged write {job}: {outcome}"
    staging = layout.staging_dir(cp.w.path)
    left = [os.path.join(d, f) for d, _, files in os.walk(staging) for f in files] if os.path.exists(staging) else []
    assert not left, f"seed {seed}: staged files left behind: {left[:5]}"
    if cp.mock is None:
        return
    from tests.mirror.kafka_cluster import read_all

    copied = read_all(cp.mock.bootstrap, OUTBOUND, 4, isolation="read_uncommitted") if (OUTBOUND, 0) in log else {}
    for p, records in copied.items():
        ours = [value for _, (_, value) in sorted(log.get((OUTBOUND, p), {}).items())]
        theirs = [value for _, _, value, _, _ in records]
        assert theirs == ours[:len(theirs)], f"seed {seed}: the cluster's {OUTBOUND}-{p} is not a prefix of ours"
    inbound = [value for _, (_, value) in sorted(log.get((INBOUND, 0), {}).items())]
    assert inbound == cp.inbound[:len(inbound)], f"seed {seed}: {INBOUND} mirrored in is not the cluster's, once"
