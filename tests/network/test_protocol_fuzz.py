"""Seeded fuzzing of the protocol listener. Valid request frames of every API and version (random field values)
are bit-flipped, truncated, extended, spliced, and given other sizes, API keys and versions:
- decoding each must give a request or raise MalformedRequestError, nothing else;
- sent to a live listener (a share of them, on connections of their own), none may make a handler fail, the
  listener keeps answering a connection that behaves, and a topic no fuzzed request can name is left as it was.
KAFKALOG_PROTOCOL_FUZZ_CASES sets the decoder's count (CI: 20,000; `make fuzz`: 200,000); one in fifty goes to the
live listener."""
from __future__ import annotations

import logging
import os
import random
import socket
import struct

import engine
from engine.protocol import APIS, MalformedRequestError, decode_request, encode_request
from engine.protocol import messages as m
from tests.network.generate import random_struct
from tests.network.test_listener import _call, _records

CASES = int(os.environ.get("KAFKALOG_PROTOCOL_FUZZ_CASES", "20000"))
GUARD = "guard-topic-the-fuzzer-cannot-name"


def _seeds(rng: random.Random) -> list[bytes]:
    out = []
    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            for _ in range(3):
                body = random_struct(rng, api.request, version)
                out.append(encode_request(api, version, rng.randrange(1 << 31), body)[4:])
    return out + _client_shapes()


def _client_shapes() -> list[bytes]:
    """What real clients send that a stricter reader refused: librdkafka's all-topics Metadata v12 with three bytes
    after its last field, and Produce batches whose CRC is right around records that are not (a consumer of the
    partition must never see them)."""
    from tests.network.test_kafka_semantics import BAD_BATCHES

    metadata = encode_request(m.METADATA, 12, 1, {"topics": None, "allow_auto_topic_creation": True})[4:] + b"\0" * 3
    produce = [encode_request(m.PRODUCE, 3, 2, {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
                                                 "topic_data": [{"name": "fuzzed", "partition_data": [
                                                     {"index": 0, "records": data}]}]})[4:]
               for data, _ in BAD_BATCHES.values()]
    return [metadata, *produce]


def _mutate(rng: random.Random, frame: bytes, seeds: list[bytes]) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randrange(1, 4)):
        choice = rng.randrange(7)
        if choice == 0 and data:  # flip bits
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif choice == 1 and data:  # truncate
            del data[rng.randrange(len(data)):]
        elif choice == 2:  # extend with junk or 0xFF runs (huge lengths and counts)
            data[rng.randrange(len(data) + 1):0] = rng.choice([rng.randbytes(rng.randrange(1, 16)), b"\xff" * 5])
        elif choice == 3:  # splice another seed's tail
            other = rng.choice(seeds)
            data[rng.randrange(len(data) + 1):] = other[rng.randrange(len(other) + 1):]
        elif choice == 4 and len(data) >= 4:  # another API key and version
            struct.pack_into(">hh", data, 0, rng.choice([*APIS, rng.randrange(-5, 100)]), rng.randrange(-2, 20))
        elif choice == 5 and data:  # an interesting integer somewhere
            pos = rng.randrange(len(data))
            data[pos:pos + 4] = struct.pack(">i", rng.choice([-1, -2, 0, 1, 0x7FFFFFFF, -0x80000000]))
        elif choice == 6 and data:  # an unsigned varint that never ends
            pos = rng.randrange(len(data))
            data[pos:pos + 1] = b"\x80" * rng.randrange(1, 12)
    return bytes(data)


def test_decoding_mutated_frames_gives_a_request_or_a_typed_error():
    rng = random.Random(1)
    seeds = _seeds(rng)
    decoded = refused = 0
    for _ in range(CASES):
        frame = _mutate(rng, rng.choice(seeds), seeds)
        try:
            decode_request(frame)
            decoded += 1
        except MalformedRequestError:
            refused += 1
    assert decoded and refused  # both outcomes happen: the mutations reach past the header


def test_a_live_listener_survives_mutated_frames(tmp_path, caplog):
    rng = random.Random(2)
    seeds = [s for s in _seeds(rng)]
    with engine.open(str(tmp_path / "data")) as eng, eng.serve(port=0) as listener:
        eng.create_topic(GUARD, 1)
        with eng.producer() as inproc:
            inproc.send(GUARD, value=b"kept").get()
        before = _records(eng, GUARD)
        caplog.set_level(logging.WARNING, logger="kafkalog.network")
        with socket.create_connection(listener.address) as good:
            for i in range(max(1, CASES // 50)):
                frame = _mutate(rng, rng.choice(seeds), seeds)
                with socket.create_connection(listener.address) as bad:
                    bad.settimeout(5)
                    bad.sendall(struct.pack(">i", len(frame)) + frame)
                    bad.shutdown(socket.SHUT_WR)
                    try:
                        while bad.recv(1 << 16):
                            pass
                    except (TimeoutError, ConnectionResetError):
                        pass  # a request that waits (a long fetch) is dropped with its connection
                if i % 25 == 0:
                    answer = _call(good, m.METADATA, 1, {"topics": [{"name": GUARD}]}, correlation_id=i)
                    assert answer["topics"][0]["error_code"] == 0
        assert _records(eng, GUARD) == before
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, failures[0].getMessage() + "\n" + (failures[0].exc_text or "")
