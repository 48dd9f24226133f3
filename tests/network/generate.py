"""Random values for any message schema (engine.protocol.schema): every field of a version, nulls where the
version allows them, tagged fields set or left at their default, arrays of zero to two elements. For the
differential tests against kafka-python and the protocol fuzzer's seeds."""
from __future__ import annotations

import random
import uuid

from engine.protocol.schema import Field


def _value(rng: random.Random, f: Field, type_: str, version: int):
    nullable = type_ == f.type and f.nullable_in(version)  # (an array's elements are never null)
    if nullable and rng.random() < 0.2:
        return None
    if type_ == "{}":
        return random_struct(rng, f.fields, version)
    if type_.startswith("[]"):
        element = type_[2:]
        return [_value(rng, f, element, version) if element else random_struct(rng, f.fields, version)
                for _ in range(rng.randrange(3))]
    if type_ in ("int8", "int16", "int32", "int64"):
        bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}[type_]
        return rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))
    if type_ == "uint16":
        return rng.randrange(1 << 16)
    if type_ == "float64":
        return rng.random()
    if type_ == "bool":
        return rng.random() < 0.5
    if type_ == "string":
        return "".join(rng.choice("abcxyz-._é") for _ in range(rng.randrange(12)))
    if type_ == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    return rng.randbytes(rng.randrange(40))  # bytes (records are opaque to both codecs)


def random_struct(rng: random.Random, fields: list[Field], version: int) -> dict:
    out = {}
    for f in fields:
        if f.has(version) and (f.tag is None or rng.random() < 0.6):
            out[f.name] = _value(rng, f, f.type, version)
    return out
