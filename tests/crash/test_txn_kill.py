"""Exactly once through kill -9: the consume-transform-produce loop of tests/crash/txn_pipeline.py dies at a
seeded point (between sends, before the commit, during the coordinator's marker writes, after a commit); the
directory is reopened, the loop finishes, and B under read_committed holds every record of A exactly once,
with the group's committed offsets at A's end. CI runs 52 trials; `make crash` runs KAFKALOG_TXN_KILLS."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter

import pytest

import engine
from engine import TopicPartition
from tests.crash import txn_pipeline
from tests.crash.children import ROOT

TRIALS = int(os.environ.get("KAFKALOG_TXN_KILLS", "52"))


def _records(e, topic: str) -> list[bytes]:
    c = e.consumer(isolation_level="read_committed", auto_offset_reset="earliest", consumer_timeout_ms=0)
    c.assign([TopicPartition(topic, p) for p in range(e.partitions_for(topic))])
    return [r.value for r in c]


def kill_then_finish(tmp_path, seed: int, child: str, finish, **config) -> None:
    """Fill A, run `child` (a module of tests.crash) until it kills itself at the seed's point, reopen the directory
    (with `config`), `finish(engine)` the work, and check B holds A exactly once with the offsets at A's end."""
    rng = random.Random(seed)
    with engine.open(tmp_path, **config) as e:
        e.create_topic(txn_pipeline.SOURCE, txn_pipeline.PARTITIONS)
        e.create_topic(txn_pipeline.SINK, 3)
        with e.producer() as p:
            for i in range(rng.randint(40, 120)):
                p.send(txn_pipeline.SOURCE, b"record-%d" % i, key=b"%d" % (i % 7))
    done = subprocess.run([sys.executable, "-m", f"tests.crash.{child}", str(tmp_path), str(seed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]  # it died where the seed said
    with engine.open(tmp_path, **config) as e:  # recovery: a PrepareCommit completes, an Ongoing one is aborted
        finish(e)
        source = _records(e, txn_pipeline.SOURCE)
        sink = _records(e, txn_pipeline.SINK)
        assert Counter(sink) == Counter(source), f"seed {seed}: duplicates or losses in the sink"
        for p in range(txn_pipeline.PARTITIONS):
            tp = TopicPartition(txn_pipeline.SOURCE, p)
            assert e.committed(txn_pipeline.GROUP, tp).offset == e.log(txn_pipeline.SOURCE, p).log_end_offset


@pytest.mark.parametrize("seed", range(TRIALS))
def test_every_record_reaches_the_sink_exactly_once(tmp_path, seed):
    kill_then_finish(tmp_path, seed, "txn_pipeline", lambda e: txn_pipeline.run(e, random.Random(seed + 1)))
