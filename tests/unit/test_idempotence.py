"""Idempotent producers at the log (kafka-format.md §10.1) and through the Producer, including a
retry whose first append landed but whose acknowledgement was lost, snapshots and restarts."""
from __future__ import annotations

import os

import pytest

import engine
from engine.common.errors import InvalidProducerEpochError, KafkaTimeoutError, OutOfOrderSequenceError

NOW = 1_700_000_000_000  # ManualClock's default start: producer entries are fresh, not expired


@pytest.fixture
def eng(tmp_path):
    e = engine.open(str(tmp_path / "data"), clock=engine.ManualClock(), background=False)
    e.create_topic("t", partitions=1)
    yield e
    e.close()


def batch(seq, n=3, pid=42, epoch=0, tag=b"x"):
    return engine.encode_batch([(None, tag + b"%d" % i, None, NOW + i) for i in range(n)], producer_id=pid,
                               producer_epoch=epoch, base_sequence=seq)


def values(e):
    with e.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        return [r.value for r in c]


def test_duplicate_of_any_of_the_last_five_batches_returns_its_offsets(eng):
    lg = eng.log("t", 0)
    firsts = [lg.append_as_leader(batch(3 * i)).first_offset for i in range(6)]
    end = lg.log_end_offset
    for i in range(1, 6):
        info = lg.append_as_leader(batch(3 * i))
        assert info.duplicate and (info.first_offset, info.last_offset) == (firsts[i], firsts[i] + 2)
    assert lg.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):  # the 6th-newest is no longer remembered
        lg.append_as_leader(batch(0))


def test_reordered_retry_is_refused_not_reordered(eng):
    """Seed 003: A fails, B (the next sequence) arrives first. Idempotence refuses B until A is in."""
    lg = eng.log("t", 0)
    lg.append_as_leader(batch(0, 1, tag=b"P"))
    a, b = batch(1, 1, tag=b"A"), batch(2, 1, tag=b"B")
    with pytest.raises(OutOfOrderSequenceError):
        lg.append_as_leader(b)
    lg.append_as_leader(a)
    lg.append_as_leader(b)
    lg.update_high_watermark(lg.log_end_offset)
    assert values(eng) == [b"P0", b"A0", b"B0"]


def test_producer_retries_a_failed_batch_before_the_next(eng):
    real, attempts = eng.append, []

    def first_attempt_fails(topic, partition, data, *args):
        attempts.append(next(iter(engine.iter_batches(data))).base_sequence)
        if len(attempts) == 1:
            raise KafkaTimeoutError("A timed out before reaching the log")
        return real(topic, partition, data, *args)
    eng.append = first_attempt_fails
    with eng.producer(retry_backoff_ms=0, batch_size=0) as p:  # one record per batch: A, then B
        fa, fb = p.send("t", value=b"A"), p.send("t", value=b"B")
    assert attempts == [0, 0, 1] and (fa.get().offset, fb.get().offset) == (0, 1)
    assert values(eng) == [b"A", b"B"]


def test_without_idempotence_the_same_retry_reorders(eng):
    lg = eng.log("t", 0)
    lg.append_as_leader(engine.encode_batch([(None, b"B", None, 1)]))
    lg.append_as_leader(engine.encode_batch([(None, b"A", None, 1)]))
    lg.update_high_watermark(lg.log_end_offset)
    assert values(eng) == [b"B", b"A"]  # what idempotence prevents


