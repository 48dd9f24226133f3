"""kio (Aiven's Python types of the Kafka protocol, generated from Kafka's published JSON schemas up to Kafka 4.2): an
independent codec for the APIs kafka-python has no classes for (the consumer group and share group protocols, the
share group offsets APIs). `frame_request`/`read_response` speak to a listener with it; `plain` turns its entities
into the dicts engine.protocol reads and writes, to compare field by field."""
from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import socket
import struct
import uuid

try:  # (kio needs Python 3.11+: on 3.10 its tests, marked "kio", are left out and this module has no schemas)
    from kio.index import load_request_schema, load_response_schema
    from kio.schema.errors import ErrorCode
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i16, i32
    HAVE_KIO = True
except ImportError:
    ErrorCode, HAVE_KIO = (), False

from tests.network.test_listener import _recv

KNOWN_ERROR_CODES = sorted(int(c) for c in ErrorCode)


def schemas(api_key: int, version: int) -> tuple[type, type] | None:
    """kio's request and response classes of one API version (None where kio has none, or is not installed)."""
    if not HAVE_KIO:
        return None
    try:
        return load_request_schema(api_key, version), load_response_schema(api_key, version)
    except Exception:  # kio.index's KioIndexError: no such API or version in kio
        return None


def encode(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode(cls: type, data: bytes, offset: int = 0):
    """(entity, bytes read)."""
    return entity_reader(cls)(data, offset)


def frame_request(entity, correlation_id: int, client_id: str = "kio") -> bytes:
    header = RequestHeader(request_api_key=i16(entity.__api_key__), request_api_version=i16(entity.__version__),
                           correlation_id=i32(correlation_id), client_id=client_id)
    body = encode(header) + encode(entity)
    return struct.pack(">i", len(body)) + body


def call(sock: socket.socket, entity, correlation_id: int = 1):
    """Send a kio request entity to a listener, read its answer with kio's response class of the same version."""
    sock.sendall(frame_request(entity, correlation_id))
    size = struct.unpack(">i", _recv(sock, 4))[0]
    data = _recv(sock, size)
    header, n = decode(ResponseHeader, data)
    assert header.correlation_id == correlation_id
    answer, used = decode(load_response_schema(entity.__api_key__, entity.__version__), data, n)
    assert n + used == len(data), "bytes left over after kio read the response"
    return answer


def plain(v):
    """A kio value as engine.protocol's decoders give it: entities as dicts, tuples as lists, durations as ints of
    milliseconds, error codes as ints, a zero UUID as kio's None."""
    if dataclasses.is_dataclass(v):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple):
        return [plain(x) for x in v]
    if isinstance(v, datetime.timedelta):
        return round(v / datetime.timedelta(milliseconds=1))
    if isinstance(v, enum.Enum):
        return int(v.value)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return v


def same_uuid(a, b) -> bool:
    zero = uuid.UUID(int=0)
    return (a or zero) == (b or zero)
