"""kafka-python's own integration tests against `kafkalog serve` (`make client-suites`).

kafka-python's test suite can target a running broker instead of spawning one (KAFKA_URI). This runner takes the
suite from the source distribution of the kafka-python release installed in .venv (PyPI ships its tests there),
installs that release and the suite's own test dependencies into a separate virtual environment, serves a fresh
engine on an ephemeral 127.0.0.1 port with the settings the suite's broker template gives a real broker (four
partitions per new topic, group.min.session.timeout.ms=1000), runs the suite, and prints one line per test.

Every test is expected to pass except those listed in NOT_PASSING, each with the reason; the run fails when a test
outside that list does not pass, or a listed one starts passing (so the list stays true). `--write` puts the table
into docs/protocol.md between its markers.

Usage: python -m tests.client_suites.kafka_python [--cache DIR] [--write]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import venv
import xml.etree.ElementTree as ET

import engine
from tests.client_suites.report import ROOT, replace_between

BEGIN, END = "<!-- kafka-python-suite:begin -->", "<!-- kafka-python-suite:end -->"
# the Kafka release the suite is told it runs against: the listener answers as a KRaft broker of 4.x does
KAFKA_VERSION = "4.0.0"
SUITE_DEPENDENCIES = ["pytest", "pytest-mock", "pytest-timeout", "py", "cramjam", "lz4", "zstandard",
                      "python-snappy"]


def _unserved(api: str, why: str = "") -> str:
    return f"asks for {api}, which the listener does not serve (it is not in its ApiVersions)" + \
        (f": {why}" if why else "")


_OWN_BROKER = "starts its own broker with {what} (it cannot target a running one)"
NOT_PASSING = {
    "test_admin_integration.py::test_create_describe_delete_acls": _unserved(
        "CreateAcls, DescribeAcls and DeleteAcls", "kafkalog has no authorizer"),
    "test_admin_integration.py::test_describe_metadata_quorum": _unserved("DescribeQuorum",
                                                                          "there is no KRaft quorum"),
    "test_ssl_integration.py::TestSSLConnection::test_ssl_handshake": _OWN_BROKER.format(what="a TLS listener"),
    "test_ssl_integration.py::TestSSLConnection::test_legacy_kafka_client_ssl": _OWN_BROKER.format(
        what="a TLS listener"),
}
# the suite's own skip messages that mean "this needs a broker the suite starts itself"
SKIP_REASONS = {"Testing on external Kafka Broker": _OWN_BROKER.format(what="SASL users")}

# The suite imports test.service for its process helpers, which the source distribution leaves out; only the
# external-broker half is used when KAFKA_URI is set.
_SERVICE_SHIM = '''"""Written by kafkalog's runner: the source distribution has no test/service.py."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run targets a running listener; it cannot spawn a broker")
'''


def _run(cmd: list[str], **kw) -> None:
    subprocess.run(cmd, check=True, **kw)


def prepare(cache: str) -> tuple[str, str]:
    """The suite's folder and its virtual environment's python, made once per kafka-python release."""
    version = importlib.metadata.version("kafka-python")
    home = os.path.join(cache, f"kafka-python-{version}")
    source = os.path.join(home, f"kafka_python-{version}")
    python = os.path.join(home, "venv", "bin", "python")
    if not os.path.isdir(source):
        os.makedirs(home, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", home,
              f"kafka-python=={version}"])
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # (3.10.12 and newer)
        with tarfile.open(os.path.join(home, f"kafka_python-{version}.tar.gz")) as tar:
            tar.extractall(home, **safe)
    for name, text in (("__init__.py", ""), ("service.py", _SERVICE_SHIM)):
        path = os.path.join(source, "test", name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(text)
    if not os.path.exists(python):
        venv.create(os.path.join(home, "venv"), with_pip=True)
        _run([python, "-m", "pip", "install", "-q", *SUITE_DEPENDENCIES, f"kafka-python=={version}"])
    return source, python


def run_suite(source: str, python: str) -> dict[str, tuple[str, str]]:
    """Serve a fresh engine and run the suite against it: {test id: (outcome, message)}."""
    with tempfile.TemporaryDirectory() as tmp, \
            engine.open(os.path.join(tmp, "data"), group_config={"group_min_session_timeout_ms": 1000}) as eng:
        listener = eng.serve(port=0, default_partitions=4)
        report = os.path.join(tmp, "report.xml")
        os.makedirs(os.path.join(tmp, "kafka-root"))
        env = {**os.environ, "KAFKA_URI": f"PLAINTEXT://{listener.bootstrap}", "KAFKA_VERSION": KAFKA_VERSION,
               "KAFKA_ROOT": os.path.join(tmp, "kafka-root")}
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
                        "--timeout=120", "--tb=line", f"--junitxml={report}", "test/integration"],
                       cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return _outcomes(ET.parse(report))


def _outcomes(tree: ET.ElementTree) -> dict[str, tuple[str, str]]:
    out = {}
    for case in tree.iter("testcase"):
        module = case.get("classname", "").replace("test.integration.", "")
        parts = module.split(".")
        name = f"{parts[0]}.py::" + "::".join(parts[1:] + [case.get("name", "")])
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome, message = {"failure": "failed"}.get(kind, kind), found.get("message", "")
                break
        if name not in out or out[name][0] == "passed":  # a setup error and a teardown error are two entries
            out[name] = (outcome, message)
    return out


def table(results: dict[str, tuple[str, str]]) -> str:
    counts = {k: sum(1 for o, _ in results.values() if o == k) for k in ("passed", "failed", "error", "skipped")}
    lines = [f"kafka-python {importlib.metadata.version('kafka-python')}'s `test/integration` against the listener "
             f"(KAFKA_VERSION={KAFKA_VERSION}): **{counts['passed']} passed**, {counts['failed']} failed, "
             f"{counts['error']} could not start, {counts['skipped']} skipped by the suite.", "",
             "| test | outcome | why |", "|---|---|---|"]
    for name, (outcome, message) in sorted(results.items(), key=lambda kv: (kv[1][0] == "passed", kv[0])):
        why = NOT_PASSING.get(name, "")
        if outcome == "skipped":
            reason = re.sub(r"^Skipped: ", "", message)
            why = SKIP_REASONS.get(reason, f"skipped by the suite: {reason}")
        lines.append(f"| `{name}` | {outcome} | {why} |")
    return "\n".join(lines)


def check(results: dict[str, tuple[str, str]]) -> list[str]:
    """What contradicts NOT_PASSING: a test outside it that did not pass or skip, or a listed one that passed."""
    problems = [f"{n}: {o} ({m})" for n, (o, m) in results.items() if o in ("failed", "error") and n not in
                NOT_PASSING]
    problems += [f"{n}: listed as not passing but {results[n][0]}" for n in NOT_PASSING
                 if n in results and results[n][0] == "passed"]
    problems += [f"{n}: listed but not run" for n in NOT_PASSING if n not in results]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.path.join(ROOT, ".cache", "client-suites"))
    parser.add_argument("--write", action="store_true", help="update the table in docs/protocol.md")
    args = parser.parse_args(argv)
    results = run_suite(*prepare(args.cache))
    text = table(results)
    print(text)
    if args.write:
        replace_between(BEGIN, END, text)
    problems = check(results)
    for p in problems:
        print("UNEXPECTED:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
