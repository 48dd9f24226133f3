"""The selector: loads the Cython core or its pure-Python twin, once, at import.

`KAFKALOG_NO_EXTENSIONS=1` forces the twin. Otherwise the core
`engine._native._core` is used when it imports; if it does not, the twin is
used with a warning, unless `KAFKALOG_REQUIRE_EXTENSIONS=1`, which makes that
an ImportError. Both implementations export exactly `API`.
"""
from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

API = (
    "crc32c",
    "encode_batch",
    "encode_columnar",
    "encode_control_batch",
    "iter_batches",
    "first_at_or_after",
    "decode_columnar",
    "index_search",
    "scan_to_offset",
    "take_span",
    "prepare_leader_append",
    "RecordBatch",
    "Record",
    "ConsumerRecord",
    "consumer_record",
    "RecordsBuilder",
    "rebuild_batch",
)

_MODULES = {"cython": "engine._native._core", "python": "engine.record.records"}


def load(impl: str) -> ModuleType:
    """Import one implementation by name ("cython" or "python") regardless of the environment."""
    return importlib.import_module(_MODULES[impl])


LOAD_ERROR: str | None = None  # why the native core did not load, when it did not


def _select() -> tuple[str, ModuleType]:
    global LOAD_ERROR
    if os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1":
        LOAD_ERROR = "KAFKALOG_NO_EXTENSIONS=1"
        return "python", load("python")
    try:
        return "cython", load("cython")
    except ImportError as exc:
        LOAD_ERROR = str(exc)
        if os.environ.get("KAFKALOG_REQUIRE_EXTENSIONS") == "1":
            raise ImportError(
                "kafkalog: the native core engine._native._core did not load and "
                f"KAFKALOG_REQUIRE_EXTENSIONS=1 ({exc})"
            ) from exc
        warnings.warn(
            f"kafkalog: native core unavailable ({exc}); using the pure-Python twin",
            RuntimeWarning,
            stacklevel=3,
        )
        return "python", load("python")


IMPL, impl = _select()
globals().update((name, getattr(impl, name)) for name in API)  # crc32c, encode_batch, RecordBatch, ...
