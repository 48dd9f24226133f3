"""The clients used the way a kafka-python user writes code: send/get, callbacks, poll loops, seek by
time, per-key order, headers, null keys, tombstones; expected values come from what was sent."""
from __future__ import annotations

import threading

import pytest

import engine
import engine.clients.accumulator
from engine import TopicPartition
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)


@pytest.fixture
def eng(tmp_path):
    clock = engine.ManualClock()
    e = engine.open(str(tmp_path / "data"), clock=clock, background=False)
    e.create_topic("events", partitions=3)
    yield e
    e.close()


def consume_all(e, topic="events", **kw):
    with e.consumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=0, **kw) as c:
        return list(c)


def test_send_get_and_poll_round_trip(eng):
    with eng.producer() as p:
        md = p.send("events", key=b"car-42", value=b"hello", headers=[("src", b"can")], timestamp_ms=1234).get()
        assert (md.topic, md.offset, md.timestamp) == ("events", 0, 1234)
        assert md.partition == (engine.clients.accumulator.selected.murmur2(b"car-42") & 0x7FFFFFFF) % 3
        assert (md.serialized_key_size, md.serialized_value_size, md.serialized_header_size) == (6, 5, 6)
    c = eng.consumer(auto_offset_reset="earliest")
    c.assign([TopicPartition("events", md.partition)])
    got = c.poll(timeout_ms=0)
    (rec,) = got[TopicPartition("events", md.partition)]
    assert (rec.offset, rec.key, rec.value, rec.headers, rec.timestamp, rec.timestamp_type) == \
        (0, b"car-42", b"hello", [("src", b"can")], 1234, 0)
    assert (rec.serialized_key_size, rec.serialized_value_size, rec.serialized_header_size) == (6, 5, 6)
    assert c.position(TopicPartition("events", md.partition)) == 1


def test_order_per_key_nulls_and_tombstones(eng):
    sent = {}
    with eng.producer(linger_ms=0, batch_size=200) as p:
        for i in range(600):
            key = b"k%d" % (i % 7)
            value = None if i % 50 == 0 else b"v%d" % i  # tombstones
            p.send("events", key=key, value=value)
            sent.setdefault(key, []).append(value)
        for i in range(100):
            p.send("events", value=b"n%d" % i)
    records = consume_all(eng)
    by_key = {}
    for r in records:
        if r.key is not None:
            by_key.setdefault(r.key, []).append(r.value)
    assert by_key == sent
    assert sorted(r.value for r in records if r.key is None) == sorted(b"n%d" % i for i in range(100))
    for r in records:
        if r.key is not None:
            assert r.partition == (engine.clients.accumulator.selected.murmur2(r.key) & 0x7FFFFFFF) % 3


def test_callbacks_errbacks_and_flush(eng):
    seen, errors = [], []
    with eng.producer(linger_ms=60_000) as p:
        f = p.send("events", value=b"a", partition=1).add_callback(seen.append).add_errback(errors.append)
        assert not f.is_done  # lingering
        p.flush()
        assert f.is_done and f.succeeded() and seen[0].offset == 0 and not errors
        late = []
        f.add_callback(lambda extra, md: late.append((extra, md.offset)), "x")
        assert late == [("x", 0)]


def test_linger_expires_on_the_clock(eng):
    p = eng.producer(linger_ms=50)
    f = p.send("events", value=b"a", partition=0)
    assert not f.is_done
    eng.clock.advance(60)
    for _ in range(200):  # the sender thread notices the clock within its 50 ms polling
        if f.is_done:
            break
        threading.Event().wait(0.01)
    assert f.is_done and f.get().offset == 0
    p.close()


def test_seek_by_time_and_offsets(eng):
    tp = TopicPartition("events", 0)
    with eng.producer() as p:
        for i in range(10):
            p.send("events", value=b"%d" % i, partition=0, timestamp_ms=1000 + 10 * i)
    c = eng.consumer()
    c.assign([tp])
    found = c.offsets_for_times({tp: 1041})
    assert found[tp].offset == 5 and found[tp].timestamp == 1050
    assert c.offsets_for_times({tp: 5000})[tp] is None
    c.seek(tp, found[tp].offset)
    assert [r.value for r in c.poll()[tp]] == [b"%d" % i for i in range(5, 10)]
    assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 10}
    c.seek_to_beginning(tp)
    assert c.position(tp) == 0
    c.seek_to_end()
    assert c.position(tp) == 10 and c.poll() == {}


