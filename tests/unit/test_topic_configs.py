"""Kafka's topic configs: every one honoured or refused with a reason, `compression.type` (a leader re-encodes a
batch sent in another codec, as Kafka's LogValidator does) with its levels, and the CreateTime bounds
`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`, driven by the manual clock."""
from __future__ import annotations

import json
import logging
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.common.errors import InvalidConfigurationError, InvalidTimestampError, RecordTooLargeError
from engine.record import batch_format as bf
from engine.record import twins
from engine.record import compression as comp
from engine.segments.log_config import LogConfig

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "compatibility.md")

# The names and defaults of Kafka's topic configs: TopicConfig and LogConfig's CONFIG definition at the commit the
# Kafka-written vectors come from (1eb7644349cb), with QuotaConfig's two throttles that LogConfig also defines.
KAFKA_TOPIC_CONFIGS = {
    "segment.bytes": 1073741824, "segment.ms": 604800000, "segment.jitter.ms": 0, "segment.index.bytes": 10485760,
    "flush.messages": LONG_MAX, "flush.ms": LONG_MAX, "retention.bytes": -1, "retention.ms": 604800000,
    "remote.storage.enable": False, "local.retention.ms": -2, "local.retention.bytes": -2,
    "remote.log.copy.disable": False, "remote.log.delete.on.disable": False, "max.message.bytes": 1048588,
    "index.interval.bytes": 4096, "file.delete.delay.ms": 60000, "delete.retention.ms": 86400000,
    "min.compaction.lag.ms": 0, "max.compaction.lag.ms": LONG_MAX, "min.cleanable.dirty.ratio": 0.5,
    "cleanup.policy": "delete", "unclean.leader.election.enable": False, "min.insync.replicas": 1,
    "compression.type": "producer", "compression.gzip.level": -1, "compression.lz4.level": 9,
    "compression.zstd.level": 3, "preallocate": False, "message.format.version": "3.0-IV1",
    "message.timestamp.type": "CreateTime", "message.timestamp.difference.max.ms": LONG_MAX,
    "message.timestamp.before.max.ms": LONG_MAX, "message.timestamp.after.max.ms": LONG_MAX,
    "message.downconversion.enable": True, "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}
# a value other than the default, and the words its refusal must give
REFUSED = {
    "remote.storage.enable": (True, "no remote tier"), "remote.log.copy.disable": (True, "no remote tier"),
    "remote.log.delete.on.disable": (True, "no remote tier"), "local.retention.ms": (1000, "no remote tier"),
    "local.retention.bytes": (1000, "no remote tier"), "preallocate": (True, "never preallocates"),
    "leader.replication.throttled.replicas": ("*", "in-process"),
    "follower.replication.throttled.replicas": ("0:1", "in-process"),
}
DEPRECATED = {"message.format.version": "2.8", "message.downconversion.enable": False,
              "message.timestamp.difference.max.ms": 5000}


@pytest.fixture
def clock():
    return engine.ManualClock(NOW)


@pytest.fixture
def eng(tmp_path, clock):
    e = engine.open(str(tmp_path / "data"), clock=clock, background=False)
    yield e
    e.close()


# --- every config: honoured, or refused with its reason ------------------------------------------------
def test_every_kafka_topic_config_is_known_with_kafkas_default():
    assert LogConfig().to_dict() == KAFKA_TOPIC_CONFIGS


@pytest.mark.parametrize("name", sorted(KAFKA_TOPIC_CONFIGS))
def test_each_config_is_honoured_or_refused_naming_it_and_why(name):
    default = KAFKA_TOPIC_CONFIGS[name]
    assert LogConfig.from_dict({name: default}).to_dict()[name] == default  # the default is always accepted
    if name in REFUSED:
        value, reason = REFUSED[name]
        with pytest.raises(InvalidConfigurationError, match=re.escape(name)) as err:
            LogConfig.from_dict({name: value})
        assert reason in str(err.value)


def test_compatibility_doc_lists_every_config():
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    missing = [name for name in KAFKA_TOPIC_CONFIGS if f"`{name}`" not in text]
    assert not missing, f"docs/compatibility.md does not list {missing}"


@pytest.mark.parametrize("name,ok,bad", [
    ("compression.gzip.level", [1, 9, -1, "5"], [0, 10, -2, "x", True]),
    ("compression.lz4.level", [1, 17], [0, 18]),
    ("compression.zstd.level", [-131072, 22, 0], [-131073, 23]),
    ("message.timestamp.before.max.ms", [0, LONG_MAX], [-1]),
    ("message.timestamp.after.max.ms", [0, "3600000"], [-1, 1.5]),
    ("compression.type", ["producer", "uncompressed", "GZIP", "snappy", "lz4", "zstd"], ["none", "brotli", 1]),
    ("message.format.version", ["0.10.2", "2.8", "3.0-IV1"], ["three", 3]),
])
def test_levels_and_values_take_kafkas_ranges(name, ok, bad):
    for value in ok:
        LogConfig.from_dict({name: value})
    for value in bad:
        with pytest.raises(InvalidConfigurationError, match=re.escape(name)):
            LogConfig.from_dict({name: value})


def test_deprecated_configs_are_accepted_with_a_warning(eng, caplog):
    with caplog.at_level(logging.WARNING, logger="kafkalog.config"):
        eng.create_topic("old", config=DEPRECATED)
    assert sorted(r.getMessage().split()[2] for r in caplog.records) == sorted(DEPRECATED)
    assert {k: eng.describe_topic("old").config[k] for k in DEPRECATED} == DEPRECATED


def test_difference_max_ms_bounds_both_sides_where_before_and_after_are_default():
    assert LogConfig.from_dict({"message.timestamp.difference.max.ms": 50}).timestamp_bounds == (50, 50)
    cfg = LogConfig.from_dict({"message.timestamp.difference.max.ms": 50, "message.timestamp.after.max.ms": 7})
    assert cfg.timestamp_bounds == (50, 7)
    assert LogConfig.from_dict({"message.timestamp.type": "LogAppendTime",
                                "message.timestamp.before.max.ms": 1}).timestamp_bounds is None
    assert LogConfig().timestamp_bounds is None and not LogConfig().leader_checks


# --- timestamp bounds ---------------------------------------------------------------------------------
def _raw(ts_list, **kw):
    return engine.encode_batch([(None, b"v%d" % i, None, ts) for i, ts in enumerate(ts_list)], **kw)


@pytest.mark.parametrize("side", ["before", "after"])
def test_timestamps_exactly_at_the_bound_pass_one_ms_past_fail(eng, clock, side):
    bound = 60_000
    eng.create_topic("t", config={f"message.timestamp.{side}.max.ms": bound})
    sign = -1 if side == "before" else 1
    clock.advance(1234)
    now = clock.time_ms()
    lg = eng.log("t", 0)
    assert lg.append_as_leader(_raw([now, now + sign * bound])).last_offset == 1
    other = now - sign * 10 * bound  # far on the other, unbounded side: accepted
    assert lg.append_as_leader(_raw([other])).first_offset == 2
    for batch in (_raw([now + sign * (bound + 1)]), _raw([now, now + sign * (bound + 1), now])):
        with pytest.raises(InvalidTimestampError) as err:
            lg.append_as_leader(batch)
        assert err.value.code == 32 and not err.value.retriable and err.value.file == lg.dir
    assert lg.log_end_offset == 3  # nothing of a refused batch was appended
    clock.advance(1)  # the window moves with the clock
    if side == "after":  # the timestamp refused above is now exactly `after` ahead
        assert lg.append_as_leader(_raw([now + bound + 1])).first_offset == 3
    else:  # the timestamp accepted above is now one ms too old
        with pytest.raises(InvalidTimestampError):
            lg.append_as_leader(_raw([now - bound]))


def test_no_timestamp_and_log_append_time_topics_are_not_bounded(eng, clock):
    eng.create_topic("lat", config={"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": 0,
                                    "message.timestamp.before.max.ms": 0})
    eng.create_topic("ct", config={"message.timestamp.before.max.ms": 0, "message.timestamp.after.max.ms": 0})
    info = eng.log("lat", 0).append_as_leader(_raw([1, 2**62]))
    assert info.log_append_time == NOW and info.last_offset == 1
    assert eng.log("ct", 0).append_as_leader(_raw([-1, NOW, -1])).last_offset == 2  # -1: no timestamp


def test_producer_future_fails_and_other_batches_are_appended(eng, clock):
    eng.create_topic("t", partitions=2, config={"message.timestamp.after.max.ms": 3_600_000})
    with eng.producer(linger_ms=0) as p:
        bad = p.send("t", value=b"from 2100", partition=0, timestamp_ms=4_102_444_800_000)
        p.flush()  # a batch fails whole: records that shared it with this one would fail with it, as in Kafka
        good = [p.send("t", value=b"ok%d" % i, partition=i % 2) for i in range(4)]
        p.flush()
        with pytest.raises(InvalidTimestampError, match="outside"):
            bad.get()
        assert [f.get().offset for f in good] == [0, 0, 1, 1]
        assert p.send("t", value=b"later", partition=0).get().offset == 2  # its producer id and sequence go on
    with eng.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        assert sorted(r.value for r in c) == [b"later", b"ok0", b"ok1", b"ok2", b"ok3"]


# --- compression.type ----------------------------------------------------------------------------------
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TOPIC_CODEC = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored(lg) -> list:
    return [b for _, b in lg.batches(lg.log_start_offset, lg.log_end_offset)]


def _records(lg) -> list:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for b in _stored(lg) for r in b.records()]


