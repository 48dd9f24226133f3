"""Writes staged by another process and committed by the engine that owns the directory (engine.staged_writes):
the path Spark's kafkalog sink takes when the application has the directory open."""
from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

import engine
from engine import KafkaTimeoutError, TopicPartition
from engine import staged_writes as sw
from tests.log_checks import read_log

SCHEMA = sw.staged_schema()


def _stage(path, job: str, values: list[bytes]) -> str:
    os.makedirs(sw.staging_dir(path, job), exist_ok=True)
    file = os.path.join(sw.staging_dir(path, job), "attempt.arrow")
    n = len(values)
    batch = pa.RecordBatch.from_arrays([pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.nulls(n, pa.binary()),
                                        pa.array(values, pa.binary()), pa.nulls(n, SCHEMA.field("headers").type),
                                        pa.array([1_700_000_000_000] * n, pa.int64())], schema=SCHEMA)
    with pa.OSFile(file, "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as out:
        out.write_batch(batch)
    return file


def test_the_owner_commits_a_staged_write_in_one_transaction(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        req = {"job": "j1", "files": [_stage(tmp_path, "j1", [b"a", b"b"])], "transactional_id": "sink",
               "sink_id": "s", "batch_id": 3}
        result = {}
        requester = threading.Thread(target=lambda: result.update(n=sw.request(str(tmp_path), req, 60_000)))
        requester.start()
        while requester.is_alive():  # what the background thread does every 200 ms
            e.apply_staged_writes()
            requester.join(0.02)
        assert result == {"n": 2}
        assert [v for _, _, v in read_log(e, "t")] == [b"a", b"b"]
        assert e.committed("s", TopicPartition("t", 0)).offset == 4  # the micro-batch's progress, in the transaction
        req2 = {**req, "files": [_stage(tmp_path, "j1", [b"again"])]}
        assert sw.apply(e, req2) == 0  # the same micro-batch again: skipped
        assert not os.path.exists(sw.staging_dir(str(tmp_path)))


def test_a_request_nobody_applies_times_out_and_is_withdrawn(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        req = {"job": "j2", "files": [_stage(tmp_path, "j2", [b"x"])], "transactional_id": "sink", "sink_id": "s",
               "batch_id": None}
        with pytest.raises(KafkaTimeoutError, match="did not apply"):
            sw.request(str(tmp_path), req, 100)
        assert e.apply_staged_writes() == 0 and read_log(e, "t") == []
        assert not os.path.exists(sw.staging_dir(str(tmp_path)))