def test_auto_offset_reset_and_max_poll_records(eng):
    with eng.producer() as p:
        for i in range(30):
            p.send("events", value=b"%d" % i, partition=2)
    tp = TopicPartition("events", 2)
    latest = eng.consumer("events")
    assert latest.poll() == {} and latest.position(tp) == 30
    c = eng.consumer(auto_offset_reset="earliest", max_poll_records=7)
    c.assign([tp])
    sizes = []
    while True:
        got = c.poll()
        if not got:
            break
        sizes.append(len(got[tp]))
    assert sizes == [7, 7, 7, 7, 2]
    none = eng.consumer(auto_offset_reset="none")
    none.assign([tp])
    with pytest.raises(engine.NoOffsetForPartitionError):
        none.poll()


def test_fetch_max_bytes_still_returns_a_batch(eng):
    with eng.producer(batch_size=1 << 20, linger_ms=60_000) as p:
        for i in range(100):
            p.send("events", value=bytes(100), partition=0)
    c = eng.consumer(auto_offset_reset="earliest", fetch_max_bytes=10)
    c.assign([TopicPartition("events", 0)])
    assert len(c.poll()[TopicPartition("events", 0)]) == 100  # the first batch always comes whole


def test_consumer_stops_at_high_watermark(eng):
    with eng.producer() as p:
        for i in range(5):
            p.send("events", value=b"%d" % i, partition=0).get()  # one batch each: HW moves by batches
    lg = eng.log("events", 0)
    lg.update_high_watermark(3)
    assert [r.offset for r in consume_all(eng)] == [0, 1, 2]


def test_control_batches_are_skipped(eng):
    lg = eng.log("events", 0)
    lg.append_as_leader(engine.encode_batch([(None, b"a", None, 1)]))
    marker = engine.encode_control_batch("commit", base_offset=0, producer_id=7, producer_epoch=0, timestamp_ms=2)
    lg.append_as_leader(marker, allow_control=True)
    lg.append_as_leader(engine.encode_batch([(None, b"b", None, 3)]))
    lg.update_high_watermark(lg.log_end_offset)
    assert [(r.offset, r.value) for r in consume_all(eng)] == [(0, b"a"), (2, b"b")]


def test_poll_waits_for_an_append(eng):
    c = eng.consumer(auto_offset_reset="earliest")
    c.assign([TopicPartition("events", 1)])
    p = eng.producer()
    timer = threading.Timer(0.05, lambda: p.send("events", value=b"late", partition=1).get())
    timer.start()
    got = c.poll(timeout_ms=10_000)
    timer.join()
    assert [r.value for r in got[TopicPartition("events", 1)]] == [b"late"]
    p.close()


def test_send_batch(eng):
    with eng.producer() as p:
        p.send("events", value=b"first", partition=0)
        res = p.send_batch("events", [(None, b"%d" % i) for i in range(1000)], partition=0)
        keyed = p.send_batch("events", [(b"k%d" % i, b"v", [("h", b"1")], 5) for i in range(50)])
    assert sum(r.record_count for r in res) == 1000 and res[0].base_offset == 1
    assert sum(r.record_count for r in keyed) == 50
    values = [r.value for r in consume_all(eng) if r.partition == 0 and r.key is None]
    assert values == [b"first"] + [b"%d" % i for i in range(1000)]
    recs = [r for r in consume_all(eng) if r.key is not None]
    murmur2 = engine.clients.accumulator.selected.murmur2
    assert all(r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 3 and r.headers == [("h", b"1")]
               for r in recs) and len(recs) == 50


def test_custom_partitioner_and_serializers(eng):
    calls = []

    def last(key, all_partitions, available):
        calls.append(key)
        return all_partitions[-1]
    with eng.producer(partitioner=last, key_serializer=str.encode, value_serializer=str.encode) as p:
        md = p.send("events", key="k", value="v").get()
    assert md.partition == 2 and calls == [b"k"]
    (rec,) = consume_all(eng, key_deserializer=bytes.decode, value_deserializer=bytes.decode)
    assert (rec.key, rec.value) == ("k", "v")


def test_compression_round_trip(eng):
    for codec_name in ("gzip", "snappy", "lz4", "zstd"):
        with eng.producer(compression_type=codec_name) as p:
            p.send("events", value=b"z" * 1000, partition=0).get()
    assert [b.compression for b in engine.iter_batches(eng.log("events", 0).read(0).records)] == \
        ["gzip", "snappy", "lz4", "zstd"]
    assert [r.value for r in consume_all(eng)] == [b"z" * 1000] * 4


