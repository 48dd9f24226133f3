"""`.txnindex`: Kafka's 34-byte entries, created on first append, truncated by marker offset."""
from __future__ import annotations

import shutil

import pytest

from engine.common.errors import CorruptIndexError, InvalidOffsetError
from engine.log.log_manager import LogManager
from engine.segments.fs import FileSystem
from engine.segments.txn_index import AbortedTxn, TxnIndex
from tests import vectors


def test_reads_kafkas_txnindex():
    path = vectors.case_dir("txn-0") / "00000000000000000000.txnindex"
    (entry,) = TxnIndex(FileSystem(), str(path), 0).all()
    want = next(line for line in vectors.expected("txn-0") if line["type"] == "abortedTxn")
    assert (entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset) == (
        want["producerId"], want["firstOffset"], want["lastOffset"], want["lastStableOffset"])


def test_append_collect_truncate_round_trip(tmp_path):
    original = vectors.case_dir("txn-0") / "00000000000000000000.txnindex"
    path = tmp_path / "00000000000000000000.txnindex"
    index = TxnIndex(FileSystem(), str(path), 0)
    assert not path.exists() and index.all() == []  # created on the first append only
    index.append(AbortedTxn(7002, 6, 14, 3))
    index.flush()
    assert path.read_bytes() == original.read_bytes()  # byte-identical to Kafka's
    index.append(AbortedTxn(9, 20, 30, 18))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(9, 21, 30, 18))
    assert [t.producer_id for t in index.collect_aborted(15, 25)[0]] == [9]
    found, done = index.collect_aborted(0, 16)  # 9's transaction starts at 20, past the bound; its LSO 18 ends the search
    assert [t.producer_id for t in found] == [7002] and done
    index.truncate_to(30)
    assert [t.last_offset for t in index.all()] == [14]
    index.sanity_check()
    with pytest.raises(CorruptIndexError):
        TxnIndex(FileSystem(), str(path), 100).sanity_check()  # an entry below the segment base
    index.close()


def test_version_above_zero_is_refused(tmp_path):
    path = tmp_path / "x.txnindex"
    shutil.copy(vectors.case_dir("txn-0") / "00000000000000000000.txnindex", path)
    data = bytearray(path.read_bytes())
    data[0] = 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        TxnIndex(FileSystem(), str(path), 0).all()


def test_delete_log_removes_the_partition(tmp_path):
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_log("gone", 0)
        manager.delete_log("gone", 0)
        assert ("gone", 0) not in manager.slots() and not (tmp_path / "gone-0").exists()
    assert not [p for p in tmp_path.iterdir() if "gone" in p.name]
