"""`make interop`: the listener's messages through Kafka's own generated message classes (KAFKA_HOME's). For every
API and version the listener speaks, random requests and responses written by engine.protocol are read by Kafka's
class, written back by it byte for byte the same, and its JSON converter's view of them holds the values written. A
version newer than KAFKA_HOME's Kafka knows, or older than it still reads (Kafka 4 removed the oldest versions of many
APIs, which the listener still serves), is named in the output, not judged (every API must have versions it knows, or
be one kio, tests/network/kio_peer.py, has every version of).
Not part of `make test` (it needs a Kafka build)."""
from __future__ import annotations

import base64
import os
import random
import subprocess

import pytest

from engine.protocol import APIS
from engine.protocol.schema import Field, write_struct
from engine.protocol.types import Writer
from tests.broker.checkpoint_corpus import kafka_java
from tests.network import kio_peer
from tests.network.generate import random_struct

PER_VERSION = int(os.environ.get("KAFKALOG_MESSAGE_CASES", "20"))


@pytest.fixture(scope="module")
def kafka_filter(tmp_path_factory):
    return kafka_java(tmp_path_factory, "KafkaMessages")


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(w[:1].upper() + w[1:] for w in rest)


def _as_json(f: Field, type_: str, value):
    """`value` as Kafka's JSON converters write it."""
    if value is None:
        return None
    if type_ == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if type_ == "uuid":
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    if type_.startswith("[]") and type_[2:]:
        return [_as_json(f, type_[2:], v) for v in value]
    return value


def _check(json: dict, ours: dict, fields: list[Field], version: int, where: str) -> None:
    for f in fields:
        if not f.has(version) or f.name not in ours or f.type == "records":
            continue
        got, mine = json.get(_camel(f.name)), ours[f.name]
        if got is None and f.tag is not None and mine == f.default_value():
            continue  # Kafka's converters leave out a tagged field at its default, as the wire does
        if f.type == "{}" and mine is not None:
            _check(got, mine, f.fields, version, f"{where}.{f.name}")
        elif f.type == "[]" and mine is not None:
            assert len(got) == len(mine), f"{where}.{f.name}"
            for g, m in zip(got, mine):
                _check(g, m, f.fields, version, f"{where}.{f.name}[]")
        else:
            if f.type == "string" and mine is None and not f.nullable_in(version):
                mine = ""
            assert got == _as_json(f, f.type, mine), (f"{where}.{f.name}", got, mine)


def test_kafkas_message_classes_read_and_write_what_the_listener_writes(kafka_filter):
    import json

    rng = random.Random(5)
    cases = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        for version in range(api.min_version, api.max_version + 1):
            for kind, fields in (("request", api.request), ("response", api.response)):
                for _ in range(PER_VERSION):
                    body = random_struct(rng, fields, version)
                    w = Writer()
                    write_struct(w, fields, body, version, api.flexible(version))
                    cases.append((api, version, kind, fields, body, w.getvalue()))
    lines = "".join(f"{kind} {api.key} {version} {data.hex()}\n" for api, version, kind, _, _, data in cases)
    done = subprocess.run(kafka_filter, input=lines, capture_output=True, text=True, check=True)
    answers = done.stdout.splitlines()
    assert len(answers) == len(cases), done.stderr[-2000:]
    checked, newer, older = set(), set(), set()
    for (api, version, kind, fields, body, data), answer in zip(cases, answers):
        where = f"{api.name} v{version} {kind}"
        if answer.startswith("newer "):  # a version this Kafka build does not know (a newer Kafka judges it)
            assert version > int(answer.split()[1]), where
            newer.add(f"{api.name} v{version}")
            continue
        if answer.startswith("older "):  # a version this Kafka removed (an older one, and kafka-python, judge it)
            assert version < int(answer.split()[1]), where
            older.add(f"{api.name} v{version}")
            continue
        checked.add(api.key)
        assert not answer.startswith("error "), f"{where}: {answer}"
        written, _, text = answer.partition(" ")
        assert written == data.hex(), where
        _check(json.loads(text), body, fields, version, where)
    # (an API newer than this build, as the share group offsets APIs are than Kafka 4.0, must be judged by kio)
    unjudged = {a.name for a in APIS.values() if a.key not in checked and any(
        kio_peer.schemas(a.key, v) is None for v in range(a.min_version, a.max_version + 1))}
    assert not unjudged, f"APIs neither this Kafka build nor kio knows every version of: {unjudged}"
    if newer:
        print(f"versions newer than KAFKA_HOME's Kafka, not judged by it: {', '.join(sorted(newer))}")
    if older:
        print(f"versions KAFKA_HOME's Kafka removed, not judged by it: {', '.join(sorted(older))}")
