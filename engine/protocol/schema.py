"""Message schemas: how the APIs' requests and responses are laid out, version by version, and the generic reader
and writer that follow them.

A schema is written in a small indented notation (see engine.protocol.messages), one field per line:

    name type versions [null=V] [tag=N] [default=X] [ignorable] [noflex]

- type: int8, int16, uint16, int32, int64, float64, bool, string, bytes, records, uuid; `[]T` an array of one of
  those; `[]` an array of structs and `{}` one struct, whose fields follow, indented two more spaces;
- versions: `N+`, `N-M` or `N`: the versions holding the field; null=: the versions where it may be null;
- tag=N: a tagged field (written in the flexible versions' tagged section only when not at its default);
- default=: its value where absent or untagged-and-unset (else 0, false, "", empty, the zero uuid; `null`);
- ignorable: a value set for a version without the field is dropped rather than refused;
- noflex: always written in the non-compact form (the request header's client id).

Values are dicts keyed by field name; arrays of structs are lists of dicts. Reading yields every field of the version
read (absent ones at their default); writing takes missing keys as defaults. Byte layout of each type: see
engine.protocol.types. Thread-safety: schemas are immutable once parsed; the per-version plans are built once, under
the GIL, and shared.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.protocol.types import ZERO_UUID, MalformedRequestError, Reader, Writer

PRIMITIVES = ("int8", "int16", "uint16", "int32", "int64", "float64", "bool", "string", "bytes", "records", "uuid")
_TYPE_DEFAULTS = {"bool": False, "string": "", "bytes": b"", "records": None, "uuid": ZERO_UUID, "float64": 0.0}


def _versions(text: str) -> tuple[int, int]:
    if text.endswith("+"):
        return int(text[:-1]), 1 << 15
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


@dataclass
class Field:
    name: str
    type: str               # a primitive, "[]<primitive>", "[]" (structs) or "{}" (one struct)
    versions: tuple[int, int]
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    default: Any = None
    ignorable: bool = False
    noflex: bool = False
    null_default: bool = False
    fields: list["Field"] = field(default_factory=list)

    def has(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def default_value(self):
        if self.null_default:
            return None
        if self.type.startswith("["):
            return []
        if self.type == "{}":
            return {f.name: f.default_value() for f in self.fields}
        return self.default


def _parse_default(type_: str, text: str | None):
    if text == "null":
        return None
    if text is None:
        if type_ in _TYPE_DEFAULTS:
            return _TYPE_DEFAULTS[type_]
        return None if type_.startswith("[") or type_ == "{}" else 0
    if type_ == "bool":
        return text == "true"
    if type_ == "string":
        return text
    return int(text, 0)


def parse_fields(text: str) -> list[Field]:
    """The fields written in the notation above (indentation two spaces per level)."""
    root: list[Field] = []
    stack: list[tuple[int, list[Field]]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        name, type_, versions, *opts = raw.split()
        options = dict(o.split("=", 1) if "=" in o else (o, "") for o in opts)
        unknown = set(options) - {"null", "tag", "default", "ignorable", "noflex"}
        element = type_[2:] if type_.startswith("[]") else type_
        if unknown or (element and element not in PRIMITIVES and type_ not in ("[]", "{}")):
            raise ValueError(f"schema line {raw.strip()!r}: unknown type or option")
        f = Field(name, type_, _versions(versions), _versions(options["null"]) if "null" in options else None,
                  int(options["tag"]) if "tag" in options else None, _parse_default(element or type_,
                                                                                    options.get("default")),
                  "ignorable" in options, "noflex" in options, options.get("default") == "null")
        while indent <= stack[-1][0]:
            stack.pop()
        stack[-1][1].append(f)
        if type_ in ("[]", "{}"):
            stack.append((indent, f.fields))
    return root


# --- reading and writing -------------------------------------------------------------------------------------------
def _read_value(r: Reader, f: Field, type_: str, version: int, flexible: bool):
    compact = flexible and not f.noflex
    if type_ == "string":
        v = r.string(compact)
    elif type_ in ("bytes", "records"):
        v = r.records(compact) if type_ == "records" else r.bytes(compact)
    elif type_ == "{}":
        # a nullable struct: int8 -1 for null, else 1 and the struct; tagged, a varint: 0 for null, else 1 (Kafka's
        # generated readers: readByte() < 0, and readUnsignedVarint() <= 0 for a tagged one)
        if f.nullable_in(version) and (r.uvarint() == 0 if f.tag is not None else r.int8() < 0):
            return None
        return read_struct(r, f.fields, version, flexible)
    elif type_.startswith("[]"):
        n = r.length(compact, wide=True)
        if n < 0:
            v = None
        else:
            if n > r.remaining():  # every element takes at least one byte: a count this large is a lie
                raise MalformedRequestError(f"array {f.name} claims {n} elements in {r.remaining()} bytes")
            element = type_[2:]
            if element:
                v = [_read_value(r, f, element, version, flexible) for _ in range(n)]
            else:
                v = [read_struct(r, f.fields, version, flexible) for _ in range(n)]
    else:
        return getattr(r, type_)()
    if v is None and not (type_ == f.type and f.nullable_in(version)):  # (an array's elements are never null)
        raise MalformedRequestError(f"field {f.name} is null, which version {version} does not allow")
    return v


def read_struct(r: Reader, fields: list[Field], version: int, flexible: bool) -> dict:
    """One struct of `fields` at `version` (flexible: the version is one of the message's flexible ones)."""
    out = {}
    tagged = {}
    for f in fields:
        if not f.has(version):
            out[f.name] = f.default_value()
        elif f.tag is not None and flexible:
            tagged[f.tag] = f
            out[f.name] = f.default_value()
        elif f.tag is None:
            out[f.name] = _read_value(r, f, f.type, version, flexible)
        else:
            out[f.name] = f.default_value()
    if flexible:
        count = r.uvarint()
        last = -1
        for _ in range(count):
            tag, size = r.uvarint(), r.uvarint()
            if tag <= last:
                raise MalformedRequestError(f"tagged field {tag} out of order")
            last = tag
            end = r.pos + size
            if end > r.end:
                raise MalformedRequestError(f"tagged field {tag} of {size} bytes runs past the end")
            f = tagged.get(tag)
            if f is None:
                r.pos = end  # unknown tags are skipped, as Kafka does
                continue
            sub = Reader(r.buf, r.pos, end)
            out[f.name] = _read_value(sub, f, f.type, version, flexible)
            if sub.pos != end:
                raise MalformedRequestError(f"tagged field {tag} has {end - sub.pos} bytes left over")
            r.pos = end
    return out


def _write_value(w: Writer, f: Field, type_: str, v, version: int, flexible: bool) -> None:
    compact = flexible and not f.noflex
    if v is None and type_ not in ("records", "{}") and not (type_ == f.type and f.nullable_in(version)):
        raise ValueError(f"field {f.name} may not be null in version {version}")
    if type_ == "string":
        w.string(v, compact)
    elif type_ in ("bytes", "records"):
        w.bytes(v, compact)
    elif type_ == "{}":
        if f.nullable_in(version):
            if f.tag is not None:
                w.uvarint(0 if v is None else 1)
            else:
                w.int8(-1 if v is None else 1)
            if v is None:
                return
        write_struct(w, f.fields, v or {}, version, flexible)
    elif type_.startswith("[]"):
        if v is None:
            w.length(-1, compact, wide=True)
            return
        w.length(len(v), compact, wide=True)
        element = type_[2:]
        for item in v:
            if element:
                _write_value(w, f, element, item, version, flexible)
            else:
                write_struct(w, f.fields, item, version, flexible)
    else:
        getattr(w, type_)(v)


def write_struct(w: Writer, fields: list[Field], value: dict, version: int, flexible: bool) -> None:
    """Write `value` (missing keys: defaults) as one struct of `fields` at `version`."""
    tagged = []
    for f in fields:
        v = value[f.name] if f.name in value else f.default_value()
        if not f.has(version):
            if not f.ignorable and f.name in value and v != f.default_value():
                raise ValueError(f"field {f.name} cannot be set in version {version}")
            continue
        if f.tag is not None and flexible:
            # (a nullable struct's default in Kafka's generated classes is an empty struct, not null: a null one is
            # written, as a 0 marker)
            empty = {g.name: g.default_value() for g in f.fields} if f.type == "{}" and f.nullable_in(version) \
                else f.default_value()
            if v != empty:
                tagged.append((f, v))
        elif f.tag is None:
            _write_value(w, f, f.type, v, version, flexible)
    if flexible:
        w.uvarint(len(tagged))
        for f, v in sorted(tagged, key=lambda t: t[0].tag):
            sub = Writer()
            _write_value(sub, f, f.type, v, version, flexible)
            body = sub.getvalue()
            w.uvarint(f.tag)
            w.uvarint(len(body))
            w.out += body