def _producers(lg) -> dict:
    return {pid: e.snapshot_entry() for pid, e in lg.producer_state.producers.items()}


batches = st.lists(st.tuples(
    st.sampled_from(CODECS),
    st.sampled_from(["plain", "idempotent", "transactional"]),
    st.lists(st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=300),
                       st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2),
                       st.integers(-5000, 5000)), min_size=1, max_size=12)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(target=st.sampled_from(sorted(TOPIC_CODEC)), level=st.integers(1, 9), sent=batches)
def test_reencoded_log_equals_the_unconverted_log(tmp_path_factory, target, level, sent):
    """Property: a topic with compression.type=X holds the records, offsets and producer state of a `producer` topic
    given the same batches, every stored batch is in X (an uncompressed marker stays uncompressed), and each keeps its
    producer id, epoch, base sequence and transactional flag."""
    d = tmp_path_factory.mktemp("reencode")
    with engine.open(str(d), clock=engine.ManualClock(NOW), background=False) as e:
        level_key = {"gzip": "compression.gzip.level", "lz4": "compression.lz4.level",
                     "zstd": "compression.zstd.level"}.get(target)
        e.create_topic("as-sent")
        e.create_topic("x", config={"compression.type": target, **({level_key: level} if level_key else {})})
        logs = [e.log("as-sent", 0), e.log("x", 0)]
        sequences: dict[int, int] = {}
        for i, (codec, kind, recs) in enumerate(sent):
            pid = {"plain": -1, "idempotent": 7000 + i % 2, "transactional": 9000}[kind]
            kw = {} if pid < 0 else dict(producer_id=pid, producer_epoch=1, base_sequence=sequences.get(pid, 0),
                                          transactional=kind == "transactional")
            data = engine.encode_batch([(k, v, h, NOW + ts) for k, v, h, ts in recs], compression=codec, **kw)
            if pid >= 0:
                sequences[pid] = sequences.get(pid, 0) + len(recs)
            infos = [lg.append_as_leader(data, leader_epoch=3) for lg in logs]
            assert [(a.first_offset, a.last_offset) for a in infos] == [(infos[0].first_offset, infos[0].last_offset)] * 2
        for lg in logs:
            lg.append_marker(True, 9000, 1, 0, leader_epoch=3)
        assert _records(logs[1]) == _records(logs[0])
        assert _producers(logs[1]) == _producers(logs[0])
        assert logs[1].last_stable_offset == logs[0].last_stable_offset
        for a, b in zip(_stored(logs[0]), _stored(logs[1]), strict=True):
            fields = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence",
                      "is_transactional", "is_control", "partition_leader_epoch", "records_count", "max_timestamp")
            assert [getattr(b, f) for f in fields] == [getattr(a, f) for f in fields]
            assert b.is_valid()
            assert b.attributes & bf.COMPRESSION_MASK == (0 if b.is_control else TOPIC_CODEC[target])


