"""Writes staged by another process and committed by the engine that owns the directory (engine.staged_writes):
the path Spark's kafkalog sink takes when the application has the directory open. The owner here is this process's
engine, or a child process that dies or hangs at a chosen point of the protocol."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import engine
from engine import KafkaStorageError, KafkaTimeoutError, TopicPartition
from engine.common.errors import CorruptRecordError, InvalidRecordError
from engine.record.codec import encode_batch, encode_control_batch
from engine.staged_writes import apply as sw_apply
from engine.staged_writes import layout as sw
from engine.staged_writes import queue as sw_queue
from engine.tools import staged_commit as sw_requester
from tests.log_checks import read_log
from tests.staging import stage_batches, stage_values

def _stage(path, job: str, values: list[bytes], batches: int = 1, name: str = "attempt") -> str:
    return stage_values(path, job, "t", values, rows_per_batch=max(1, -(-len(values) // batches)), name=name,
                        partition=0, timestamp=1_700_000_000_000)


def _request(path, job: str, values: list[bytes], batch_id=None, **stage) -> dict:
    return {"job": job, "files": [_stage(path, job, values, **stage)], "transactional_id": "sink", "sink_id": "s",
            "batch_id": batch_id}


def _committed_values(path) -> list[bytes]:
    with engine.open(path, background=False) as e:
        return [value for _, _, value in read_log(e, "t")]


def test_the_owner_commits_a_staged_write_in_one_transaction(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        req = _request(tmp_path, "j1", [b"a", b"b"], batch_id=3)
        result = {}
        requester = threading.Thread(target=lambda: result.update(n=sw_requester.request(str(tmp_path), req, 60_000)))
        requester.start()
        while requester.is_alive():  # what the engine's staged-writes thread does
            e.apply_staged_writes()
            requester.join(0.02)
        assert result == {"n": 2}
        assert [v for _, _, v in read_log(e, "t")] == [b"a", b"b"]
        assert e.committed("s", TopicPartition("t", 0)).offset == 4  # the micro-batch's progress, in the transaction
        again = {**req, "files": [_stage(tmp_path, "j1", [b"again"])]}
        assert sw_apply.apply(e, again) == 2  # the same job again: its marker answers with the rows it appended
        assert sw_apply.apply(e, {**again, "job": "j1b"}) == 0  # another job of a micro-batch the sink passed: skipped
        assert [v for _, _, v in read_log(e, "t")] == [b"a", b"b"]
        sw.discard(str(tmp_path), "j1")
        assert not os.path.exists(sw.staging_dir(str(tmp_path)))


def test_a_request_nobody_applies_times_out_and_is_withdrawn(tmp_path):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        req = _request(tmp_path, "j2", [b"x"])
        with pytest.raises(KafkaTimeoutError, match="withdrawn"):
            sw_requester.request(str(tmp_path), req, 100)
        assert e.apply_staged_writes() == 0 and read_log(e, "t") == []
        assert not os.path.exists(sw.staging_dir(str(tmp_path)))


def test_a_batch_write_is_applied_once_by_its_job_marker(tmp_path):
    """A batch write (no batch id) that lands records its job: the same job again appends nothing and answers with
    the rows it appended; other jobs still land, and the marker stays within its bytes."""
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        assert sw_apply.apply(e, _request(tmp_path, "b1", [b"1", b"2", b"3"])) == 3
        assert sw_apply.apply(e, _request(tmp_path, "b1", [b"1", b"2", b"3"])) == 3
        for i in range(200):
            sw_apply.apply(e, _request(tmp_path, f"job-{i:04d}-{'x' * 40}", [b"n"]))
        marker = e.committed("s", TopicPartition("t", 0))
        assert len(marker.metadata) <= sw_apply.JOB_MARKER_BYTES
        assert list(sw_apply.jobs_in(marker))[-1] == f"job-0199-{'x' * 40}"
        assert len(read_log(e, "t")) == 3 + 200


def test_a_job_is_streamed_one_batch_at_a_time_and_a_withdrawal_aborts_it(tmp_path):
    values = [b"v%d" % i for i in range(30)]
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        seen = []

        def still_wanted():
            seen.append(e.log("t", 0).log_end_offset)
            return len(seen) < 3
        with pytest.raises(sw_apply.Withdrawn):
            sw_apply.apply(e, _request(tmp_path, "s1", values, batches=5), still_wanted)
        assert seen == [0, 6, 12]  # one staged batch's rows appended between two questions
        assert sw_apply.apply(e, _request(tmp_path, "s2", values, batches=5)) == 30
    assert sorted(_committed_values(tmp_path)) == sorted(values)  # the withdrawn job's rows were aborted


def test_an_owner_failure_of_any_kind_reaches_the_requester_typed_and_in_time(tmp_path, monkeypatch):
    """A staged file gone before the owner applies it (not a KafkaError inside the owner): the requester gets a typed
    error at once, never a spin to its deadline and past it."""
    with engine.open(tmp_path) as e:  # the background thread applies
        e.create_topic("t")
        req = _request(tmp_path, "gone", [b"x"])
        os.remove(req["files"][0])
        with waits_counted(monkeypatch) as waited, \
                pytest.raises(KafkaStorageError, match="the staged write failed in the process that owns"):
            sw_requester.request(str(tmp_path), req, 10_000)
        assert waited.slept < 10.0  # answered before its deadline: no spin to it and past it
        req = _request(tmp_path, "garbage", [b"x"])
        with open(req["files"][0], "wb") as f:
            f.write(b"not batches")
        with pytest.raises(engine.CorruptRecordError, match="a staged batch file is damaged"):
            sw_requester.request(str(tmp_path), req, 10_000)
        assert read_log(e, "t") == []
        assert sw_requester.request(str(tmp_path), _request(tmp_path, "ok", [b"fine"]), 10_000) == 1


class _Waits:
    """The requester's clock in a test: time passes only while it sleeps (it really sleeps, so the owner runs), and
    its naps and attempts to open the directory are counted."""

    def __init__(self) -> None:
        self.slept, self.naps, self.opens = 0.0, 0, 0

    def monotonic(self) -> float:
        return self.slept

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.slept += seconds
        self.naps += 1


@contextlib.contextmanager
def waits_counted(monkeypatch):
    waits, take_over = _Waits(), sw_requester._take_over

    def counted(path, deadline):
        waits.opens += 1
        return take_over(path, deadline)
    monkeypatch.setattr(sw_requester, "time", waits)
    monkeypatch.setattr(sw_requester, "_take_over", counted)
    yield waits
    monkeypatch.undo()


OWNER = textwrap.dedent("""
    import os, signal, sys, time
    import engine
    from engine.staged_writes import queue
    path, how = sys.argv[1], sys.argv[2]
    e = engine.open(path)
    e.create_topic("t") if "t" not in e.list_topics() else None
    real_answer, real_rename = queue.StagedWrites._answer, queue.rename_state
    def answer(self, job, req, outcome):  # committed, then dies before the answer is written
        os.kill(os.getpid(), signal.SIGKILL)
    def rename(fs, src, dst):
        done = real_rename(fs, src, dst)
        if dst.endswith("." + how):  # stops at this state (hangs: the requester's deadline passes)
            print("reached", flush=True)
            time.sleep(3600)
        return done
    if how == "answer":
        queue.StagedWrites._answer = answer
    else:
        queue.rename_state = rename
    print("ready", flush=True)
    time.sleep(3600)
