"""Suite-wide conventions.

- The run fails at start when KAFKALOG_REQUIRE_EXTENSIONS=1 but the pure-Python twin loaded
  (unless KAFKALOG_NO_EXTENSIONS=1 asked for the twin on purpose).
- `codec` is parametrised over every available implementation, so one pytest process runs the
  same vectors through the Cython core and the pure-Python twin.
"""
from __future__ import annotations

import os

import pytest

import engine
from engine.record import twins


def _implementations() -> list[str]:
    if os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1":
        return ["python"]
    try:
        twins.load("codec", "cython")
    except ImportError:
        return ["python"]
    return ["cython", "python"]


IMPLEMENTATIONS = _implementations()


def pytest_sessionstart(session: pytest.Session) -> None:
    required = os.environ.get("KAFKALOG_REQUIRE_EXTENSIONS") == "1"
    forced_twin = os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1"
    if required and not forced_twin and engine.IMPL != "cython":
        raise pytest.UsageError(
            "KAFKALOG_REQUIRE_EXTENSIONS=1 but engine.IMPL is 'python': the native core did not load"
        )


@pytest.fixture(params=IMPLEMENTATIONS)
def codec(request):
    """The codec module of one implementation (the twin "codec" of engine.record.twins: the native modules or their twins)."""
    return twins.load("codec", request.param)


@pytest.fixture(params=IMPLEMENTATIONS)
def producer_impl(request):
    """The accumulator, futures and murmur2 of one implementation (the twin "accumulator" of engine.record.twins)."""
    from engine.clients import accumulator
    return twins.load("accumulator", request.param)
