"""The stress workload's parts that cross a process boundary, run beside the in-process ones (tests/stress/workload.py):

- staged writes requested by other processes (`python -m engine.tools.staged_commit`, as Spark's JVM sink runs it), with
  timeouts from none to long: each job is applied, withdrawn, or (its commit under way at the deadline) unknown to its
  requester; a requester still waiting when the engine closes takes the directory over and applies it itself;
- a mirror into and out of librdkafka's mock cluster (`mirror.to_kafka` of a topic being written, `mirror.from_kafka`
  of records produced there meanwhile), run again and again on the open engine;
- beside them, a second directory whose owner (a child process) is killed -9 at a seeded moment while another child
  requests a job from it: the requester takes the directory over and answers;
- `kafkalog handoff` of the open directory, which must be refused every time before close.
`check(w, log)` then holds the invariants: a job's rows appear once each if it was applied, never if it was withdrawn,
all or none if its outcome was unknown, and never in part (in both directories); nothing staged is left behind; the
cluster holds a run of each mirrored partition (from its start unless the mock cluster, whose log is bounded, dropped
its oldest records), and the engine the records the cluster had, in order, each once (all of them unless dropped).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter

import engine
from engine import mirror
from engine.common.errors import LogDirectoryLockedError
from engine.staged_writes import layout
from engine.tools.handoff import handoff
from tests.staging import stage_values

STAGED = "staged"
OWNER = "import sys, time, engine\ne = engine.open(sys.argv[1])\nprint('ready', flush=True)\ntime.sleep(3600)\n"
INBOUND = "inbound"
OUTBOUND = "plain"


def _stage(path: str, job: str, values: list[bytes]) -> dict:
    """Stage `values` for STAGED under `path` as a Spark task would (Arrow batches of 500 rows); the job's request."""
    file = stage_values(path, job, STAGED, values, rows_per_batch=500, name="attempt-0")
    return {"job": job, "files": [file], "transactional_id": "stress-staged", "sink_id": "stress-sink",
            "batch_id": None}


def _outcome(status: int, stdout: str, stderr: str, values: list) -> str:
    """What a requester (`python -m engine.tools.staged_commit`) answered."""
    if status == 0:
        return "applied" if int(stdout) == len(values) else f"applied {stdout.strip()} rows"
    if "withdrawn" in stderr:
        return "withdrawn"
    return "unknown" if "unknown" in stderr else f"failed: {stderr.strip()[-500:]}"


class CrossProcess:
    """The state the cross-process threads share with the checks."""

    def __init__(self, w) -> None:
        self.w = w
        self.jobs: dict[str, tuple[str, list[bytes]]] = {}  # job -> (outcome, values)
        self.owned = os.path.join(os.path.dirname(w.path), "owned")  # the directory whose owner is killed
        self.owned_jobs: dict[str, tuple[str, list[bytes]]] = {}
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
        out = {"staged": self.staged_thread, "killed-owner": self.killed_owner_thread, "handoff": self.handoff_thread}
        if self.mock is not None:
            out["mirror"] = self.mirror_thread
        return out

    # --- staged writes from other processes ---------------------------------------------------------
    def staged_thread(self) -> None:
        w = self.w
        rng = random.Random(f"{w.seed}:staged")
        n = 0
        while w.running():
            job, n = f"stress-{n}", n + 1
            values = [b"%s:%d" % (job.encode(), i) for i in range(rng.randrange(1, 3000))]
            run = subprocess.run([sys.executable, "-m", "engine.tools.staged_commit", w.path,
                                  str(rng.choice((0, 50, 5_000, 30_000)))],
                                 input=json.dumps(_stage(w.path, job, values)), capture_output=True, text=True,
                                 timeout=120)
            with w.lock:
                self.jobs[job] = (_outcome(run.returncode, run.stdout, run.stderr, values), values)

    def killed_owner_thread(self) -> None:
        w = self.w
        rng = random.Random(f"{w.seed}:killed-owner")
        with engine.open(self.owned) as e:
            e.create_topic(STAGED)
        n = 0
        while w.running():
            owner = subprocess.Popen([sys.executable, "-c", OWNER, self.owned], stdout=subprocess.PIPE, text=True)
            try:
                if owner.stdout.readline().strip() != "ready":
                    w.fail("killed-owner", "the owner did not start")
                    return
                job, n = f"owned-{n}", n + 1
                values = [b"%s:%d" % (job.encode(), i) for i in range(rng.randrange(1_000, 20_000))]
                requester = subprocess.Popen([sys.executable, "-m", "engine.tools.staged_commit", self.owned, "30000"],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True)
                requester.stdin.write(json.dumps(_stage(self.owned, job, values)))
                requester.stdin.close()
                time.sleep(rng.uniform(0, 0.6))  # before, while or after the owner applies it
            finally:
                owner.kill()
                owner.wait()
            out, err = requester.stdout.read(), requester.stderr.read()
            self.owned_jobs[job] = (_outcome(requester.wait(120), out, err, values), values)

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

    assert cp.jobs and cp.owned_jobs, f"seed {seed}: no staged write was requested"
    for path, jobs in ((cp.w.path, cp.jobs), (cp.owned, cp.owned_jobs)):
        counts = Counter(committed_values(path, STAGED))
        for job, (outcome, values) in jobs.items():
            landed = [counts[v] for v in values]
            assert set(landed) <= {0, 1}, f"seed {seed}: staged write {job} appended twice"
            assert len(set(landed)) == 1, f"seed {seed}: staged write {job} landed in part ({sum(landed)}/{len(values)})"
            if outcome == "applied":
                assert landed[0] == 1, f"seed {seed}: staged write {job} acknowledged but not in the log"
            elif outcome == "withdrawn":
                assert landed[0] == 0, f"seed {seed}: staged write {job} withdrawn yet in the log"
            else:
                assert outcome == "unknown", f"seed {seed}: staged write {job}: {outcome}"
        assert not os.path.exists(layout.staging_dir(path)) or not [
            f for _, _, files in os.walk(layout.staging_dir(path)) for f in files], f"seed {seed}: staged files left"
    if cp.mock is None:
        return
    from tests.mirror.kafka_cluster import read_all, watermarks

    copied = read_all(cp.mock.bootstrap, OUTBOUND, 4, isolation="read_uncommitted") if (OUTBOUND, 0) in log else {}
    for p, records in copied.items():  # the mock keeps a bounded log: what it holds is a run of ours, from the start
        ours = [value for _, (_, value) in sorted(log.get((OUTBOUND, p), {}).items())]
        theirs = [value for _, _, value, _, _ in records]
        start = ours.index(theirs[0]) if theirs else 0
        assert theirs == ours[start:start + len(theirs)], f"seed {seed}: the cluster's {OUTBOUND}-{p} is not ours"
        assert start == 0 or watermarks(cp.mock.bootstrap, OUTBOUND, p)[0] > 0, f"seed {seed}: {OUTBOUND}-{p} skipped"
    inbound = [value for _, (_, value) in sorted(log.get((INBOUND, 0), {}).items())]
    where = {value: i for i, value in enumerate(cp.inbound)}
    order = [where[value] for value in inbound]
    assert order == sorted(set(order)), f"seed {seed}: {INBOUND} mirrored in holds a record twice or out of order"
    if cp.inbound and watermarks(cp.mock.bootstrap, INBOUND, 0)[0] == 0:  # the mock dropped none: all of it, once
        assert inbound == cp.inbound[:len(inbound)], f"seed {seed}: {INBOUND} mirrored in is not the cluster's"
