"""librdkafka's own integration suite against a fresh listener (`make client-suites`).

librdkafka (the C client under confluent-kafka, kcat, and the Go, .NET and Node clients of its family) ships about
170 test programs that run against whatever cluster a `test.conf` names. The npm package
@confluentinc/kafka-javascript carries librdkafka's whole source, its tests included, so this runner builds the suite
from the npm registry alone: the package is fetched with `npm pack`, librdkafka's libraries and `tests/test-runner`
are built once into the cache (OpenSSL and zlib from Debian's -dev packages; SASL, zstd, an external lz4 and curl
left out), then the runner serves a fresh engine on an ephemeral 127.0.0.1 port with a real broker's defaults (one
partition per auto-created topic, no initial rebalance delay) and runs the suite in quick mode without the socket
emulation and local-only tests (`test-runner -Q -E -L`), two tests at a time.

EXPECTED_TO_PASS is what must pass: every test that passes against one real Kafka 4 broker with default settings
(librdkafka_real_broker.txt, from that run of the same suite), plus those that pass here but not there
(ALSO_PASSING_HERE, each with the reason); tests whose outcome varies here (VARIES) and librdkafka's `_mock` tests
(which never reach the listener) are not judged. A test that times out makes the test-runner kill itself, so the
tests it had not finished are run again, without it, until each has an outcome; then a test that fails is run again
alone once (the suite's own advice for a test that timed out on a loaded machine). The run fails when an expected
test still does not pass, or when a test outside the list passes (so the list stays true). `--write` puts the table
into docs/protocol.md.
`--group-protocol consumer` runs the whole suite again with its consumers on `group.protocol=consumer` (Kafka 4's
consumer group protocol, KIP-848), judged the same way against the same broker's run in that mode
(librdkafka_real_broker_consumer.txt); its table goes to docs/protocol.md too.
`--share` runs the suite's share consumer tests (KIP-932, SHARE_TESTS), which ask for a Kafka 4.2 broker: told it
runs against 4.2.0, in full (not quick) mode, since each of their subtests is skipped in quick mode; the engine
serves them with group.share.heartbeat.interval.ms=1000 (Kafka's default is 5000; their time limits assume the faster
heartbeats librdkafka's own mock cluster gives them). No real broker here serves them (the broker build is Kafka
4.0, whose share APIs are v0, which librdkafka does not send; a 4.2.0-SNAPSHOT built from late-2025 sources refused
librdkafka's member ids, standard base64, in every share request), so they are judged alone: each must pass but those
in SHARE_NOT_PASSING, each with its reason, which must fail (SHARE_VARIES: judged neither way).

Usage: python -m tests.client_suites.librdkafka [--cache DIR] [--write] [--tests 0001,0011] [--group-protocol consumer]
       python -m tests.client_suites.librdkafka --share [--cache DIR] [--write] [--tests 0171]
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import engine
from tests.client_suites.report import ROOT, replace_between

PACKAGE = "@confluentinc/kafka-javascript@1.10.1"  # ships librdkafka 2.15.1 in deps/librdkafka
KAFKA_VERSION = "4.0.0"   # what the suite is told it runs against: the listener answers as a 4.x KRaft broker
_HERE = os.path.dirname(os.path.abspath(__file__))
BASELINES = {"classic": os.path.join(_HERE, "librdkafka_real_broker.txt"),
             "consumer": os.path.join(_HERE, "librdkafka_real_broker_consumer.txt")}
MARKERS = {"classic": ("<!-- librdkafka-suite:begin -->", "<!-- librdkafka-suite:end -->"),
           "consumer": ("<!-- librdkafka-suite-consumer:begin -->", "<!-- librdkafka-suite-consumer:end -->"),
           "share": ("<!-- librdkafka-suite-share:begin -->", "<!-- librdkafka-suite-share:end -->")}
SHARE_KAFKA_VERSION = "4.2.0"  # what the share tests ask for (TEST_BRKVER 4.2)
SHARE_HEARTBEAT_MS = 1000
SHARE_TESTS = ("0170_share_consumer_subscription", "0171_share_consumer_consume", "0172_share_consumer_acknowledge",
               "0173_share_consumer_commit_async", "0174_share_consumer_concurrency", "0175_share_consumer_groups",
               "0176_share_consumer_commit_sync", "0177_share_consumer_transactions", "0178_share_consumer_close",
               "0179_share_consumer_destroy", "0180_share_consumer_config", "0181_share_consumer_topic_delete",
               "0184_share_consumer_topic_recreate", "0185_share_consumer_max_poll_interval")
SHARE_NOT_PASSING = {
    "0170_share_consumer_subscription": "its time limit (160 s for about twenty subtests) runs out with every subtest "
                                        "that ran passed: several wait out all their polls, since the suite's "
                                        "test_share_poll never reports how many records it received (so "
                                        "test_share_consume_msgs counts none and polls max_attempts times)",
    "0171_share_consumer_consume": "its all-codecs subtest sets compression.type=zstd, which this build of librdkafka "
                                   "lacks (as the real broker's baseline build does)",
    "0179_share_consumer_destroy": "its explicit-acknowledgement subtests expect each poll to return one partition's "
                                   "records, as a cluster whose partitions have different leaders gives them (the "
                                   "client fetches one broker a round); one node leads every partition here",
}
# Why the real broker's run in consumer mode passes fewer tests: its build offers ConsumerGroupHeartbeat v0 only, and
# librdkafka 2.15 sends v1 alone (the version with SubscribedTopicRegex); v1 is unstable in that build and, once
# enabled (unstable.api.versions.enable), refuses librdkafka's heartbeat as an invalid request. So there a consumer
# that subscribes is never given partitions, and each test that waits for a subscribing consumer's records fails.
_NO_CONSUMER_GROUP = ("a consumer that subscribes is never given partitions by the real broker's build in this mode "
                      "(it offers ConsumerGroupHeartbeat v0 only; librdkafka 2.15 sends v1)")
ALSO_PASSING_HERE: dict[str, dict[str, str]] = {
    "classic": {},
    "consumer": {name: _NO_CONSUMER_GROUP for name in (
        "0020_destroy_hang", "0030_offset_commit", "0033_regex_subscribe", "0040_io_event", "0042_many_topics",
        "0060_op_prio", "0064_interceptors", "0069_consumer_add_parts", "0083_cb_event",
        "0091_max_poll_interval_timeout", "0093_holb_consumer", "0125_immediate_flush", "0129_fetch_aborted_msgs",
        "0137_barrier_batch_consume")},
}
# tests whose outcome here varies between runs, judged neither way (a pass or a failure fails nothing)
VARIES = {
    "0118_commit_rebalance": "a 99 s test of commits during rebalances that times out on a loaded 2-core machine in "
                             "some runs; it fails against the real broker too",
    "0140_commit_metadata": "passed in the one of this session's three full runs that reached it (the others ended "
                            "after a hung `_mock` test); the real broker's run did not pass it",
}
# share tests whose outcome varies between runs here, judged neither way
SHARE_VARIES = {
    "0184_share_consumer_topic_recreate": "its other subtests pass; its last failed in the runs made here on a "
                                          "delivery report left over from the subtest before (a record produced "
                                          "while its topic was deleted, failed with Local: Unknown partition after "
                                          "the next subtest began), which depends on when the client learns of the "
                                          "deletion",
}


def judged(name: str) -> bool:
    """Whether a test says anything about the listener: not one of VARIES, and not one of the `_mock` tests, which
    run against librdkafka's own in-process mock cluster whatever test.conf names."""
    return name not in VARIES and not name.endswith("_mock")