def test_epochs(eng):
    lg = eng.log("t", 0)
    lg.append_as_leader(batch(0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(batch(3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append_as_leader(batch(5, epoch=2))  # a new epoch starts at 0
    lg.append_as_leader(batch(0, epoch=2))


def test_lost_acknowledgement_retry_appends_once(eng):
    """The append happens, then the acknowledgement is lost (a retriable timeout): the producer resends
    the same bytes and the log answers with the first append's offsets."""
    real, calls = eng.append, []

    def flaky(topic, partition, data, *args):
        info = real(topic, partition, data, *args)
        calls.append(info)
        if len(calls) == 1:
            raise KafkaTimeoutError("acknowledgement lost")
        return info
    eng.append = flaky
    with eng.producer(retry_backoff_ms=0) as p:
        futures = [p.send("t", value=b"v%d" % i) for i in range(5)]
        p.flush()
    assert [f.get().offset for f in futures] == [0, 1, 2, 3, 4]
    assert len(calls) == 2 and calls[1].duplicate and not calls[0].duplicate
    assert values(eng) == [b"v%d" % i for i in range(5)]


def test_without_idempotence_a_lost_ack_duplicates(eng):
    real, calls = eng.append, []

    def flaky(topic, partition, data, *args):
        calls.append(real(topic, partition, data, *args))
        if len(calls) == 1:
            raise KafkaTimeoutError("acknowledgement lost")
        return calls[-1]
    eng.append = flaky
    with eng.producer(acks=1, retry_backoff_ms=0) as p:
        p.send("t", value=b"once").get()
    assert values(eng) == [b"once", b"once"]


def test_exhausted_retries_fail_the_future_and_bump_the_epoch(eng):
    def down(topic, partition, data, *args):
        raise KafkaTimeoutError("unreachable")
    real = eng.append
    eng.append = down
    p = eng.producer(retries=2, retry_backoff_ms=0)
    f = p.send("t", value=b"lost")
    p.flush()
    assert isinstance(f.exception, KafkaTimeoutError)
    eng.append = real
    assert p.send("t", value=b"next").get().offset == 0 and p.producer_epoch == 1
    p.close()


def test_producer_state_survives_close_and_reopen(tmp_path):
    path = str(tmp_path / "data")
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        e.create_topic("t", config={"segment.bytes": 300})
        lg = e.log("t", 0)
        for i in range(10):
            lg.append_as_leader(batch(3 * i))
        assert len(lg.segments) > 1
    snaps = sorted(f for f in os.listdir(os.path.join(path, "t-0")) if f.endswith(".snapshot"))
    assert snaps[-1] == "%020d.snapshot" % 30  # the clean-shutdown snapshot at the log end
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        info = e.log("t", 0).append_as_leader(batch(27))
        assert info.duplicate and info.first_offset == 27
        with e.producer() as p:
            assert p.producer_id >= 1  # never reuses an id handed out before


def test_a_new_log_has_no_snapshot_until_it_has_offsets_to_cover(tmp_path):
    # Kafka's ProducerStateManager starts its snapshot offset at the log start: an empty log needs no snapshot
    path = str(tmp_path / "data")
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        e.create_topic("t")
        assert not [f for f in os.listdir(os.path.join(path, "t-0")) if f.endswith(".snapshot")]
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        assert not [f for f in os.listdir(os.path.join(path, "t-0")) if f.endswith(".snapshot")]
        e.log("t", 0).append_as_leader(batch(0))
    assert [f for f in os.listdir(os.path.join(path, "t-0")) if f.endswith(".snapshot")] == ["%020d.snapshot" % 3]


def test_state_rebuilt_from_the_log_when_snapshots_are_gone_or_corrupt(tmp_path):
    path = str(tmp_path / "data")
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        e.create_topic("t")
        for i in range(4):
            e.log("t", 0).append_as_leader(batch(3 * i))
    part = os.path.join(path, "t-0")
    for f in os.listdir(part):
        if f.endswith(".snapshot"):
            with open(os.path.join(part, f), "r+b") as fh:
                fh.seek(10)
                fh.write(b"\xff\xff")
    os.remove(os.path.join(path, ".kafka_cleanshutdown"))  # not clean: Kafka would replay the log too
    with engine.open(path, clock=engine.ManualClock(), background=False) as e:
        assert e.log("t", 0).append_as_leader(batch(9)).duplicate
        with pytest.raises(OutOfOrderSequenceError):
            e.log("t", 0).append_as_leader(batch(20))


def test_expired_producers_are_forgotten(tmp_path):
    clock = engine.ManualClock(start_ms=10_000)
    with engine.open(str(tmp_path / "d"), clock=clock, background=False, producer_id_expiration_ms=1000) as e:
        e.create_topic("t")
        lg = e.log("t", 0)
        lg.append_as_leader(engine.encode_batch([(None, b"v", None, 10_000)], producer_id=5, producer_epoch=0,
                                                base_sequence=0))
        with pytest.raises(OutOfOrderSequenceError):
            lg.append_as_leader(batch(7, pid=5))
        clock.advance(1000)
        assert e.expire_producers() == 1
        lg.append_as_leader(batch(7, pid=5))  # an unknown producer may start anywhere
