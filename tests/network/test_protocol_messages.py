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
from tests.network import kio_peer
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
# APIs kafka-python has no message classes for: the consumer group protocol's (KIP-848), the share group protocol's
# (KIP-932) and the share group offsets APIs (Kafka 4.1). kio, another codec generated from Kafka's published schemas
# (tests/network/kio_peer.py), judges every version of them it has (test_kio_judges_...); the share group protocol's
# v0 (Kafka 4.0's early access, which Kafka 4.1 removed and kio lacks) Kafka's own 4.0 classes judge in `make
# interop` (tests/broker/test_kafka_messages.py), as they do every API they have.
NO_PEER = {68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 76: "ShareGroupHeartbeat",
           77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge", 90: "DescribeShareGroupOffsets",
           91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets"}
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


def _project(theirs, ours: dict, fields: list[Field], version: int, kio: bool = False) -> None:
    """Assert every field of `ours` present in `version` equals the peer's decoded value (kafka-python's, or with
    `kio` kio's, which names a duration field without its `_ms` and reads a zero UUID as None)."""
    for f in fields:
        if not f.has(version) or f.name not in ours:
            continue
        if kio:
            name = f.name if f.name in theirs else f.name.removesuffix("_ms")
            assert name in theirs, (f.name, sorted(theirs))
        elif f.name in PEER_RETYPED and f.name not in theirs:
            continue
        else:
            name = f.name
        mine, got = ours[f.name], _plain(theirs[name])
        if f.type == "{}" and mine is not None:
            _project(got, mine, f.fields, version, kio)
        elif f.type == "[]" and mine is not None:
            assert len(got) == len(mine), f.name
            for g, m in zip(got, mine):
                _project(g, m, f.fields, version, kio)
        elif f.type == "uuid" and kio:
            assert kio_peer.same_uuid(got, mine), (f.name, got, mine)
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


KIO_CASES = [(api, v) for api in sorted(APIS.values(), key=lambda a: a.key) if api.key in NO_PEER
             for v in range(api.min_version, api.max_version + 1) if kio_peer.schemas(api.key, v) is not None]


@pytest.mark.kio
def test_kio_has_every_version_kafka_python_lacks_but_kafka_4_0s_early_access_share_apis():
    lacking = {(a.key, v) for a in APIS.values() if a.key in NO_PEER for v in range(a.min_version, a.max_version + 1)
               if kio_peer.schemas(a.key, v) is None}
    assert lacking == {(76, 0), (77, 0), (78, 0), (79, 0)}


def _known_error_codes(rng: random.Random, body: dict, fields: list[Field]) -> None:
    """Error code fields set to codes Kafka defines (kio reads each into its enum of them)."""
    for f in fields:
        if f.name not in body or body[f.name] is None:
            continue
        if f.type == "int16" and f.name.endswith("error_code"):
            body[f.name] = rng.choice(kio_peer.KNOWN_ERROR_CODES)
        elif f.type == "{}":
            _known_error_codes(rng, body[f.name], f.fields)
        elif f.type == "[]":
            for element in body[f.name]:
                _known_error_codes(rng, element, f.fields)


@pytest.mark.kio
@pytest.mark.parametrize("api,version", KIO_CASES, ids=[f"{a.name}-v{v}" for a, v in KIO_CASES])
def test_kio_judges_the_apis_kafka_python_lacks(api, version):
    """What we encode, kio decodes to the same values and re-encodes to the same bytes (requests with their header
    v2, responses with header v1)."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.response_header.v1.header import ResponseHeader

    request_class, response_class = kio_peer.schemas(api.key, version)
    rng = random.Random(api.key * 1000 + version)
    for _ in range(8):
        body = random_struct(rng, api.request, version)
        _known_error_codes(rng, body, api.request)
        frame = encode_request(api, version, 77, body, client_id="tester")[4:]
        header, n = kio_peer.decode(RequestHeader, frame)
        assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
            (api.key, version, 77, "tester")
        theirs, used = kio_peer.decode(request_class, frame, n)
        assert n + used == len(frame)
        _project(kio_peer.plain(theirs), body, api.request, version, kio=True)
        assert kio_peer.encode(header) + kio_peer.encode(theirs) == frame
        _project(decode_request(frame).body, body, api.request, version)

        body = random_struct(rng, api.response, version)
        _known_error_codes(rng, body, api.response)
        data = b"".join(bytes(c) for c in encode_response(api, version, 91, body))[4:]
        header, n = kio_peer.decode(ResponseHeader, data)
        assert header.correlation_id == 91
        theirs, used = kio_peer.decode(response_class, data, n)
        assert n + used == len(data)
        _project(kio_peer.plain(theirs), body, api.response, version, kio=True)
        assert kio_peer.encode(header) + kio_peer.encode(theirs) == data