LEVELS = {-1: st.none(), 0: st.none(), 1: st.sampled_from([-1, 1, 6, 9]), 2: st.none(), 3: st.integers(1, 17),
          4: st.integers(-5, 19)}


@st.composite
def leader_inputs(draw):
    recs = draw(st.lists(st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=400),
                                   st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)),
                                            max_size=3),
                                   st.sampled_from([-1, 0, NOW]) | st.integers(NOW - 10**6, NOW + 10**6)),
                         min_size=1, max_size=30))
    pid = draw(st.sampled_from([-1, 5, 2**40]))
    producer = {} if pid < 0 else dict(producer_id=pid, producer_epoch=draw(st.integers(0, 32767)),
                                       base_sequence=draw(st.integers(0, 2**31 - 1)), transactional=draw(st.booleans()))
    data = twins.load("codec", "python").encode_batch(recs, compression=draw(st.sampled_from(CODECS)), **producer)
    target = draw(st.integers(-1, 4))
    bounds = draw(st.none() | st.tuples(st.integers(NOW - 2 * 10**6, NOW), st.integers(NOW, NOW + 2 * 10**6)))
    return data, draw(st.sampled_from([-1, NOW + 5])), (target, draw(LEVELS[target]), bounds)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inputs=leader_inputs(), offset=st.integers(0, 2**40), epoch=st.integers(-1, 2**31 - 1))
