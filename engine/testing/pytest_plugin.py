"""kafkalog's pytest plugin (the `pytest11` entry point `kafkalog`, on by installing kafkalog).

Fixtures:
- `kafka_server`: a KafkaServer for this test alone, in process, with a fresh directory; settings from the test's
  `@pytest.mark.kafkalog(...)` marker (KafkaServer's keywords), stopped after the test.
- `kafka_session_server`: one KafkaServer for the whole session (defaults only; a marker does not change it).
- `kafka_topic_prefix`: a prefix unique to the test (`t<N>-`), for tests that share the session's server.
- `kafka_bootstrap`: the bootstrap address of `kafka_server`.
When a test that used a server fails, its report gets a section with the server's log (the requests it handled).
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest run: kafkalog is imported only when a fixture is used
    from engine.testing.server import KafkaServer

_SECTION = "kafkalog server log"
_numbers = itertools.count(1)
_session: list["KafkaServer"] = []  # the session's server while it runs


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kafkalog(**settings): settings of the test's kafka_server fixture "
                                       "(engine.testing.KafkaServer's keywords)")


def _attach(request: pytest.FixtureRequest, server: "KafkaServer") -> None:
    """Keep the server on the test's item, so a failing report can show its log."""
    servers = getattr(request.node, "_kafkalog_servers", [])
    servers.append(server)
    request.node._kafkalog_servers = servers


@pytest.fixture
def kafka_server(request: pytest.FixtureRequest) -> Iterator["KafkaServer"]:
    from engine.testing.server import KafkaServer

    marker = request.node.get_closest_marker("kafkalog")
    settings = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        raise pytest.UsageError("@pytest.mark.kafkalog takes keywords only (engine.testing.KafkaServer's)")
    with KafkaServer(**settings) as server:
        _attach(request, server)
        yield server


@pytest.fixture(scope="session")
def kafka_session_server() -> Iterator["KafkaServer"]:
    from engine.testing.server import KafkaServer

    with KafkaServer() as server:
        _session.append(server)
        try:
            yield server
        finally:
            _session.remove(server)


@pytest.fixture
def kafka_topic_prefix(request: pytest.FixtureRequest) -> str:
    return f"t{next(_numbers)}-"


@pytest.fixture
def kafka_bootstrap(kafka_server: "KafkaServer") -> str:
    return kafka_server.get_bootstrap_server()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        servers = list(getattr(item, "_kafkalog_servers", []))
        if "kafka_session_server" in getattr(item, "fixturenames", ()):
            servers += _session
        for server in servers:
            report.sections.append((f"{_SECTION} ({server.data_dir})", server.logs()))
