"""Kafka's wire protocol: frames, request and response headers, and the API messages kafkalog speaks.

A frame is an int32 size followed by that many bytes. A request frame holds a request header (api key, api version,
correlation id, client id; tagged fields from the API's flexible versions) then the request body; a response frame
holds a response header (correlation id; tagged fields from the flexible versions, except ApiVersions, whose response
header is always v0) then the response body. Thread-safety: stateless functions.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from engine.protocol import admin_messages, share_messages  # noqa: F401 (define their APIs into APIS)
from engine.protocol.messages import API_VERSIONS, APIS, REQUEST_HEADER, RESPONSE_HEADER, Api
from engine.protocol.schema import read_struct, write_struct
from engine.protocol.types import MalformedRequestError, Reader, Writer

__all__ = ["APIS", "Api", "MalformedRequestError", "Request", "UnsupportedApiError", "decode_request",
           "encode_request", "encode_response", "decode_response"]

_SIZE = struct.Struct(">i")


class UnsupportedApiError(MalformedRequestError):
    """A request for an API key or version kafkalog does not speak (Kafka closes the connection; code 35)."""
    code = 35


@dataclass
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: dict
    unsupported_version: int | None = None   # an ApiVersions request newer than ours: answered at v0 with error 35
    deadline: float | None = None   # a parked request's time.monotonic() deadline (set by its first run)
    state: object = None            # what a parked request's handler keeps between its runs (a JoinGroup's Pending)
    session: object = None          # its connection's Session (engine.network.socket_server), set on dispatch


def _read_header(r: Reader) -> tuple[int, int, int]:
    return r.int16(), r.int16(), r.int32()


def decode_request(frame) -> Request:
    """The request in one frame's bytes (without its size prefix). An ApiVersions request of a version newer than
    kafkalog's comes back as a version-0 request, whose answer says which versions are spoken (as Kafka does).
    Bytes after the body's last field are ignored, as Kafka's generated readers ignore them: librdkafka 2.8 to 2.16
    sends an all-topics Metadata request with a 4-byte placeholder where the null topic array's one byte belongs."""
    r = Reader(frame)
    key, version, correlation_id = _read_header(r)
    api = APIS.get(key)
    if api is None:
        raise UnsupportedApiError(f"unknown API key {key} (correlation id {correlation_id})")
    if not api.min_version <= version <= api.max_version:
        if api is API_VERSIONS and version > api.max_version:
            client_id = r.string(False)  # a newer ApiVersions body may not parse: it is not read
            return Request(api, 0, correlation_id, client_id, {}, unsupported_version=version)
        raise UnsupportedApiError(f"{api.name} v{version} is not supported (v{api.min_version}-v{api.max_version})")
    r.pos = 0
    header = read_struct(r, REQUEST_HEADER, api.request_header_version(version), api.flexible(version))
    body = read_struct(r, api.request, version, api.flexible(version))
    return Request(api, version, correlation_id, header["client_id"], body)


def encode_request(api: Api, version: int, correlation_id: int, body: dict, client_id: str | None = "kafkalog") -> bytes:
    """A whole request frame (size prefix included): for tests and the fuzzer's seeds."""
    w = Writer()
    write_struct(w, REQUEST_HEADER, {"request_api_key": api.key, "request_api_version": version,
                                     "correlation_id": correlation_id, "client_id": client_id},
                 api.request_header_version(version), api.flexible(version))
    write_struct(w, api.request, body, version, api.flexible(version))
    data = w.getvalue()
    return _SIZE.pack(len(data)) + data


def encode_response(api: Api, version: int, correlation_id: int, body: dict) -> list:
    """A whole response frame as a list of chunks (the size prefix first; large record fields by reference)."""
    w = Writer()
    flexible = api.flexible(version)
    write_struct(w, RESPONSE_HEADER, {"correlation_id": correlation_id}, api.response_header_version(version),
                 api.response_header_version(version) >= 1)
    write_struct(w, api.response, body, version, flexible)
    return [_SIZE.pack(w.size()), *w.chunks()]


def decode_response(api: Api, version: int, frame) -> tuple[int, dict]:
    """(correlation id, body) of one response frame without its size prefix: for tests."""
    r = Reader(frame)
    header = read_struct(r, RESPONSE_HEADER, api.response_header_version(version),
                         api.response_header_version(version) >= 1)
    body = read_struct(r, api.response, version, api.flexible(version))
    if r.remaining():
        raise MalformedRequestError(f"{api.name} v{version} response has {r.remaining()} bytes left over")
    return header["correlation_id"], body