def test_native_core_and_twin_prepare_the_same_leader_append(inputs, offset, epoch):
    """Property: over codec pairs, levels, producer fields, LogAppendTime and timestamp bounds, the native core and the
    twin store the same bytes, or refuse with the same error."""
    data, log_append_time, checks = inputs
    outcomes = []
    for impl in ("cython", "python"):
        try:
            pieces, *rest = twins.load("codec", impl).prepare_leader_append(data, offset, epoch, log_append_time, 1 << 24,
                                                                      False, "p", checks)
            outcomes.append((b"".join(bytes(p) for p in pieces), *rest))
        except InvalidTimestampError as exc:
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("target", ["gzip", "lz4", "zstd"])
@pytest.mark.parametrize("level_name,level", [("low", 1), ("high", 9)])
def test_the_topics_level_applies_to_the_reencoding(codec, target, level_name, level):
    """The re-encoded payload is exactly the codec's output at the topic's level (Kafka's default lz4 level 9 is the
    fast compressor), and the native core and the twin agree byte for byte."""
    recs = [(b"k%d" % i, b"value %d " % i * 40, [("h", b"x")], NOW + i) for i in range(200)]
    data = twins.load("codec", "python").encode_batch(recs)
    target_id = comp.codec_id(target)
    pieces, *_ = codec.prepare_leader_append(data, 0, 0, -1, 1 << 22, False, None, (target_id, level, None))
    out = b"".join(bytes(p) for p in pieces)
    assert out[bf.HEADER_SIZE:] == comp.compress(target_id, data[bf.HEADER_SIZE:], level)
    twin, *_ = twins.load("codec", "python").prepare_leader_append(data, 0, 0, -1, 1 << 22, False, None,
                                                             (target_id, level, None))
    assert b"".join(bytes(p) for p in twin) == out
    if target == "lz4":  # 9 is the fast compressor, any other level LZ4-HC, which packs these records tighter
        section = data[bf.HEADER_SIZE:]
        assert comp.compress(target_id, section, 9) == comp.compress(target_id, section, None)
        assert len(comp.compress(target_id, section, 12)) < len(comp.compress(target_id, section, 9))


def test_a_batch_already_in_the_topics_codec_is_stored_as_sent(eng):
    eng.create_topic("z", config={"compression.type": "zstd"})
    lg = eng.log("z", 0)
    data = engine.encode_batch([(None, b"v" * 100, None, NOW)], compression="zstd", compression_level=19)
    lg.append_as_leader(data)
    assert bytes(lg.read(0).records)[bf.HEADER_SIZE:] == data[bf.HEADER_SIZE:]  # not re-encoded at level 3


def test_alter_compression_type_applies_to_later_appends(eng):
    eng.create_topic("t")
    with eng.producer(compression_type="gzip") as p:
        p.send("t", value=b"a" * 50).get()
        assert eng.alter_topic_config("t", {"compression.type": "lz4", "compression.lz4.level": 12})[
            "compression.type"] == "lz4"
        p.send("t", value=b"b" * 50).get()
        eng.alter_topic_config("t", {"compression.type": None})  # back to the default: producer
        p.send("t", value=b"c" * 50).get()
    assert [b.compression for b in _stored(eng.log("t", 0))] == ["gzip", "lz4", "gzip"]
    assert eng.describe_topic("t").config["compression.lz4.level"] == 12


