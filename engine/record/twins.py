"""The registry of the modules that have a native twin: for each, how to get its pure-Python implementation and how to
get the native one (engine._native). The module that defines the Python side registers the pair once, at import;
`selected(name)` is what the process uses (the implementation engine.record.codec chose: the native core when it
loaded, the twins when KAFKALOG_NO_EXTENSIONS=1 or it did not), `load(name, impl)` either one, which is how the tests
run every implementation in one session, and `impl_of(name, obj)` says which one an object is. Adding a twin is one
`register` call; nothing else in the project chooses between a native module and its twin. The codec decides which
implementation the process uses (engine.record.codec.IMPL); its own API is the twin "codec", registered here.

Each side is built by its factory on first use and kept: a factory that imports the native module raises ImportError
where it is missing, and `selected` then fails at the import of the module asking, as the native core was required.
Thread-safety: registration happens at import (under the import lock); `load` may build a side twice when two threads
first ask at once; the first kept is the one both get (a factory is pure).
"""
from __future__ import annotations

from typing import Any, Callable

from engine.record import codec

IMPLS = ("cython", "python")

_factories: dict[str, dict[str, Callable[[], Any]]] = {}
_built: dict[tuple[str, str], Any] = {}


def register(name: str, *, python: Callable[[], Any], native: Callable[[], Any]) -> None:
    """Make `name` a twin: `python()` gives its pure-Python side, `native()` its native side (importing it)."""
    if name in _factories:
        raise ValueError(f"the twin {name!r} is registered already")
    _factories[name] = {"python": python, "cython": native}


def load(name: str, impl: str) -> Any:
    """The `impl` ("cython" or "python") side of the twin `name` (ImportError when the native one does not import)."""
    if impl not in IMPLS:
        raise ValueError(f"an implementation is one of {IMPLS}, not {impl!r}")
    if name not in _factories:
        raise KeyError(f"no twin {name!r} is registered (its module registers it when imported): {names()}")
    key = (name, impl)
    if key not in _built:
        _built.setdefault(key, _factories[name][impl]())  # (two threads at once: both get the one kept)
    return _built[key]


def selected(name: str) -> Any:
    """The side of `name` this process uses: the codec's choice."""
    return load(name, codec.IMPL)


def impl_of(name: str, obj: Any) -> str:
    """Which side of the twin `name` `obj` is ("cython" or "python"), by identity with a side already built."""
    for impl in IMPLS:
        if _built.get((name, impl)) is obj:
            return impl
    raise ValueError(f"{obj!r} is neither side of the twin {name!r}")


def names() -> list[str]:
    """The registered twins."""
    return sorted(_factories)


register("codec", python=lambda: codec.gather("python"), native=lambda: codec.gather("cython"))
_built[("codec", codec.IMPL)] = codec.impl  # (the one the codec chose, built as it chose)