_DEBIAN = {"npm": "npm", "/usr/include/openssl/ssl.h": "libssl-dev", "/usr/include/zlib.h": "zlib1g-dev"}
_RESULT = re.compile(r"^\| (\d{4}[A-Za-z0-9_]*) +\| +([A-Z]+) ")
_DONE = re.compile(r"={5,} Test (\d{4}[A-Za-z0-9_]*) (PASSED|FAILED|SKIPPED) ={5,}")
# a failed assertion or time limit, which may end the runner before its closing table (it aborts on some failures)
_FAILED_AT = re.compile(r'^### Test "(\d{4}[A-Za-z0-9_]*)(?: \([^"]*\))?" failed at ')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def baseline(protocol: str = "classic") -> dict[str, str]:
    """{test: outcome} of the real broker's run with its consumers on group `protocol`."""
    with open(BASELINES[protocol]) as f:
        return dict(line.split() for line in f if line.strip() and not line.startswith("#"))


def expected(protocol: str = "classic") -> set[str]:
    if protocol == "share":
        return set(SHARE_TESTS) - set(SHARE_NOT_PASSING) - set(SHARE_VARIES)
    return {name for name, outcome in baseline(protocol).items() if outcome == "PASSED"} | \
        set(ALSO_PASSING_HERE[protocol])


_FINAL = ("PASSED", "FAILED", "SKIPPED")  # a test's outcome once it ended (RUNNING, DNS: it did not)


def _missing_tools() -> list[str]:
    return [package for path, package in _DEBIAN.items()
            if not (shutil.which(path) if "/" not in path else os.path.exists(path))]


