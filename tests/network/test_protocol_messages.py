"""Every request and response of every API version the listener speaks, checked against kafka-python's message
classes (independent code generated from Kafka's published JSON schemas): what we encode, it decodes to the same
field values and re-encodes to the same bytes, and what it encodes, we decode to the values it was given."""
from __future__ import annotations

import importlib
import os
import pkgutil
import random
import re

import pytest

import kafka.protocol as kp
from kafka.protocol.api_message import ApiMessage

from engine.protocol import APIS, decode_request, decode_response, encode_request, encode_response
from engine.protocol.schema import Field
from tests.network.generate import random_struct


def _peer_classes() -> dict:
    found = {}
    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".schemas" in mod.name or ".old" in mod.name:
            continue
        for v in vars(importlib.import_module(mod.name)).values():
            if isinstance(v, type) and issubclass(v, ApiMessage) and v.__dict__.get("_json"):
                found[(v.API_KEY, v.type)] = v
    return found


PEERS = _peer_classes()
# APIs kafka-python has no message classes for: the consumer group protocol's (KIP-848), which Kafka's own generated
# classes read and write in `make interop` (tests/broker/test_kafka_messages.py), as they do every API here; and the
# share group protocol's (KIP-932) at version 1, which the broker build's 4.0 classes do not have (only the early
# access v0): librdkafka's share consumer reads and writes them in tests/network/test_share_groups.py and in its own
# suite's share consumer tests.
NO_PEER = {68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 76: "ShareGroupHeartbeat",
           77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge"}
CASES = [(api, v) for api in sorted(APIS.values(), key=lambda a: a.key) if api.key not in NO_PEER
         for v in range(api.min_version, api.max_version + 1)]


def test_only_the_listed_apis_lack_a_kafka_python_peer():
    missing = {a.key: a.name for a in APIS.values() if (a.key, "request") not in PEERS}
    assert missing == NO_PEER


def _plain(v):
    """kafka-python's decoded values, and ours, in one comparable form."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if hasattr(v, "to_dict"):
        return _plain(v.to_dict(json=False))
    return v


# Fields kafka-python renames in its own copy of the schema (Metadata's authorized-operations bit fields): their
# bytes are still compared, through its re-encoding, not their values.
PEER_RETYPED = {"cluster_authorized_operations", "topic_authorized_operations"}


def _project(theirs, ours: dict, fields: list[Field], version: int) -> None:
    """Assert every field of `ours` present in `version` equals kafka-python's decoded value."""
    for f in fields:
        if not f.has(version) or f.name not in ours or f.name in PEER_RETYPED and f.name not in theirs:
            continue
        mine, got = ours[f.name], _plain(theirs[f.name])
        if f.type == "{}" and mine is not None:
            _project(got, mine, f.fields, version)
        elif f.type == "[]" and mine is not None:
            assert len(got) == len(mine), f.name
            for g, m in zip(got, mine):
                _project(g, m, f.fields, version)
        else:
            if f.type == "string" and mine is None and not f.nullable_in(version):
                mine = ""
            if isinstance(got, (set, frozenset)):  # kafka-python reads authorized-operation bit fields as sets
                got = sum(1 << bit for bit in got)
                got -= (1 << 32) if got >= 1 << 31 else 0
            assert got == _plain(mine), (f.name, got, mine)


@pytest.mark.parametrize("api,version", CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_requests_and_responses_agree_with_kafka_python(api, version):
    rng = random.Random(api.key * 100 + version)
    flexible_header = api.request_header_version(version) == 2
    for _ in range(8):
        # a request: ours -> theirs -> the same bytes; theirs -> ours -> the same values
        body = random_struct(rng, api.request, version)
        frame = encode_request(api, version, 77, body, client_id="tester")
        peer = PEERS[(api.key, "request")]
        decoded = peer.decode(frame[4:], version=version, header=True)
        assert decoded.header.correlation_id == 77 and decoded.header.client_id == "tester"
        _project(decoded.to_dict(json=False), body, api.request, version)
        assert decoded.encode(version=version, header=True, framed=True) == frame
        again = decode_request(frame[4:])
        assert (again.api, again.version, again.correlation_id) == (api, version, 77)
        _project(again.body, body, api.request, version)
        assert flexible_header == api.flexible(version)
        # a response: ours -> theirs -> the same bytes, and back
        body = random_struct(rng, api.response, version)
        if api.name == "ApiVersions":
            body["error_code"] = 0  # with an error, clients read an ApiVersions response as v0 (see the listener tests)
        chunks = encode_response(api, version, 91, body)
        data = b"".join(bytes(c) for c in chunks)
        peer = PEERS[(api.key, "response")]
        decoded = peer.decode(data[4:], version=version, header=True)
        assert decoded.header.correlation_id == 91
        _project(decoded.to_dict(json=False), body, api.response, version)
        correlation_id, ours = decode_response(api, version, data[4:])
        assert correlation_id == 91
        _project(ours, body, api.response, version)


def test_the_documented_api_table_is_what_the_listener_speaks():
    """docs/protocol.md's table of APIs and versions is exactly engine.protocol.messages.APIS."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "protocol.md")
    with open(path, encoding="utf-8") as f:
        rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)(?:–(\d+))? \|$", f.read(), re.M)
    documented = {int(key): (name, int(lo), int(hi or lo)) for name, key, lo, hi in rows}
    assert documented == {a.key: (a.name, a.min_version, a.max_version) for a in APIS.values()}


def test_the_protocol_modules_docstrings_say_the_versions_served():
    """Each version range a protocol module's docstring states ("Produce stops before v12", "Fetch goes to v17", "the
    advertised ranges start where ... (Produce 3, Fetch 4") is the one the listener serves."""
    from engine.protocol import admin_messages, messages
    by_name = {a.name: a for a in APIS.values()}
    claims = []
    for module in (messages, admin_messages):
        text = " ".join(module.__doc__.split())
        claims += [(name, "max", int(v) - 1) for name, v in re.findall(r"(\w+) stops before v(\d+)", text)]
        claims += [(name, "max", int(v)) for name, v in re.findall(r"(\w+) goes to v(\d+)", text)]
        for listed in re.findall(r"ranges start where [^(]*\(([^)]*)\)", text):
            claims += [(name, "min", int(v)) for name, v in re.findall(r"(\w+) (\d+)", listed)]
    assert len(claims) >= 4, claims
    for name, end, version in claims:
        api = by_name[name]
        assert (api.min_version if end == "min" else api.max_version) == version, (name, end, version)
