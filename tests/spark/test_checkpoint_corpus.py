"""One checkpoint-reading contract: the Python reader (engine.segments.checkpoint_file) and the JVM source's
(CheckpointFile.java) read every file of tests/data/kafka-checkpoints as Kafka's own readers did when the corpus
was made: the same entries, or a refusal (KafkaStorageError naming the file). The corpus holds a real broker's
checkpoint files at start-up (empty), while it runs and after it stopped, and hand-made files at the format's edges;
its expected.jsonl is what Kafka's OffsetCheckpointFile and LeaderEpochCheckpointFile read from each
(tests/broker/checkpoint_corpus.py; `make interop` checks it against Kafka again)."""
from __future__ import annotations

import pytest

from engine.common.errors import KafkaStorageError
from engine.segments import leader_epoch_checkpoint, offset_checkpoint
from engine.segments.fs import FileSystem
from engine.segments.partition_reader import read_checkpoints
from tests import vectors
from tests.spark.jvm_checks import run_check

pytestmark = pytest.mark.spark

EXPECTED = vectors.expected_lines(vectors.KAFKA_CHECKPOINTS / "expected.jsonl")
OFFSETS = [line for line in EXPECTED if vectors.checkpoint_kind(line["file"]) == "offsets"]


def test_the_corpus_is_whole_and_spans_the_cases():
    """Every file of the corpus has Kafka's verdict, and the verdicts include each kind the readers must agree on."""
    files = sorted(p.name for p in vectors.KAFKA_CHECKPOINTS.iterdir() if p.name not in ("README.md", "expected.jsonl"))
    assert files == [line["file"] for line in EXPECTED]
    kinds = {(vectors.checkpoint_kind(line["file"]), "error" in line, bool(line.get("offsets") or line.get("epochs")))
             for line in EXPECTED}
    assert kinds == {(kind, refused, full) for kind in ("offsets", "epochs") for refused, full in
                     ((True, False), (False, False), (False, True))}
    assert any(line["file"].startswith("broker-startup.") and line["offsets"] == [] for line in OFFSETS)


@pytest.mark.parametrize("line", EXPECTED, ids=[line["file"] for line in EXPECTED])
def test_the_python_reader_reads_each_file_as_kafka(line):
    path = str(vectors.KAFKA_CHECKPOINTS / line["file"])
    data = open(path, "rb").read()
    epochs = vectors.checkpoint_kind(line["file"]) == "epochs"
    parse = leader_epoch_checkpoint.parse if epochs else offset_checkpoint.parse
    if "error" in line:
        with pytest.raises(KafkaStorageError, match="malformed checkpoint file") as err:
            parse(data, path)
        assert err.value.file == path
    elif epochs:
        assert parse(data, path) == [tuple(entry) for entry in line["epochs"]]
    else:
        assert parse(data, path) == {(t, p): o for t, p, o in line["offsets"]}


def test_the_jvm_reader_reads_each_offset_file_as_kafka():
    """All the offset checkpoint files in one `java` run: each line the entries Kafka read, or a storage error."""
    paths = [str(vectors.KAFKA_CHECKPOINTS / line["file"]) for line in OFFSETS]
    got = run_check("CheckpointCheck", *paths)
    assert len(got) == len(OFFSETS)
    for line, path, verdict in zip(OFFSETS, paths, got):
        if "error" in line:
            assert verdict.startswith("error KafkaStorageError") and f"(file {path}" in verdict, (line, verdict)
        else:
            entries = sorted(f"{t}-{p}={o}" for t, p, o in line["offsets"])
            status, *got_entries = verdict.split("\t")
            assert (status, sorted(got_entries)) == ("ok", entries), (line, verdict)


def test_a_log_directory_with_a_starting_brokers_empty_checkpoints_reads_as_no_entries(tmp_path):
    """The reader's view of a log directory (log starts and high watermarks) with the files Kafka makes at start-up."""
    for name in vectors.OFFSET_CHECKPOINTS:
        (tmp_path / name).write_bytes((vectors.KAFKA_CHECKPOINTS / f"broker-startup.{name}").read_bytes())
    assert read_checkpoints(FileSystem(), str(tmp_path)) == ({}, {})