@pytest.mark.parametrize("kwargs, error", [
    ({"value": "text"}, InvalidRecordError),
    ({"value": b"v", "key": 5}, InvalidRecordError),
    ({"value": b"v", "headers": [(b"bytes-key", b"v")]}, InvalidRecordError),
    ({"value": b"v", "timestamp_ms": -5}, InvalidTimestampError),
    ({"value": b"v", "timestamp_ms": 1.5}, InvalidTimestampError),
    ({"value": b"v", "partition": 3}, UnknownTopicOrPartitionError),
    ({"value": b"v" * 2_000_000}, RecordTooLargeError),
])
def test_bad_sends_raise_typed_errors_and_write_nothing(eng, kwargs, error):
    with eng.producer() as p:
        with pytest.raises(error):
            p.send("events", **kwargs)
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("no-such-topic", value=b"v")
    assert all(part.log_end_offset == 0 for part in eng.describe_topic("events").partitions)


def test_topic_max_message_bytes_limits_sends(eng):
    eng.create_topic("small", config={"max.message.bytes": 1000})
    with eng.producer() as p:
        with pytest.raises(RecordTooLargeError):
            p.send("small", value=bytes(2000))
        assert p.send("small", value=bytes(500)).get().offset == 0


@pytest.mark.parametrize("kwargs", [
    {"acks": 2}, {"acks": 1, "enable_idempotence": True}, {"linger_ms": -1}, {"batch_size": "big"},
    {"compression_type": "brotli"}, {"bootstrap_servers": "x:9092"}, {"partitioner": 5},
])
def test_bad_producer_configs(eng, kwargs):
    with pytest.raises(InvalidConfigurationError):
        eng.producer(**kwargs)


def test_acks_zero_and_one(eng):
    with eng.producer(acks=0) as p:
        assert p.send("events", value=b"a", partition=0).get().offset == -1
        assert not p.idempotent
    with eng.producer(acks=1) as p:
        assert p.send("events", value=b"b", partition=0).get().offset == 1 and not p.idempotent


def test_bad_consumer_configs_are_refused(eng):
    for bad in ({"group_instance_id": "i-1"}, {"group_id": "g", "heartbeat_interval_ms": 10_000},
                {"group_id": "g", "partition_assignment_strategy": "fair"},
                {"group_id": "g", "partition_assignment_strategy": []},
                {"group_id": "g", "enable_auto_commit": "yes"}, {"group_id": "g", "session_timeout_ms": 0}):
        with pytest.raises(InvalidConfigurationError):
            eng.consumer("events", **bad)
    with pytest.raises(InvalidConfigurationError):
        eng.consumer("events", auto_offset_reset="smallest")
    with pytest.raises(InvalidConfigurationError):
        eng.consumer("events", isolation_level="read_commited")


def test_closed_clients_refuse_work(eng):
    p = eng.producer()
    p.close()
    with pytest.raises(IllegalStateError):
        p.send("events", value=b"v")
    c = eng.consumer("events")
    c.close()
    with pytest.raises(IllegalStateError):
        c.poll()


@pytest.mark.parametrize("lands", ["scan", "first read"])
def test_a_poll_that_close_interrupts_skips_the_partitions_taken_away(eng, lands):
    """Engine.close() closes its consumers from its own thread, possibly in the middle of a poll(): a group member's
    close revokes its partitions, and the poll returns what it read before, without a KeyError for a partition gone
    from the assignment, and never puts one back. The close lands while the poll looks up its partitions for the
    scan of their bounds, or while it reads the first partition with records."""
    c = eng.consumer("events", auto_offset_reset="earliest", group_id="g")
    c.poll(timeout_ms=0)  # joins: every partition assigned, positioned at its start
    assert len(c.assignment()) == 3
    with eng.producer() as p:
        for i in range(20):
            p.send("events", value=b"v%d" % i, partition=i % 3)
    lookups, calls, read = eng.partitions_of, [], []

    def looking_up(tps):
        found = lookups(tps)
        calls.append(tps)
        if len(calls) == 1:
            c.close()  # as Engine.close() would, on another thread
        return found
    patched = []
    if lands == "first read":
        for part in {eng.partition("events", i) for i in range(3)}:
            def reading(offset, max_bytes, isolation, part=part, real=part.fetch):
                if not read:
                    read.append(part.index)
                    c.close()
                return real(offset, max_bytes, isolation)
            part.fetch = reading
            patched.append(part)
    else:
        eng.partitions_of = looking_up
    try:
        got = c.fetch(500)
    finally:
        for part in patched:
            del part.fetch
        eng.__dict__.pop("partitions_of", None)
    assert (read if lands == "first read" else calls) and c.assignment() == set()
    assert {tp.partition for tp in got} <= ({read[0]} if lands == "first read" else set())


