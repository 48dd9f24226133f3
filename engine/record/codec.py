"""The selector: loads the Cython core or its pure-Python twin, once, at import.

`KAFKALOG_NO_EXTENSIONS=1` forces the twin. Otherwise the native core (the
modules engine._native._records, _records_builder, _columnar, _log_scan,
_log_validator and _cleaner_records) is used when it imports; if it does not,
the twin (engine.record.records and the modules of the same names) is used with
a warning, unless `KAFKALOG_REQUIRE_EXTENSIONS=1`, which makes that an
ImportError. Both implementations export exactly `API`.
"""
from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

API = {  # each public name of the codec, and the module of each implementation that defines it
    "crc32c": "records",
    "iter_batches": "records",
    "first_at_or_after": "records",
    "RecordBatch": "records",
    "Record": "records",
    "ConsumerRecord": "records",
    "consumer_record": "records",
    "encode_batch": "records_builder",
    "encode_control_batch": "records_builder",
    "RecordsBuilder": "records_builder",
    "encode_columnar": "columnar",
    "decode_columnar": "columnar",
    "index_search": "log_scan",
    "scan_to_offset": "log_scan",
    "take_span": "log_scan",
    "prepare_leader_append": "log_validator",
    "rebuild_batch": "cleaner_records",
}

# where each implementation's modules are: engine._native._records is the twin of engine.record.records, and so on
_PACKAGES = {"cython": "engine._native._", "python": "engine.record."}


def gather(impl: str) -> ModuleType:
    """One implementation ("cython" or "python"), regardless of the environment: a module holding the names of API,
    gathered from that implementation's modules (an ImportError if one of them does not import). Ask for it as the
    twin "codec" of engine.record.twins (`twins.load("codec", impl)`), which builds each once."""
    codec = ModuleType(f"engine.record.codec:{impl}", f"The {impl} codec's API, from {_PACKAGES[impl]}*.")
    for name, module in API.items():
        setattr(codec, name, getattr(importlib.import_module(_PACKAGES[impl] + module), name))
    return codec


LOAD_ERROR: str | None = None  # why the native core did not load, when it did not


def _select() -> tuple[str, ModuleType]:
    global LOAD_ERROR
    if os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1":
        LOAD_ERROR = "KAFKALOG_NO_EXTENSIONS=1"
        return "python", gather("python")
    try:
        return "cython", gather("cython")
    except ImportError as exc:
        LOAD_ERROR = str(exc)
        if os.environ.get("KAFKALOG_REQUIRE_EXTENSIONS") == "1":
            raise ImportError(
                "kafkalog: the native core (engine._native) did not load and "
                f"KAFKALOG_REQUIRE_EXTENSIONS=1 ({exc})"
            ) from exc
        warnings.warn(
            f"kafkalog: native core unavailable ({exc}); using the pure-Python twin",
            RuntimeWarning,
            stacklevel=3,
        )
        return "python", gather("python")


IMPL, impl = _select()
globals().update((name, getattr(impl, name)) for name in API)  # crc32c, encode_batch, RecordBatch, ...
