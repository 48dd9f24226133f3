"""Every `kafkalog` subcommand end to end through its console script: output checked against the engine's
own view of the same directory, `--json` parsed, bad arguments answered with status 2 and one line."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

import engine
import engine.clients.accumulator
from tests import vectors

KAFKALOG = os.path.join(os.path.dirname(sys.executable), "kafkalog")


def run(*args, input: str | None = None, check: int | None = 0) -> subprocess.CompletedProcess:
    out = subprocess.run([KAFKALOG, *map(str, args)], input=input, capture_output=True, text=True, timeout=300)
    if check is not None:
        assert out.returncode == check, (args, out.returncode, out.stderr)
    return out


def tree_hash(path) -> str:
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def test_version_agrees_with_the_package():
    out = run("--version")
    assert out.stdout.split()[:2] == ["kafkalog", metadata.version("kafkalog")] == ["kafkalog", engine.__version__]


def test_topics_create_list_describe_alter_delete(tmp_path):
    data = tmp_path / "data"
    assert run("topics", "--data", data, "--create", "--topic", "orders", "--partitions", 3,
               "--config", "segment.bytes=1048576").stdout == "Created topic orders.\n"
    run("topics", "--data", data, "--create", "--topic", "audit", "--partitions", 1)
    assert json.loads(run("topics", "--data", data, "--list", "--json").stdout) == ["audit", "orders"]
    assert run("topics", "--data", data, "--list").stdout.split() == ["audit", "orders"]
    run("topics", "--data", data, "--alter", "--topic", "orders", "--config", "retention.ms=60000")
    run("topics", "--data", data, "--alter", "--topic", "orders", "--partitions", 4)
    run("topics", "--data", data, "--alter", "--topic", "orders", "--partitions", 2, check=2)  # only grows
    described = json.loads(run("topics", "--data", data, "--describe", "--topic", "orders", "--json").stdout)
    text = run("topics", "--data", data, "--describe", "--topic", "orders").stdout.splitlines()
    run("topics", "--data", data, "--delete", "--topic", "audit")
    with engine.open(str(data)) as eng:
        assert eng.list_topics() == ["orders"]
        d = eng.describe_topic("orders")
        assert described == [{
            "topic": "orders", "topicId": d.topic_id, "partitionCount": 4, "replicationFactor": 1,
            "configs": {"retention.ms": "60000", "segment.bytes": "1048576"},
            "partitions": [{"partition": p.partition, "leader": 0, "leaderEpoch": 0, "replicas": [0], "isr": [0],
                            "logStartOffset": p.log_start_offset, "logEndOffset": p.log_end_offset,
                            "highWatermark": p.high_watermark, "sizeInBytes": p.size_bytes, "segments": p.segments}
                           for p in d.partitions]}]
        assert d.config["retention.ms"] == 60000 and d.config["segment.bytes"] == 1048576
    assert text[0].startswith(f"Topic: orders\tTopicId: {d.topic_id}\tPartitionCount: 4\tReplicationFactor: 1\t")
    assert [line.split("\t")[2] for line in text[1:]] == [f"Partition: {p}" for p in range(4)]


def test_topics_describe_prints_leaders_replicas_and_isr_as_kafka_topics_does(tmp_path):
    data = tmp_path / "data"
    run("topics", "--data", data, "--brokers", 3, "--create", "--topic", "r", "--partitions", 3,
        "--replication-factor", 3, "--config", "min.insync.replicas=2")
    with engine.open(str(data), background=False) as eng:
        eng.fail_broker(1)
        expected = [(p.leader, p.replicas, p.isr) for p in eng.describe_topic("r").partitions]
    assert expected[1][0] == 2 and 1 not in expected[0][2]  # broker 1 lost its leadership and ISR places
    text = run("topics", "--data", data, "--describe", "--topic", "r").stdout.splitlines()
    assert text[0].split("\t")[3] == "ReplicationFactor: 3"
    # the describe reopened the directory: every broker runs again and broker 1 rejoins each ISR once its
    # fetcher caught up, so its ISRs hold the ones above and may already hold broker 1 again
    for line, (leader, replicas, isr) in zip(text[1:], expected):
        fields = line.split("\t")
        assert fields[3:5] == [f"Leader: {leader}", f"Replicas: {','.join(map(str, replicas))}"], line
        shown = [int(b) for b in fields[5].removeprefix("Isr: ").split(",")]
        assert set(isr) <= set(shown) <= set(replicas) and len(set(shown)) == len(shown), line


@pytest.mark.parametrize("args", [
    ["topics"],                                                       # no action
    ["topics", "--list", "--create"],                                 # two actions
    ["topics", "--create", "--topic", "x"],                           # no --partitions
    ["topics", "--create", "--topic", "x", "--partitions", "0"],
    ["topics", "--create", "--topic", "x", "--partitions", "many"],
    ["topics", "--create", "--topic", "bad/name", "--partitions", "1"],
    ["topics", "--create", "--topic", "x", "--partitions", "1", "--config", "segment.bytes"],
    ["topics", "--create", "--topic", "x", "--partitions", "1", "--config", "no.such.config=1"],
    ["topics", "--create", "--topic", "x", "--partitions", "1", "--replication-factor", "3"],
    ["console-consumer"],                                             # no --topic
    ["console-consumer", "--topic", "t", "--offset", "5"],            # --offset without --partition
    ["console-consumer", "--topic", "t", "--group", ""],               # an empty group id
    ["groups", "--reset-offsets", "--group", "g"],                    # no --to-...
    ["groups", "--reset-offsets", "--group", "g", "--to-datetime", "noon", "--topic", "t"],
    ["console-consumer", "--topic", "t", "--property", "print.nothing=true"],
    ["console-producer", "--topic", "t", "--compression-codec", "brotli"],
    ["get-offsets", "--topic", "t", "--time", "yesterday"],
    ["get-offsets", "--topic", "../t"],                                # names are checked wherever they arrive
    ["console-consumer", "--topic", "a/b", "--timeout-ms", "10"],
    ["console-producer", "--topic", "__consumer_offsets"],
    ["delete-records", "--offset-json-file", "/no/such/file.json"],
    ["transactions"],                                                 # neither --list nor --describe
    ["verify", "/no/such/directory"],
    ["no-such-command"],
])
def test_bad_arguments_exit_2_with_one_line(args, tmp_path):
    run("topics", "--data", tmp_path / "data", "--create", "--topic", "t", "--partitions", 1)
    out = run(*args, "--data", tmp_path / "data", check=2) if args[0] != "no-such-command" else run(*args, check=2)
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1 and "error" in out.stderr, out.stderr


def test_a_failure_that_is_not_bad_input_exits_1_with_one_line(tmp_path):
    out = run("console-consumer", "--data", tmp_path, "--topic", "missing", "--timeout-ms", 10, check=1)
    assert out.stderr.strip().splitlines() == [
        f"kafkalog console-consumer: UnknownTopicOrPartitionError: unknown topic 'missing' (file {tmp_path})"]


def test_console_producer_into_console_consumer_round_trips_100k_lines(tmp_path):
    data = tmp_path / "data"
    run("topics", "--data", data, "--create", "--topic", "lines", "--partitions", 3)
    rows = [(f"key-{i % 977}", f"value {i} ünï", [("trace", f"t{i}"), ("src", "cli")]) for i in range(100_000)]
    text = "".join(f"{','.join(f'{k}:{v}' for k, v in hs)}\t{key}\t{value}\n" for key, value, hs in rows)
    run("console-producer", "--data", data, "--topic", "lines", "--property", "parse.key=true",
        "--property", "parse.headers=true", input=text)
    out = run("console-consumer", "--data", data, "--topic", "lines", "--from-beginning", "--timeout-ms", 1000,
              "--json")
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.stderr.strip().endswith("Processed a total of 100000 messages")
    by_partition: dict[int, list] = {}
    for r in got:
        by_partition.setdefault(r["partition"], []).append(r)
    assert len(by_partition) == 3 and sum(len(v) for v in by_partition.values()) == 100_000
    for records in by_partition.values():  # each partition in offset order, from 0 with no gap
        assert [r["offset"] for r in records] == list(range(len(records)))
    produced = sorted((key, value, hs) for key, value, hs in rows)
    consumed = sorted((r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in got)
    assert consumed == produced
    murmur2 = engine.clients.accumulator.selected.murmur2  # keyed records sit where Kafka's partitioner puts them
    assert all(r["partition"] == (murmur2(r["key"].encode()) & 0x7FFFFFFF) % 3 for r in got)


def test_console_consumer_prints_kafkas_format(tmp_path):
    data = tmp_path / "data"
    run("topics", "--data", data, "--create", "--topic", "t", "--partitions", 1)
    run("console-producer", "--data", data, "--topic", "t", "--property", "parse.key=true",
        "--property", "key.separator=:", "--property", "null.marker=NULL", input="a:1\nNULL:2\nc:NULL\n")
    out = run("console-consumer", "--data", data, "--topic", "t", "--partition", 0, "--offset", 1,
              "--max-messages", 5, "--timeout-ms", 200, "--property", "print.key=true",
              "--property", "print.offset=true", "--property", "print.headers=true")
    assert out.stdout.splitlines() == ["Offset:1\tNO_HEADERS\tnull\t2", "Offset:2\tNO_HEADERS\tc\tnull"]
    with engine.open(str(data)) as eng:
        recs = [(r.offset, r.key, r.value) for r in eng.consumer("t", auto_offset_reset="earliest",
                                                                   consumer_timeout_ms=0)]
    assert recs == [(0, b"a", b"1"), (1, None, b"2"), (2, b"c", None)]
    limited = run("console-consumer", "--data", data, "--topic", "t", "--from-beginning", "--max-messages", 2)
    assert limited.stdout.splitlines() == ["1", "2"]


def test_get_offsets_and_delete_records_agree_with_the_engine(tmp_path):
    data = tmp_path / "data"
    with engine.open(str(data)) as eng:
        eng.create_topic("t", partitions=2)
        for p in (0, 1):
            eng.append("t", p, engine.encode_batch([(None, b"v", None, 1_000 * (i + 1)) for i in range(5 + p)]))
    latest = json.loads(run("get-offsets", "--data", data, "--topic", "t", "--json").stdout)
    assert latest == [{"topic": "t", "partition": 0, "offset": 5}, {"topic": "t", "partition": 1, "offset": 6}]
    assert run("get-offsets", "--data", data, "--topic", "t", "--time", 3_000, "--partitions", "1").stdout == "t:1:2\n"
    assert run("get-offsets", "--data", data, "--time", 99_000).stdout == "t:0:\nt:1:\n"  # no record that late
    (tmp_path / "d.json").write_text(json.dumps({"partitions": [{"topic": "t", "partition": 1, "offset": 4}],
                                                 "version": 1}))
    out = run("delete-records", "--data", data, "--offset-json-file", tmp_path / "d.json")
    assert out.stdout == "Records delete operation completed:\npartition: t-1\tlow_watermark: 4\n"
    assert run("get-offsets", "--data", data, "--topic", "t", "--time", -2).stdout == "t:0:0\nt:1:4\n"
    with engine.open(str(data)) as eng:
        assert [eng.partition("t", p).log_start_offset for p in (0, 1)] == [0, 4]


@pytest.mark.parametrize("case", vectors.CASES)
def test_verify_passes_kafka_written_directories_and_never_writes(case, tmp_path):
    shutil.copytree(vectors.case_dir(case), tmp_path / case)
    before = tree_hash(tmp_path)
    out = run("verify", tmp_path, "--json")
    assert json.loads(out.stdout)["problems"] == [] and json.loads(out.stdout)["ok"] is True
    run("verify", tmp_path / case)  # a single partition directory too
    assert tree_hash(tmp_path) == before


def test_verify_names_the_file_and_offset_of_a_flipped_bit(tmp_path):
    shutil.copytree(vectors.case_dir("multiseg-0"), tmp_path / "multiseg-0")
    first = vectors.segments(vectors.expected("multiseg-0"))["00000000000000000000.log"]["batches"][3][0]
    path = tmp_path / "multiseg-0" / "00000000000000000000.log"   # a closed segment: two follow it
    data = bytearray(path.read_bytes())
    data[first["position"] + first["sizeInBytes"] - 3] ^= 0x10    # inside a record, under the CRC
    path.write_bytes(bytes(data))
    before = tree_hash(tmp_path)
    out = run("verify", tmp_path, "--json", check=1)
    problems = json.loads(out.stdout)["problems"]
    assert problems and problems[0]["file"] == str(path) and problems[0]["offset"] == first["baseOffset"]
    assert problems[0]["position"] == first["position"] and "CRC" in problems[0]["message"]
    text = run("verify", tmp_path, check=1).stdout
    assert f"{path} position {first['position']} offset {first['baseOffset']}:" in text
    assert tree_hash(tmp_path) == before


def test_verify_of_a_directory_being_written_reports_nothing_that_is_not_there(tmp_path, monkeypatch):
    """An engine appends between verify's read of a log and its read of that segment's indexes (what a live directory
    does at random; certain here): their new entries point at batches that read did not see, and the last ones are
    not yet written (the engine writes 64 at a time). No problem is reported, and the entries are still checked
    against the log: one bit flipped in the log makes the run report it."""
    from engine.tools import verify

    def batch(i: int) -> bytes:
        return engine.encode_batch([(None, b"v%d" % i, None, 1_000 + i)])

    with engine.open(str(tmp_path / "data")) as eng:
        eng.create_topic("t", 1, config={"index.interval.bytes": "1"})  # an index entry for every batch
        for i in range(100):
            eng.append("t", 0, batch(i))
        real, written = verify._check_log, iter(range(100, 10_000))

        def then_append(c, path, base, next_base) -> None:
            real(c, path, base, next_base)
            for _ in range(100):  # (more than the 64 index entries the engine writes at a time)
                eng.append("t", 0, batch(next(written)))

        monkeypatch.setattr(verify, "_check_log", then_append)
        files, problems = verify.check(str(tmp_path / "data"))
        assert files > 0 and problems == []
        log = tmp_path / "data" / "t-0" / "00000000000000000000.log"
        data = bytearray(log.read_bytes())
        data[-2] ^= 0x10  # inside the last batch's record, under its CRC
        log.write_bytes(bytes(data))
        assert [p for p in verify.check(str(tmp_path / "data"))[1] if "CRC" in p["message"]]


def test_recover_reports_what_recovery_changed(tmp_path):
    data = tmp_path / "data"
    with engine.open(str(data)) as eng:
        eng.create_topic("t", partitions=1)
        for i in range(3):
            eng.append("t", 0, engine.encode_batch([(None, b"v%d" % i, None, 1_000)]))
    (data / ".kafka_cleanshutdown").unlink()                          # as after a crash
    log = data / "t-0" / "00000000000000000000.log"
    with open(log, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00")          # a torn batch header
    torn = run("verify", data, check=1).stdout
    assert "Found 10 invalid bytes at the end of 00000000000000000000.log" in torn
    report = json.loads(run("recover", data, "--json").stdout)
    assert report["cleanShutdown"] is False
    assert report["partitions"] == [{"topic": "t", "partition": 0, "segmentsRecovered": [0], "bytesTruncated": 10,
                                     "segmentsDropped": [], "filesRemoved": []}]
    assert run("verify", data).returncode == 0
    assert "nothing to recover" in run("recover", data).stdout
    with engine.open(str(data)) as eng:
        assert eng.partition("t", 0).log_end_offset == 3


def test_dump_log_reports_a_torn_tail_and_stops_quietly_on_a_closed_pipe(tmp_path):
    shutil.copytree(vectors.case_dir("basic-0"), tmp_path / "basic-0")
    log = tmp_path / "basic-0" / "00000000000000000000.log"
    with open(log, "ab") as f:
        f.write(b"\x00" * 7)
    out = run("dump-log", "--files", log, check=1)
    assert out.stdout.rstrip().endswith("Found 7 invalid bytes at the end of 00000000000000000000.log")
    piped = subprocess.run(f"'{KAFKALOG}' dump-log --deep-iteration --files '{log}' | head -n 2", shell=True,
                           capture_output=True, text=True, timeout=120)
    assert len(piped.stdout.splitlines()) == 2 and "Traceback" not in piped.stderr, piped.stderr


def test_demo_without_java_says_what_to_install(tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java-here")}
    out = subprocess.run([KAFKALOG, "demo", "--data", tmp_path / "data", "--records", "1000", "--produce", "3000"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "Spark step skipped: no Java runtime found for Spark: install a Java 17 or newer runtime (Debian: apt-get "
        "install openjdk-17-jre-headless) or set JAVA_HOME")
    assert "Traceback" not in out.stderr and "consumed 3,000 records" in out.stdout


def test_transactions_list_and_describe_agree_with_the_coordinator(tmp_path):
    """`transactions --list/--describe` show each id's state and the transactions open per partition, with
    their first offset; dump-log's --transaction-log-decoder prints each state change as Kafka's decoder."""
    with engine.open(tmp_path) as e:
        e.create_topic("t", 2)
        e.producer().send("t", b"plain", partition=1).get()
        hanging = e.producer(transactional_id="hanging")
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send("t", b"open", partition=1).get()
        done = e.producer(transactional_id="done")
        done.init_transactions()
        done.begin_transaction()
        done.send("t", b"x", partition=0)
        done.commit_transaction()
        want = {d.transactional_id: (d.producer_id, d.state) for d in e.transactions.coordinator.list()}
    listed = json.loads(run("transactions", "--data", tmp_path, "--list", "--json").stdout)
    assert {r["transactionalId"]: (r["producerId"], r["transactionState"]) for r in listed} == want
    assert want["hanging"][1] == "Ongoing" and want["done"][1] == "CompleteCommit"
    described = json.loads(run("transactions", "--data", tmp_path, "--describe", "--json").stdout)
    assert [(o["topic"], o["partition"], o["startOffset"], o["transactionalId"])
            for o in described["openTransactions"]] == [("t", 1, 1, "hanging")]
    text = run("transactions", "--data", tmp_path, "--describe", "--transactional-id", "done").stdout
    # a completed transaction lists no partitions (Kafka's TransactionMetadata.prepareComplete writes Set.empty)
    assert "CompleteCommit" in text and "t-0" not in text and "hanging" not in text
    missing = run("transactions", "--data", tmp_path, "--describe", "--transactional-id", "nope", check=1)
    assert "TransactionalIdNotFoundError" in missing.stderr
    from engine.txn import transaction_log
    log = tmp_path / f"__transaction_state-{transaction_log.partition('done')}" / "00000000000000000000.log"
    lines = [line for line in run("dump-log", "--files", log, "--transaction-log-decoder").stdout.splitlines()
             if "transactionalId=done" in line]
    states = [line.split("state=")[1].split(",")[0] for line in lines]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    # CompleteCommit lists none (TransactionMetadata.prepareComplete); PrepareCommit lists the transaction's
    assert "partitions=[]" in lines[-1] and "partitions=[t-0]" in lines[-2]
    assert f"producerId:{want['done'][0]}," in lines[-1]


def _string16(s: str) -> bytes:
    return len(s).to_bytes(2, "big") + s.encode()


def test_dump_log_names_the_path_it_was_given_and_keeps_a_records_partition_order(tmp_path, monkeypatch):
    """kafka-dump-log prints "Dumping PATH" with PATH as given (DumpLogSegments: s"Dumping $file"), and the
    transaction-log decoder lists a record's partitions in the record's order. The record is built here from
    Kafka's published TransactionLogValue v0 schema, with its partitions out of name order."""
    key = (0).to_bytes(2, "big") + _string16("order")
    value = (0).to_bytes(2, "big") + (7).to_bytes(8, "big") + (0).to_bytes(2, "big") + (60_000).to_bytes(4, "big")
    value += bytes([1]) + (2).to_bytes(4, "big")  # Ongoing, two topics
    for topic, ids in (("zeta", [2, 0]), ("alpha", [1])):
        value += _string16(topic) + len(ids).to_bytes(4, "big") + b"".join(i.to_bytes(4, "big") for i in ids)
    value += (1_000).to_bytes(8, "big") + (900).to_bytes(8, "big")
    folder = tmp_path / "__transaction_state-0"
    folder.mkdir()
    (folder / "00000000000000000000.log").write_bytes(engine.encode_batch([(key, value, None, 1_000)]))
    monkeypatch.chdir(tmp_path)
    given = os.path.join("__transaction_state-0", "00000000000000000000.log")
    out = run("dump-log", "--files", given, "--transaction-log-decoder").stdout.splitlines()
    assert out[0] == f"Dumping {given}"
    assert any("partitions=[zeta-2,zeta-0,alpha-1]" in line for line in out), out
