"""Two objects seeing one set of attributes: a stand-in that becomes, in one step, the object built to replace it
(an unloaded log when it loads, a lazy partition when it is made), while the code that was handed the replacement
keeps using it.

`adopt_state(stand_in, built)` gives both objects one new plain dict of the built object's attributes. Not the
built object's own `__dict__`: from CPython 3.13, an object's attributes live inside the object and its `__dict__` is
a view whose values the collector reaches only through that object, so a stand-in holding the view alone would let a
collection that finds the built object unreachable clear everything the attributes refer to.
Byte layout: none. Crash policy: none (memory only). Thread-safety: the assignment that publishes the dict is one
step; the caller ensures nobody else writes either object's attributes during the call.
Leaf module: imports nothing from kafkalog.
"""
from __future__ import annotations


def adopt_state(stand_in: object, built: object) -> None:
    """From now on `stand_in` and `built` share `built`'s attributes (see the module docstring)."""
    state = dict(built.__dict__)
    built.__dict__ = state
    stand_in.__dict__ = state