def build(cache: str) -> str:
    """librdkafka's tests/ folder with its test-runner built (once per package release)."""
    home = os.path.join(cache, "librdkafka-" + PACKAGE.rsplit("@", 1)[1])
    tests = os.path.join(home, "src", "tests")
    if os.path.exists(os.path.join(tests, "test-runner")):
        return tests
    missing = _missing_tools()
    if missing:
        raise SystemExit(f"librdkafka's suite needs Debian's {' '.join(missing)}: apt-get install {' '.join(missing)}")
    shutil.rmtree(home, ignore_errors=True)
    pack = os.path.join(home, "pack")
    os.makedirs(pack)
    subprocess.run(["npm", "pack", "-q", PACKAGE], cwd=pack, check=True, stdout=subprocess.DEVNULL)
    (tgz,) = glob.glob(os.path.join(pack, "*.tgz"))
    prefix = "package/deps/librdkafka/"
    with tarfile.open(tgz) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix):]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(os.path.join(home, "src"), members=members, **safe)
    src = os.path.join(home, "src")
    for pattern in ("configure", "mklove/modules/*", "lds-gen.py", "packaging/tools/*.sh"):
        for path in glob.glob(os.path.join(src, pattern)):
            os.chmod(path, 0o755)
    log = os.path.join(home, "build.log")
    with open(log, "w") as out:
        for cmd in (["./configure", "--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-lz4-ext",
                     "--disable-sasl"], ["make", "-j2", "libs"], ["make", "-C", "tests", "-j2", "build"]):
            if subprocess.run(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise SystemExit(f"building librdkafka's suite failed at {' '.join(cmd)}: see {log}")
    return tests


def outcomes(log_text: str) -> dict[str, str]:
    """{test: PASSED|FAILED|SKIPPED|...} from a test-runner log: its closing table, else the per-test lines (a run
    ended by its time limit, or aborted by a failure, has no table; a test's `failed at` line then says it failed)."""
    out: dict[str, str] = {}
    for line in _COLOUR.sub("", log_text).splitlines():
        found = _RESULT.match(line) or _DONE.search(line)
        if found:
            out[found.group(1)] = found.group(2)
        elif (failed := _FAILED_AT.match(line)) is not None:
            out.setdefault(failed.group(1), "FAILED")
    return out


def run(tests: str, bootstrap: str, only: list[str] | None, seconds: int, protocol: str = "classic") -> dict[str, str]:
    """Run the suite (or `only` those tests) against `bootstrap`, its consumers in group `protocol`: {test:
    outcome}."""
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "test.conf")
        with open(conf, "w") as f:
            f.write(f"bootstrap.servers={bootstrap}\n")
        # CI unset: with it, librdkafka's runner skips its latency tests (0055, parts of 0025 and 0062); the
        # real broker's baseline was run without it, so the listener is judged on the same tests.
        version = SHARE_KAFKA_VERSION if protocol == "share" else KAFKA_VERSION
        env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "RDKAFKA_TEST_CONF": conf,
               "TEST_KAFKA_VERSION": version, "LD_LIBRARY_PATH": "../src:../src-cpp"}
        if protocol == "consumer":
            env["TEST_CONSUMER_GROUP_PROTOCOL"] = "consumer"
        if only or protocol == "share":
            env["TESTS"] = ",".join(only or [name[:4] for name in SHARE_TESTS])
        log = os.path.join(tmp, "run.log")
        quick = [] if protocol == "share" else ["-Q"]  # (the share tests' subtests all skip in quick mode)
        with open(log, "w") as out:
            try:
                subprocess.run(["./test-runner", *quick, "-E", "-L", "-p2", "-V", version], cwd=tests, env=env,
                               stdout=out, stderr=subprocess.STDOUT, timeout=seconds)
            except subprocess.TimeoutExpired:
                print(f"librdkafka's suite: stopped after {seconds} s", file=sys.stderr)
        with open(log, errors="replace") as f:
            return outcomes(f.read())


def run_all(tests: str, bootstrap: str, only: list[str] | None, seconds: int, protocol: str) -> dict[str, str]:
    """`run`, until each test has an outcome or `seconds` pass: a test that times out makes the test-runner kill
    itself (its outcome FAILED, in the table it prints first), and the tests it had not finished are run again."""
    deadline = time.monotonic() + seconds
    results: dict[str, str] = {}
    pending = only
    while (left := int(deadline - time.monotonic())) > 0:
        got = run(tests, bootstrap, pending, left, protocol)
        results.update((name, outcome) for name, outcome in got.items() if outcome in _FINAL)
        unfinished = sorted({name[:4] for name in got if name not in results})
        if not unfinished or unfinished == pending:  # (done, or a run that made no progress)
            for name, outcome in got.items():
                results.setdefault(name, outcome)
            break
        pending = unfinished
    return results


