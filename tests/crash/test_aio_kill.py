"""Exactly once through kill -9 with engine.aio: the loop of tests/crash/aio_pipeline.py dies at a seeded point
(between sends, before the commit, during the coordinator's marker writes, after a commit); the directory is
reopened, the same loop finishes, and the sink under read_committed holds every source record exactly once, with
the group's committed offsets at the source's end. CI runs 12 trials; `make crash` runs KAFKALOG_AIO_KILLS."""
from __future__ import annotations

import asyncio
import os
import random

import pytest

from tests.crash import aio_pipeline
from tests.crash.test_txn_kill import kill_then_finish

TRIALS = int(os.environ.get("KAFKALOG_AIO_KILLS", "12"))


@pytest.mark.parametrize("seed", range(TRIALS))
def test_every_record_reaches_the_sink_exactly_once(tmp_path, seed):
    kill_then_finish(tmp_path, seed, "aio_pipeline",
                     lambda e: asyncio.run(aio_pipeline.run(e, random.Random(seed + 1))),
                     group_config=aio_pipeline.GROUPS)