""")


@pytest.fixture
def owner(tmp_path):
    """A child process that owns `tmp_path` and dies or hangs at a chosen point of the protocol."""
    children = []

    def start(how: str) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), how], stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "ready"
        return child
    yield start
    for child in children:
        child.kill()
        child.wait()


@pytest.mark.parametrize("state", ["applying", "committing"])
def test_a_requester_is_answered_within_its_timeout_and_a_second_whatever_the_owner_does(tmp_path, owner, state,
                                                                                     monkeypatch):
    """The owner claims the request and hangs (applying: before its commit point; committing: in its commit). The
    requester answers by its deadline (withdrawn: never applied) or a second after it (the outcome unknown), sleeping
    while it waits. Its time is the sum of its sleeps (a clock the test drives), so a loaded machine changes nothing."""
    child = owner(state)
    req = _request(tmp_path, f"hang-{state}", [b"x"])
    with waits_counted(monkeypatch) as waited, \
            pytest.raises(KafkaTimeoutError, match="withdrawn" if state == "applying" else "unknown"):
        sw_requester.request(str(tmp_path), req, 2_000)
    assert child.stdout.readline().strip() == "reached"
    # by its deadline, or a second of grace after it; it sleeps between looks and tries to open the directory at
    # most once per PROBE_S (never a busy loop)
    assert waited.slept <= 2.0 + (sw_requester.GRACE_S if state == "committing" else 0) + sw_requester.POLL_S
    assert waited.naps >= waited.slept / sw_requester.POLL_S - 1 and waited.opens <= 2.0 / sw_requester.PROBE_S + 1
    child.kill()
    child.wait()
    left = os.listdir(sw.requests_dir(str(tmp_path))) if os.path.exists(sw.requests_dir(str(tmp_path))) else []
    assert not [name for name in left if name.startswith(req["job"] + ".")], left  # nothing of it left to apply
    if state == "applying":
        assert _committed_values(tmp_path) == []  # withdrawn: its transaction never commits


def test_an_owner_killed_between_commit_and_answer_applies_the_job_once(tmp_path, owner):
    """The owner commits, then dies before writing the answer: the requester finds the directory free, opens it,
    queues the dead owner's request again, and the job's marker answers it without appending it twice."""
    child = owner("answer")
    values = [b"once-%d" % i for i in range(1_000)]
    assert sw_requester.request(str(tmp_path), _request(tmp_path, "commit-then-die", values, batches=4), 30_000) == 1_000
    assert child.wait(10) == -signal.SIGKILL
    assert _committed_values(tmp_path) == values
    assert not os.path.exists(sw.staging_dir(str(tmp_path)))


def test_an_owner_killed_mid_apply_leaves_the_requester_to_apply_it(tmp_path):
    """kill -9 of the owner while its transaction is open: the requester takes the directory over, the open
    transaction is aborted and the job applied whole, once."""
    script = textwrap.dedent("""
        import os, signal, sys
        import engine
        from engine.clients.producer import Producer
        e = engine.open(sys.argv[1])
        e.create_topic("t")
        real = Producer.append_batch
        def append_batch(self, *args, **kwargs):
            real(self, *args, **kwargs)
            self.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        Producer.append_batch = append_batch
        print("ready", flush=True)
        import time; time.sleep(3600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        values = [b"whole-%d" % i for i in range(500)]
        assert sw_requester.request(str(tmp_path), _request(tmp_path, "mid", values, batches=5), 30_000) == 500
        assert child.wait(10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
    assert _committed_values(tmp_path) == values


def test_one_apply_at_a_time_on_a_thread_that_leaves_housekeeping_alone(tmp_path, monkeypatch):
    """Requests from many requesters are applied one at a time, on the engine's staged-writes thread: while one is
    under way the engine's background thread goes on with its tasks (here: the next staged-writes poll)."""
    running, overlaps, threads, polls = [0], [], set(), []
    real_apply, real_poll = sw_apply.apply, sw_queue.StagedWrites.poll
    gate = threading.Event()

    def apply(e, req, *args):
        running[0] += 1
        overlaps.append(running[0])
        threads.add(threading.current_thread().name)
        gate.wait(10)
        try:
            return real_apply(e, req, *args)
        finally:
            running[0] -= 1

    def poll(self):
        polls.append(time.monotonic())
        return real_poll(self)
    monkeypatch.setattr("engine.staged_writes.queue.apply", apply)
    monkeypatch.setattr(sw_queue.StagedWrites, "poll", poll)
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        results = {}
        requesters = [threading.Thread(target=lambda i=i: results.update(
            {i: sw_requester.request(str(tmp_path), _request(tmp_path, f"many-{i}", [b"%d" % i] * (i + 1)), 30_000)}))
            for i in range(4)]
        for r in requesters:
            r.start()
        deadline = time.monotonic() + 30
        while not overlaps and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = len(polls)
        while len(polls) < seen + 3 and time.monotonic() < deadline:  # polls go on while the first apply waits
            time.sleep(0.05)
        assert overlaps and len(polls) >= seen + 3, (overlaps, len(polls), seen)
        gate.set()
        for r in requesters:
            r.join(30)
        assert results == {i: i + 1 for i in range(4)}
        assert max(overlaps) == 1 and len(overlaps) == 4
        assert len(threads) == 1 and next(iter(threads)).startswith("kafkalog-staged-writes")


def test_closing_the_owner_mid_apply_queues_the_job_for_the_next_owner(tmp_path, monkeypatch):
    """close() while a job is under way: the job stops at its next batch, its transaction is aborted, its request
    queued again; the requester then takes the directory over and applies it once."""
    from engine.clients.producer import Producer

    real_append = Producer.append_batch
    started, release = threading.Event(), threading.Event()

    def append_batch(self, *args, **kwargs):
        started.set()
        release.wait(10)
        return real_append(self, *args, **kwargs)
    monkeypatch.setattr(Producer, "append_batch", append_batch)
    e = engine.open(tmp_path)
    e.create_topic("t")
    values = [b"c%d" % i for i in range(40)]
    result = {}
    requester = threading.Thread(target=lambda: result.update(
        n=sw_requester.request(str(tmp_path), _request(tmp_path, "closing", values, batches=4), 30_000)))
    requester.start()
    assert started.wait(10)
    closer = threading.Thread(target=e.close)
    closer.start()
    time.sleep(0.1)
    release.set()
    closer.join(10)
    requester.join(30)
    assert not closer.is_alive() and not requester.is_alive()
    assert result == {"n": 40}
    assert _committed_values(tmp_path) == values


@pytest.mark.parametrize("bad", [{"job": "../x", "files": [], "transactional_id": "t", "sink_id": "s",
                                  "batch_id": None},
                                 {"job": "j", "files": "f", "transactional_id": "t", "sink_id": "s", "batch_id": None},
                                 {"job": "j", "files": [], "transactional_id": "", "sink_id": "s", "batch_id": None},
                                 {"job": "j", "files": [], "transactional_id": "t", "sink_id": "s", "batch_id": -1},
                                 {"job": "j"}, [1]])
def test_a_malformed_request_is_refused_typed_before_anything_is_queued(tmp_path, bad):
    with pytest.raises(engine.InvalidConfigurationError):
        sw_requester.request(str(tmp_path), bad, 1_000)
    assert not os.path.exists(sw.requests_dir(str(tmp_path)))


def test_the_entry_point_reports_one_typed_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "engine.tools.staged_commit", str(tmp_path), "soon"], input="{}",
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.startswith("InvalidConfigurationError: usage")
    with engine.open(tmp_path) as e:
        e.create_topic("t")
    req = _request(tmp_path, "cli", [b"from-the-jvm"])
    import json
    run = subprocess.run([sys.executable, "-m", "engine.tools.staged_commit", str(tmp_path), "30000"],
                         input=json.dumps(req), capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout.strip()) == (0, "1"), run.stderr
    assert _committed_values(tmp_path) == [b"from-the-jvm"]


def test_a_job_folder_is_made_even_when_the_staging_root_vanishes_meanwhile(tmp_path, monkeypatch):
    """A task stages while the owner removes the empty staging root (an answered job's discard): the root vanishes
    between the two mkdirs of the job's folder, which is made again rather than failing the task."""
    real, calls = os.makedirs, []

    def racing(name, exist_ok=False):
        calls.append(name)
        if len(calls) == 1:
            real(name, exist_ok=exist_ok)
            os.rmdir(name)  # the owner's discard, right after
            os.rmdir(os.path.dirname(name))
            raise FileNotFoundError(2, "No such file or directory", name)
        return real(name, exist_ok=exist_ok)
    monkeypatch.setattr(sw.os, "makedirs", racing)
    folder = sw.make_job_dir(str(tmp_path), "job")
    assert os.path.isdir(folder) and calls.count(folder) == 2  # made, lost with the root, made again


def _log_batches(path, topic: str, partition: int) -> list:
    from engine.record.codec import iter_batches

    data = b"".join(p.read_bytes() for p in sorted((path / f"{topic}-{partition}").glob("*.log")))
    return list(iter_batches(data))


def test_a_file_of_encoded_batches_is_appended_as_the_transactions_own_batches(tmp_path):
    """The JVM sink's tasks encode Kafka batches: the commit appends each with the transaction's producer id, epoch
    and next sequences (the CRC recomputed), and stamps with its own time the batches whose rows had no timestamp."""
    first = [(b"k%d" % i, b"v%d" % i, [("h", b"x")] if i % 2 else [], 1_600_000_000_000 + i) for i in range(5)]
    second = [(None, b"w%d" % i, [], 1_600_000_000_100) for i in range(3)]
    unstamped = [(None, b"u%d" % i, [], 0) for i in range(4)]
    file = stage_batches(str(tmp_path), "enc", [("t", 0, first, False), ("t", 1, unstamped, True),
                                                ("t", 0, second, False)])
    req = {"job": "enc", "files": [file], "transactional_id": "sink", "sink_id": "s", "batch_id": None}
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t", 2)
        before = e.clock.time_ms()
        assert sw_apply.apply(e, req) == 12
        after = e.clock.time_ms()
        assert [(k, v) for _, k, v in read_log(e, "t", partition=0)] == [(k, v) for k, v, _, _ in first + second]
        assert [v for _, _, v in read_log(e, "t", partition=1)] == [v for _, v, _, _ in unstamped]
    data = [b for b in _log_batches(tmp_path, "t", 0) if not b.is_control]
    assert [(b.base_sequence, b.records_count, b.is_transactional) for b in data] == [(0, 5, True), (5, 3, True)]
    assert len({(b.producer_id, b.producer_epoch) for b in data}) == 1 and data[0].producer_id >= 0
    assert [r.headers for b in data for r in b.records()] == [h for _, _, h, _ in first + second]
    assert [r.timestamp for b in data for r in b.records()] == [ts for _, _, _, ts in first + second]
    (stamped,) = [b for b in _log_batches(tmp_path, "t", 1) if not b.is_control]
    assert before <= stamped.max_timestamp <= after
    assert {r.timestamp for r in stamped.records()} == {stamped.max_timestamp}


@pytest.mark.parametrize("damage", ["torn", "bit flip", "head"])
def test_a_damaged_file_of_batches_fails_the_commit_typed_naming_it_and_commits_nothing(tmp_path, damage):
    records = [(None, b"v%d" % i, [], 1_600_000_000_000) for i in range(20)]
    file = stage_batches(str(tmp_path), "bad", [("t", 0, records, False)] * 3)
    data = bytearray(open(file, "rb").read())
    frame = len(data) // 3
    if damage == "torn":
        data = data[:2 * frame + frame // 2]
    elif damage == "bit flip":
        data[frame + frame // 2] ^= 0x10
    else:
        data[2 * frame:2 * frame + 2] = (4000).to_bytes(2, "big")
    open(file, "wb").write(data)
    req = {"job": "bad", "files": [file], "transactional_id": "sink", "sink_id": "s", "batch_id": None}
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        with pytest.raises(CorruptRecordError) as err:
            sw_apply.apply(e, req)
        assert err.value.file == file and err.value.offset == (frame if damage == "bit flip" else 2 * frame)
        assert read_log(e, "t") == []


@pytest.mark.parametrize("batch,why", [
    (encode_batch([(None, b"v", [], 0)], compression="gzip"), "uncompressed"),
    (encode_batch([(None, b"v", [], 0)])[:-1], "whole"),
    (encode_control_batch("commit", base_offset=0, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                          timestamp_ms=0), "uncompressed data batch"),
])
def test_append_batch_takes_only_a_whole_uncompressed_data_batch(tmp_path, batch, why):
    with engine.open(tmp_path, background=False) as e:
        e.create_topic("t")
        with e.producer() as p:
            with pytest.raises(InvalidRecordError, match=why):
                p.append_batch("t", 0, bytearray(batch))
            assert p.append_batch("t", 0, bytearray(encode_batch([(None, b"ok", [], 5)]))) == 0
        assert [v for _, _, v in read_log(e, "t")] == [b"ok"]