def serve_and_run(tests: str, only: list[str] | None, seconds: int, protocol: str = "classic") -> dict[str, str]:
    """A fresh engine served with a real broker's defaults, the suite against it, then each expected test that did
    not pass run again alone."""
    settings = {"group_share_heartbeat_interval_ms": SHARE_HEARTBEAT_MS} if protocol == "share" else None
    with tempfile.TemporaryDirectory() as tmp, engine.open(os.path.join(tmp, "data"), group_config=settings) as eng:
        listener = eng.serve(port=0, default_partitions=1)
        results = run_all(tests, listener.bootstrap, only, seconds, protocol)
        for name in sorted(expected(protocol) - {n for n, o in results.items() if o == "PASSED"}):
            if only is None or name[:4] in only:
                again = run(tests, listener.bootstrap, [name[:4]], 600, protocol).get(name)
                if again is not None:
                    results[name] = again if again == "PASSED" else results.get(name, again)
        return results


def check(results: dict[str, str], only: list[str] | None = None, protocol: str = "classic") -> list[str]:
    if protocol == "share":
        return [f"{n}: {results.get(n, 'not run')}" + (f" (listed as not passing: {SHARE_NOT_PASSING[n]})"
                                                       if n in SHARE_NOT_PASSING else "")
                for n in SHARE_TESTS if (only is None or n[:4] in only) and n not in SHARE_VARIES
                and (results.get(n) == "PASSED") == (n in SHARE_NOT_PASSING)]
    want = {n for n in expected(protocol) if only is None or n[:4] in only}
    problems = [f"{n}: {results.get(n, 'not run')} (it passes against a real broker, group.protocol={protocol})"
                for n in sorted(want) if results.get(n) != "PASSED"]
    problems += [f"{n}: passed, but is not in the expected list (add it to ALSO_PASSING_HERE with the reason)"
                 for n, o in sorted(results.items()) if o == "PASSED" and n not in expected(protocol) and judged(n)]
    return problems


def share_table(results: dict[str, str]) -> str:
    passed = sum(1 for n in SHARE_TESTS if results.get(n) == "PASSED")
    lines = [f"librdkafka 2.15.1's share consumer tests (KIP-932; `test-runner -E -L`, full mode, told it runs "
             f"against Kafka {SHARE_KAFKA_VERSION}, from {PACKAGE}) against the listener (with "
             f"group.share.heartbeat.interval.ms={SHARE_HEARTBEAT_MS}): **{passed} of {len(SHARE_TESTS)} passed**.",
             "", "| test | listener | note |", "|---|---|---|"]
    lines += [f"| `{n}` | {results.get(n, 'not run').lower()} | "
              f"{SHARE_NOT_PASSING.get(n, '') or (f'not judged: {SHARE_VARIES[n]}' if n in SHARE_VARIES else '')} |"
              for n in SHARE_TESTS]
    return "\n".join(lines)


def table(results: dict[str, str], protocol: str = "classic") -> str:
    if protocol == "share":
        return share_table(results)
    real = baseline(protocol)
    also = ALSO_PASSING_HERE[protocol]
    broker = [name for name, outcome in real.items() if outcome == "PASSED"]
    passed = sum(1 for n, o in results.items() if o == "PASSED" and judged(n))
    mode = "" if protocol == "classic" else f", its consumers on `group.protocol={protocol}`,"
    lines = [f"librdkafka 2.15.1's integration suite (`test-runner -Q -E -L`, from {PACKAGE}){mode} against the "
             f"listener: **{passed} passed**; of the {len(broker)} tests one real Kafka 4 broker with default settings "
             f"passes in the same mode, {sum(1 for n in broker if results.get(n) == 'PASSED')} pass here.", "",
             "| test | listener | real broker | note |", "|---|---|---|---|"]
    for name in sorted(n for n in set(results) | set(real) if judged(n)):
        outcome = results.get(name, "not run")
        if outcome in ("PASSED", "FAILED") or name in real:
            lines.append(f"| `{name}` | {outcome.lower()} | {real.get(name, 'not passed').lower()} | "
                         f"{also.get(name, '')} |")
    lines += ["", "Not judged: the `_mock` tests (they run against librdkafka's own mock cluster, not the listener), "
              "and " + "; ".join(f"`{n}` ({why})" for n, why in sorted(VARIES.items())) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.path.join(ROOT, ".cache", "client-suites"))
    parser.add_argument("--write", action="store_true", help="update the table in docs/protocol.md")
    parser.add_argument("--tests", help="only these test numbers, comma-separated (e.g. 0001,0011)")
    parser.add_argument("--seconds", type=int, default=1500, help="the whole run's time limit")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--share", action="store_true", help="the share consumer tests (KIP-932) alone")
    args = parser.parse_args(argv)
    protocol = "share" if args.share else args.group_protocol
    only = args.tests.split(",") if args.tests else None
    results = serve_and_run(build(args.cache), only, args.seconds, protocol)
    text = table(results, protocol)
    print(text)
    if args.write:
        replace_between(*MARKERS[protocol], text)
    problems = check(results, only, protocol)
    for p in problems:
        print("UNEXPECTED:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
