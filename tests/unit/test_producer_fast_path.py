"""A leader's append of one batch in one call (engine.log.leader_append, both twins, with engine.log.producer_state.next_batch and
the segment appender's append_batch): a batch without a producer id, or a client's batch that continues its producer
exactly (same epoch, the next sequence, the transaction state it already has), skips the general path's checks and
state update, and must leave what that path leaves. The model here is the general path itself (the one-call append
switched off), run on the same appends: the same answers and errors, the same files, the same producer state, leader
epochs and LEO; and such batches must really take the one call."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from engine.record import twins
from engine.common.clock import ManualClock
from engine.common.errors import KafkaError
from engine.segments import segment_appender
from engine.segments.fs import FileSystem
from engine.segments.local_log import LocalLog
from engine.segments.log_config import LogConfig
from tests.conftest import IMPLEMENTATIONS
from tests.log_checks import appended_state, files_of, model_log
from engine.log import producer_state
from engine.log.unified_log import CLIENT, COORDINATOR
from engine.log.unified_log import UnifiedLog as Log

T0 = 1_700_000_000_000
PRODUCERS = (5, 9)

# one step: (producer, what, records, clock advance); what: "next" continues the producer, "resend" repeats one of its
# earlier batches, "gap" skips a sequence, "bump"/"fence"/"bad-bump" move its epoch up (from sequence 0 / from a
# wrong sequence) or send an older one, "txn" sends its next batch as transactional, "commit"/"abort" a marker;
# "plain" a batch without a producer id, "coordinator" one appended as the coordinator's; "lead" starts a new leader
# epoch for the appends after it
STEPS = st.lists(st.tuples(st.sampled_from(PRODUCERS),
                           st.sampled_from(["next"] * 6 + ["resend", "gap", "bump", "fence", "bad-bump", "txn", "txn",
                                                           "commit", "abort", "plain", "plain", "coordinator",
                                                           "lead"]),
                           st.integers(1, 6), st.integers(0, 50)), min_size=1, max_size=40)
CONFIGS = st.fixed_dictionaries({"segment.bytes": st.sampled_from([700, 1 << 20]),
                                 "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
                                 "flush.messages": st.sampled_from([1, 7, 2**63 - 1])})


class _Never:
    """A one-call append that always leaves the append to the general path."""

    def append(self, data, leader_epoch, client):
        return None


def _run(directory, impl: str, fast: bool, config: dict, steps: list) -> dict:
    """The steps on a fresh log: each step's answer (or error), the files and the producer state."""
    clock = ManualClock(T0)
    with model_log(directory, impl, config, clock) as lg:
        if not fast:
            lg._leader_append = _Never()
        state = {pid: {"epoch": 1, "seq": 0, "sent": []} for pid in PRODUCERS}
        answers, leader = [], {"epoch": 0}
        for pid, what, n, advance in steps:
            clock.advance(advance)
            if what == "lead":
                leader["epoch"] += 1
            else:
                answers.append(_step(lg, state[pid], pid, what, n, clock, leader["epoch"]))
        answers = [(a[0], a[1].replace(str(directory), "<log>")) if isinstance(a[0], str) else a for a in answers]
        got = {"answers": answers, **appended_state(lg)}
    return {**got, "files": files_of(directory)}


