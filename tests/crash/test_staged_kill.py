"""Staged writes through kill -9 of the directory's owner: a child process owns the directory and applies the jobs
this process (the requester, as Spark's driver would be) asks for; it is killed at a seeded moment while it applies
(before, during or after a job's transaction, or between the commit and the answer). The requester answers each job
within its timeout: it takes the directory over and applies what the dead owner left. Every acknowledged job is in
the log exactly once, no job is in it in part. CI runs a few trials; `make crash` runs KAFKALOG_STAGED_KILLS."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

import engine
from engine import KafkaTimeoutError
from engine.staged_writes import layout as sw
from engine.tools import staged_commit as sw_requester
from tests.crash.children import ROOT
from tests.log_checks import read_log
from tests.staging import stage_values

TRIALS = int(os.environ.get("KAFKALOG_STAGED_KILLS", "6"))
OWNER = ("import sys, time, engine\n"
         "e = engine.open(sys.argv[1])\n"
         "print('ready', flush=True)\n"
         "time.sleep(3600)\n")


def _stage(path: str, job: str, values: list[bytes]) -> dict:
    file = stage_values(path, job, "t", values, rows_per_batch=1_000)
    return {"job": job, "files": [file], "transactional_id": "sink", "sink_id": "kill", "batch_id": None}


@pytest.mark.parametrize("seed", range(TRIALS))
def test_every_acknowledged_job_lands_once_whatever_moment_the_owner_dies(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path)
    with engine.open(path) as e:
        e.create_topic("t", 3)
    jobs: dict[str, tuple[list[bytes], object]] = {}
    for j in range(3):  # three jobs, each with an owner killed at a moment of its own
        owner = subprocess.Popen([sys.executable, "-c", OWNER, path], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert owner.stdout.readline().strip() == "ready"
            job = f"kill-{seed}-{j}"
            values = [b"%s:%d" % (job.encode(), i) for i in range(rng.randrange(1_000, 40_000))]
            req = _stage(path, job, values)
            answer: dict = {}

            def ask(req=req, answer=answer):
                try:
                    answer["rows"] = sw_requester.request(path, req, 60_000)
                except KafkaTimeoutError as exc:
                    answer["error"] = exc
            requester = threading.Thread(target=ask)
            started = time.monotonic()
            requester.start()
            time.sleep(rng.uniform(0, 0.8))  # before, while or after the owner applies it
            owner.send_signal(signal.SIGKILL)
            requester.join(120)
            assert not requester.is_alive() and time.monotonic() - started < 60 + 2
            jobs[job] = (values, answer)
        finally:
            owner.kill()
            owner.wait()
    with engine.open(path) as e:
        landed = Counter(value for p in range(3) for _, _, value in read_log(e, "t", partition=p))
    for job, (values, answer) in jobs.items():
        counts = {landed[v] for v in values}
        assert len(counts) == 1 and counts <= {0, 1}, f"seed {seed}: {job} landed in part or twice: {counts}"
        if "rows" in answer:
            assert answer["rows"] == len(values) and counts == {1}, f"seed {seed}: {job} acknowledged, not landed"
        else:  # a timeout is the only other answer, and it says what it knows
            assert "withdrawn" in str(answer["error"]) and counts == {0} or "unknown" in str(answer["error"]), answer
    assert not os.path.exists(sw.staging_dir(path)), os.listdir(sw.staging_dir(path))