def test_sends_from_many_threads(eng):
    p = eng.producer(batch_size=512)

    def work(t):
        for i in range(500):
            p.send("events", key=b"t%d" % t, value=b"%d" % i)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.close()
    records = consume_all(eng)
    assert len(records) == 2000
    for t in range(4):
        assert [r.value for r in records if r.key == b"t%d" % t] == [b"%d" % i for i in range(500)]


def test_consumer_reads_a_kafka_written_directory_across_gaps_and_markers(tmp_path):
    """Kafka's compacted-0 (offset gaps) and txn-0 (markers, aborted data) adopted by an engine: the consumer
    returns exactly the data records of the vectors' dumps, in order."""
    import shutil

    from tests import vectors
    for case in ("compacted-0", "txn-0"):
        shutil.copytree(vectors.case_dir(case), tmp_path / case)
    with engine.open(str(tmp_path), clock=engine.ManualClock(), background=False) as e:
        for case in ("compacted-0", "txn-0"):
            expect = [(r["offset"], vectors.b64(r["keyB64"]), vectors.b64(r["valueB64"]))
                      for r in vectors.expected(case) if r["type"] == "record" and "control" not in r]
            got = [(r.offset, r.key, r.value) for r in consume_all(e, case.rsplit("-", 1)[0], max_poll_records=3)]
            assert got == expect and len(expect) > 5, case


def test_a_standalone_consumer_commits_and_resumes_from_its_group_offsets(tmp_path):
    """group_id + assign(): commit() stores positions (or given offsets) in __consumer_offsets as OffsetCommit v1/v3;
    a new consumer of the group, and one after a reopen, starts there."""
    with engine.open(tmp_path) as e:
        e.create_topic("c", 2)
        with e.producer() as p:
            for i in range(10):
                p.send("c", b"%d" % i, partition=i % 2)
        tps = [TopicPartition("c", 0), TopicPartition("c", 1)]
        c = e.consumer(group_id="billing", enable_auto_commit=False, auto_offset_reset="earliest")
        c.assign(tps)
        assert len(c.poll(max_records=3)[tps[0]]) == 3
        c.commit()  # poll() gave every assigned partition a position, as Kafka's does: 3 and 0
        assert c.committed(tps[0]) == 3 and c.committed(tps[1]) == 0
        c.commit({tps[1]: engine.OffsetAndMetadata(4, "note")})
        assert c.committed(tps[1], metadata=True) == engine.OffsetAndMetadata(4, "note", -1)
        with pytest.raises(InvalidConfigurationError):
            c.commit({tps[0]: -1})
        with pytest.raises(UnknownTopicOrPartitionError):
            c.commit({TopicPartition("c", 9): 1})
        with pytest.raises(IllegalStateError):
            e.consumer().commit()
    with engine.open(tmp_path) as e:
        c = e.consumer(group_id="billing", enable_auto_commit=False)
        c.assign(tps)
        assert (c.position(tps[0]), c.position(tps[1])) == (3, 4)
        from engine.groups import offsets
        batches = list(e.internal.internal_partition("__consumer_offsets", offsets.partition("billing")).log.read(0).batches())
        assert [b.is_transactional for b in batches] == [False, False]
        assert offsets.decode_key(batches[0].records()[0].key) == ("billing", tps[0])


def test_a_partition_paused_before_its_first_poll_takes_its_position_when_resumed(tmp_path):
    """A poll positions the assigned partitions without one, each by its own log start here, except a paused one:
    that takes its position once resumed, from the group's offset committed meanwhile."""
    with engine.open(tmp_path) as e:
        e.create_topic("c", 2)
        with e.producer() as p:
            for i in range(10):
                p.send("c", b"%d" % i, partition=i % 2)
        e.partition("c", 0).delete_records(2)
        tps = [TopicPartition("c", 0), TopicPartition("c", 1)]
        c = e.consumer(group_id="g", enable_auto_commit=False, auto_offset_reset="earliest")
        c.assign(tps)
        c.pause(tps[0])
        got = c.poll()
        assert {tp: [r.offset for r in rs] for tp, rs in got.items()} == {tps[1]: [0, 1, 2, 3, 4]}
        c.commit({tps[0]: 3})
        assert c.poll() == {}
        c.resume(tps[0])
        assert {tp: [r.offset for r in rs] for tp, rs in c.poll().items()} == {tps[0]: [3, 4]}