def _step(lg: Log, s: dict, pid: int, what: str, n: int, clock: ManualClock, leader_epoch: int):
    if what in ("commit", "abort"):
        try:
            return tuple(lg.append_marker(what == "commit", pid, s["epoch"], 0, leader_epoch=leader_epoch))
        except KafkaError as exc:
            return type(exc).__name__, str(exc)
    if what in ("plain", "coordinator"):
        data = engine.encode_batch([(b"k%d" % i, b"v%d" % i, None, clock.time_ms() + i) for i in range(n)])
        try:
            return tuple(lg.append_as_leader(data, leader_epoch=leader_epoch,
                                             origin=COORDINATOR if what == "coordinator" else CLIENT))
        except KafkaError as exc:
            return type(exc).__name__, str(exc)
    if what == "resend" and s["sent"]:
        data = s["sent"][len(s["sent"]) // 2]
    else:
        epoch, seq = s["epoch"], s["seq"]
        if what == "gap":
            seq += 1
        elif what in ("bump", "bad-bump"):
            epoch, seq = epoch + 1, (0 if what == "bump" else seq)
        elif what == "fence":
            epoch -= 1  # the state starts at epoch 1: this one is 0, a valid and fenced epoch
        records = [(b"k%d" % i, b"v%d" % i, None, clock.time_ms() + i) for i in range(n)]
        data = engine.encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   transactional=what == "txn")
    try:
        info = lg.append_as_leader(data, leader_epoch=leader_epoch)
    except KafkaError as exc:
        return type(exc).__name__, str(exc)
    if what != "resend":
        s["sent"].append(data)
        if what in ("bump", "bad-bump"):
            s["epoch"] += 1
        s["seq"] = (0 if what == "bump" else s["seq"]) + n + (1 if what == "gap" else 0)
    return tuple(info)


@settings(max_examples=40, deadline=None)
@given(config=CONFIGS, steps=STEPS)
def test_the_fast_path_leaves_what_the_general_path_leaves(tmp_path_factory, config, steps):
    path = tmp_path_factory.mktemp("fast")
    for impl in IMPLEMENTATIONS:
        general = _run(path / impl / "general", impl, False, config, steps)
        fast = _run(path / impl / "fast", impl, True, config, steps)
        assert fast == general, impl


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("transactional", [False, True])
def test_in_sequence_batches_skip_the_general_checks(impl, transactional, tmp_path, monkeypatch):
    """After a producer's first batch (the general path: it opens the producer's state and, transactional, its
    transaction), its in-sequence batches are never validated or parsed by the general path."""
    monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
    calls = []
    for name in ("validate", "update", "find_duplicate"):
        real = getattr(producer_state.ProducerStateManager, name)
        monkeypatch.setattr(producer_state.ProducerStateManager, name,
                            lambda self, *a, _real=real, _name=name, **k: calls.append(_name) or _real(self, *a, **k))
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig(), ManualClock(T0))
    for i in range(6):
        data = engine.encode_batch([(b"k", b"v%d" % i, None, T0)] * 3, producer_id=5, producer_epoch=2,
                                   base_sequence=3 * i, transactional=transactional)
        assert lg.append_as_leader(data).first_offset == 3 * i
        if i == 0:
            assert calls and set(calls) <= {"validate", "update", "find_duplicate"}
            calls.clear()
    assert calls == []
    entry = lg.producer_state.producers[5]
    assert [(b.last_seq, b.last_offset) for b in entry.batches] == [(3 * i + 2, 3 * i + 2) for i in range(1, 6)]
    assert entry.txn_first_offset == (0 if transactional else -1)
    lg.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_batches_without_a_producer_take_the_one_call(impl, timestamps, tmp_path, monkeypatch):
    """A batch without a producer id never reaches the general path's write; natively, not even a Python frame of
    the LocalLog (the native LeaderAppender drives the segment's appender itself)."""
    monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
    calls = []
    for owner, name in ((Log, "_append"), (LocalLog, "append_batch")):
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name,
                            lambda self, *a, _real=real, _name=name: calls.append(_name) or _real(self, *a))
    lg = Log(FileSystem(), str(tmp_path / "t-0"), LogConfig.from_dict({"message.timestamp.type": timestamps}),
             ManualClock(T0))
    for i in range(6):
        data = engine.encode_batch([(b"k", b"v%d" % i, None, T0)] * 3)
        info = lg.append_as_leader(data, leader_epoch=i // 2)
        assert (info.first_offset, info.last_offset, info.leader_epoch, info.duplicate) == (3 * i, 3 * i + 2, i // 2,
                                                                                            False)
    assert calls == ([] if impl == "cython" else ["append_batch"] * 6)
    assert lg.leader_epochs.entries == [(0, 0), (1, 6), (2, 12)]
    assert lg.log_end_offset == lg.producer_state.map_end_offset == 18
    lg.close()
