"""A follower's append in one call (engine.log.follower_append, both twins): whole, CRC-valid data batches above the log end
skip the general path, and must leave what that path leaves. The model here is the general path itself (the one-call
append switched off), run on the same appends: the same answers and errors, the same files, the same producer state,
leader epochs, LEO and recovery point; and such appends must really take the one call."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from engine.common.clock import ManualClock
from engine.common.errors import KafkaError
from engine.log.unified_log import UnifiedLog as Log
from tests.conftest import IMPLEMENTATIONS
from tests.log_checks import GeneralPathOnly, appended_state, files_of, model_log

T0 = 1_700_000_000_000
PRODUCERS = (5, 9)

# one batch of the leader's log: (kind, records, compression, offset gap before it, leader epoch step, timestamp step)
BATCHES = st.lists(st.tuples(st.sampled_from(["plain", "idempotent", "idempotent", "txn", "commit", "abort", "bump"]),
                             st.integers(1, 6), st.sampled_from(["none", "none", "zstd"]), st.sampled_from([0, 0, 3]),
                             st.sampled_from([0, 0, 0, 1]), st.integers(-20, 40)),
                   min_size=1, max_size=30)
# how the follower takes them: (batches in the fetch, what happens to it)
FETCHES = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["ok"] * 6 + ["corrupt", "partial", "again",
                                                                                "swap", "empty"])),
                  min_size=1, max_size=30)
CONFIGS = st.fixed_dictionaries({"segment.bytes": st.sampled_from([700, 1 << 20]),
                                 "max.message.bytes": st.sampled_from([300, 1 << 20]),
                                 "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
                                 "flush.messages": st.sampled_from([1, 7, 2**63 - 1])})


def _leader_batches(spec: list) -> list[bytes]:
    """The batches a leader's log holds: producers' data batches and markers, offset gaps as compaction leaves."""
    out, offset, epoch, ts = [], 0, 0, T0
    producers = {pid: {"epoch": 0, "seq": 0} for pid in PRODUCERS}
    for i, (kind, n, compression, gap, epoch_step, ts_step) in enumerate(spec):
        offset, epoch, ts = offset + gap, epoch + epoch_step, ts + ts_step
        pid = PRODUCERS[i % 2]
        p = producers[pid]
        if kind in ("commit", "abort"):
            out.append(engine.encode_control_batch(kind, base_offset=offset, producer_id=pid, producer_epoch=p["epoch"],
                                                   coordinator_epoch=i, timestamp_ms=ts, partition_leader_epoch=epoch))
            offset += 1
            continue
        if kind == "bump":
            p["epoch"], p["seq"] = p["epoch"] + 1, 0
        records = [(b"k%d" % j, b"v" * (j * 20), [("h", b"x")] if j % 2 else None, ts + j) for j in range(n)]
        fields = {} if kind == "plain" else {"producer_id": pid, "producer_epoch": p["epoch"],
                                             "base_sequence": p["seq"], "transactional": kind == "txn"}
        out.append(engine.encode_batch(records, base_offset=offset, compression=compression,
                                       partition_leader_epoch=epoch, **fields))
        offset += n
        if kind != "plain":
            p["seq"] += n
    return out


def _run(directory, impl: str, fast: bool, config: dict, batches: list[bytes], fetches: list) -> dict:
    """The fetches appended to a fresh follower log: each answer (or error), the files and the state left."""
    clock = ManualClock(T0)
    with model_log(directory, impl, config, clock) as lg:
        if not fast:
            lg._follower_append = GeneralPathOnly()
        answers, at, last = [], 0, b""
        for count, what in fetches:
            clock.advance(3)
            data = b"".join(batches[at:at + count])
            if what == "corrupt" and data:
                data = data[:-1] + bytes([data[-1] ^ 1])
            elif what == "partial":
                data = data[:-1]
            elif what == "again":
                data = last
            elif what == "swap":  # the fetch's batches, last first
                data = b"".join(reversed(batches[at:at + count]))
            elif what == "empty":
                data = b""
            try:
                answers.append(tuple(lg.append_as_follower(memoryview(data))))
            except KafkaError as exc:
                answers.append((type(exc).__name__, str(exc).replace(str(directory), "<log>")))
            else:
                if what == "ok":
                    at, last = at + count, data
        got = {"answers": answers, **appended_state(lg), "aborted": [list(s.txn_index.all()) for s in lg.segments]}
    return {**got, "files": files_of(directory)}


@settings(max_examples=40, deadline=None)
@given(config=CONFIGS, spec=BATCHES, fetches=FETCHES)
def test_the_one_call_follower_append_leaves_what_the_general_path_leaves(tmp_path_factory, config, spec, fetches):
    path = tmp_path_factory.mktemp("follower")
    batches = _leader_batches(spec)
    for impl in IMPLEMENTATIONS:
        general = _run(path / impl / "general", impl, False, config, batches, fetches)
        fast = _run(path / impl / "fast", impl, True, config, batches, fetches)
        assert fast == general, impl


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_replicated_data_batches_take_the_one_call(impl, tmp_path, monkeypatch):
    """Data batches, several to a fetch, with and without producers: with the native core never checked or
    accounted for by the general path; a marker is (the Python twin leaves every append to the general path)."""
    calls = []
    real = Log._validate
    monkeypatch.setattr(Log, "_validate", lambda self, data: calls.append(bytes(data)) or real(self, data))
    spec = [("idempotent", 3, "none", 0, 0, 1), ("plain", 2, "zstd", 0, 1, 1), ("txn", 4, "none", 2, 0, 1),
            ("idempotent", 1, "none", 0, 0, 1), ("abort", 1, "none", 0, 0, 1)]
    batches = _leader_batches(spec)
    fetches = [b"".join(batches[:2]), batches[2] + batches[3], batches[4]]
    with model_log(tmp_path / "t-0", impl, {}, ManualClock(T0)) as lg:
        info = lg.append_as_follower(fetches[0])
        assert (info.first_offset, info.last_offset, info.batches) == (0, 4, 2)
        lg.append_as_follower(fetches[1])
        assert lg.log_end_offset == 12
        lg.append_as_follower(fetches[2])
        assert calls == (fetches[2:] if impl == "cython" else fetches)
        assert list(lg.leader_epochs.entries) == [(0, 0), (1, 3)]
        txn = lg.producer_state.producers[PRODUCERS[0]]
        assert txn.txn_first_offset == -1 and [t.first_offset for t in lg.producer_state.unreplicated] == [7]