def test_reencoding_past_max_message_bytes_is_refused(eng):
    eng.create_topic("t", config={"compression.type": "uncompressed", "max.message.bytes": 2000})
    data = engine.encode_batch([(None, b"\x00" * 5000, None, NOW)], compression="zstd")
    with pytest.raises(RecordTooLargeError, match="re-encoded"):
        eng.log("t", 0).append_as_leader(data)
    assert eng.log("t", 0).log_end_offset == 0


# --- the producer's levels ---------------------------------------------------------------------------
def test_producer_levels_take_kafkas_names_defaults_and_ranges(eng):
    eng.create_topic("t")
    for bad in ({"compression_gzip_level": 0}, {"compression_lz4_level": 18}, {"compression_zstd_level": 23},
                {"compression_zstd_level": "3"}):
        with pytest.raises(InvalidConfigurationError, match=next(iter(bad))):
            eng.producer(compression_type="zstd", **bad)
    with eng.producer(compression_type="zstd", compression_zstd_level=19) as p:
        assert p.compression_level == 19
        p.send("t", value=b"abc" * 300, timestamp_ms=NOW).get()
    with eng.producer(compression_type="snappy") as p:
        assert p.compression_level is None
    stored = _stored(eng.log("t", 0))[0]
    body = twins.load("codec", "python").RecordsBuilder()
    body.append(None, b"abc" * 300, None, NOW)
    expected = body.build(compression="zstd", compression_level=19)
    assert bytes(stored.buffer)[bf.HEADER_SIZE:] == expected[bf.HEADER_SIZE:]


# --- the command line ------------------------------------------------------------------------------
def test_cli_creates_alters_and_describes_topic_configs_with_defaults(tmp_path, capsys):
    from engine.tools import cli

    data = str(tmp_path / "data")
    assert cli.main(["topics", "--data", data, "--create", "--topic", "t", "--partitions", "1",
                     "--config", "compression.type=zstd", "--config", "compression.zstd.level=9"]) == 0
    assert cli.main(["topics", "--data", data, "--alter", "--topic", "t",
                     "--config", "message.timestamp.after.max.ms=3600000"]) == 0
    capsys.readouterr()
    assert cli.main(["topics", "--data", data, "--describe", "--topic", "t", "--all-configs", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["configs"] == {**KAFKA_TOPIC_CONFIGS, "compression.type": "zstd", "compression.zstd.level": 9,
                              "message.timestamp.after.max.ms": 3600000}
    assert cli.main(["topics", "--data", data, "--describe", "--topic", "t"]) == 0
    configs = capsys.readouterr().out.splitlines()[0].split("Configs: ")[1]
    assert configs == "compression.type=zstd,compression.zstd.level=9,message.timestamp.after.max.ms=3600000"
    assert cli.main(["topics", "--data", data, "--alter", "--topic", "t", "--config", "remote.storage.enable=true"]) == 2
    assert "remote.storage.enable=true is refused: kafkalog keeps every segment on local disk" in capsys.readouterr().err


class TickingClock(engine.ManualClock):
    """Each reading is one second later than the last: a record's CreateTime is always older than its append."""

    def time_ms(self) -> int:
        return self.advance(1000)


def test_console_producer_reports_refused_timestamps_in_one_line(tmp_path, capsys, monkeypatch):
    import io

    from engine.tools import cli

    data = str(tmp_path / "data")
    with engine.open(data) as e:
        e.create_topic("t", config={"message.timestamp.before.max.ms": 500})
    real_open = engine.open
    monkeypatch.setattr(engine, "open", lambda path, **kw: real_open(path, clock=TickingClock(NOW), **kw))
    monkeypatch.setattr("sys.stdin", io.StringIO("a\nb\nc\n"))
    capsys.readouterr()
    assert cli.main(["console-producer", "--data", data, "--topic", "t"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kafkalog console-producer: InvalidTimestampError: 3 of 3 records were "
                                               "not appended; the first, line 1: record 0 of the batch has timestamp")
    with real_open(data) as e:
        assert e.log("t", 0).log_end_offset == 0
