"""engine.record.twins: the one registry choosing between each native module and its Python twin. Each module with a
twin registers it when imported (the engine's first log, producer or cleaner imports them all); the process uses the
codec's choice for each; with the native core built both sides load and differ; with KAFKALOG_REQUIRE_EXTENSIONS=1
every twin in use is native."""
from __future__ import annotations

import importlib
import os

import pytest

import engine
from engine.record import codec, twins
from tests.conftest import IMPLEMENTATIONS

HOMES = {"accumulator": "engine.clients.accumulator", "codec": "engine.record.codec",
         "follower_append": "engine.log.follower_append", "leader_append": "engine.log.leader_append",
         "log_read": "engine.log.log_read", "offset_checkpoint": "engine.segments.offset_checkpoint",
         "offset_map": "engine.segments.offset_map",
         "replica": "engine.replication.replica", "touched_windows": "engine.segments.residency",
         "segment_appender": "engine.segments.segment_appender"}
EVERY_TWIN = sorted(HOMES)  # (each twin, and the module that defines it)


@pytest.fixture(autouse=True, scope="module")
def _registered():
    for home in HOMES.values():
        importlib.import_module(home)


def test_the_modules_with_a_twin_register_each_and_nothing_else_does():
    assert twins.names() == EVERY_TWIN
    assert engine.IMPL == codec.IMPL


@pytest.mark.parametrize("name", EVERY_TWIN)
def test_each_twin_in_use_is_the_codecs_choice_and_says_which_it_is(name):
    used = twins.selected(name)
    assert used is twins.load(name, codec.IMPL)
    assert twins.impl_of(name, used) == codec.IMPL
    if os.environ.get("KAFKALOG_REQUIRE_EXTENSIONS") == "1" and os.environ.get("KAFKALOG_NO_EXTENSIONS") != "1":
        assert twins.impl_of(name, used) == "cython"


@pytest.mark.parametrize("name", EVERY_TWIN)
def test_every_available_implementation_of_each_twin_loads_and_they_differ(name):
    sides = {impl: twins.load(name, impl) for impl in IMPLEMENTATIONS}
    assert len({id(side) for side in sides.values()}) == len(IMPLEMENTATIONS)
    for impl, side in sides.items():
        assert twins.impl_of(name, side) == impl


def test_the_registry_refuses_what_it_does_not_know():
    with pytest.raises(KeyError, match="no twin 'nonesuch'"):
        twins.load("nonesuch", "python")
    with pytest.raises(ValueError, match="one of"):
        twins.load("codec", "java")
    with pytest.raises(ValueError, match="registered already"):
        twins.register("codec", python=object, native=object)
    with pytest.raises(ValueError, match="neither side"):
        twins.impl_of("codec", object())


def test_a_log_drives_its_segments_with_the_appenders_of_their_implementation(tmp_path, monkeypatch):
    """Swapping the segment appender for a twin swaps the log's leader and follower appenders with it."""
    from engine.segments import segment_appender

    for impl in IMPLEMENTATIONS:
        monkeypatch.setattr(segment_appender, "selected", twins.load("segment_appender", impl))
        with engine.open(str(tmp_path / impl)) as eng:
            eng.create_topic("t", 1)
            with eng.producer() as p:
                p.send("t", b"v", partition=0)
            log = eng.log("t", 0)
            assert type(log._leader_append) is twins.load("leader_append", impl)
            assert type(log._follower_append) is twins.load("follower_append", impl)
