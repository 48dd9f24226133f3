"""`make interop`: the checkpoint corpus's expectations (tests/data/kafka-checkpoints/expected.jsonl) are what
KAFKA_HOME's own readers make of its files today, so the readers held to them are held to Kafka."""
from __future__ import annotations

import os

import pytest

from tests import vectors
from tests.broker.checkpoint_corpus import EXPECTED, kafka_reads


def test_kafkas_readers_still_read_the_corpus_as_recorded():
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise pytest.UsageError("make interop needs KAFKA_HOME: a Kafka installation or a broker build folder")
    recorded = vectors.expected_lines(vectors.KAFKA_CHECKPOINTS / "expected.jsonl")
    assert kafka_reads(home, [line["file"] for line in recorded]) == recorded, EXPECTED
