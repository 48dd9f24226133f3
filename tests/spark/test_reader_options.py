"""One table of reader-option cases, run through both Spark sources: engine/spark/source.py's Settings and the JVM's
Options (kafkalog.spark.OptionsCheck, one `java` process for the table). Both read the options' definition from
engine/spark/options.json; each case states what Spark's Kafka source semantics ask for (the fields it names, or the
option an error must name), and both sources must make exactly the same of it.
"""
from __future__ import annotations

import json
import re

import pytest

from engine.common.errors import InvalidConfigurationError
from tests.spark.jvm_checks import run_check

pytestmark = pytest.mark.spark

BASE = {"path": "/logs", "subscribe": "t"}
DEFAULTS = {"mode": "subscribe", "topics": ["t"], "minPartitions": 1, "maxBytesPerPartition": 128 << 20,
            "maxDecompressedBytes": 128 << 20, "failOnDataLoss": True, "includeHeaders": False,
            "readCommitted": False, "strategyLatest": False, "start": {"kind": "earliest"}, "end": {"kind": "latest"}}
OFFSETS = {"path": "/logs", "assign": '{"t": [0]}'}


def _case(options: dict, expected: dict, streaming: bool = False, base: dict | None = BASE):
    return {"options": {**(base or {}), **options}, "streaming": streaming, "expected": expected}


def _error(option: str) -> dict:
    return {"error": option}


CASES = [
    _case({}, DEFAULTS),
    _case({}, {"start": {"kind": "latest"}, "maxTriggerDelayMs": 15 * 60_000, "maxOffsets": None}, streaming=True),
    _case({"MINPARTITIONS": "3", "IncludeHeaders": "TRUE"}, {"minPartitions": 3, "includeHeaders": True}),
    # integers: ASCII digits, an optional sign, surrounding blanks; within the bounds options.json gives
    _case({"minPartitions": " 7 "}, {"minPartitions": 7}),
    _case({"minPartitions": "+7"}, {"minPartitions": 7}),
    _case({"minPartitions": "2147483647"}, {"minPartitions": 2**31 - 1}),
    _case({"minPartitions": "2147483648"}, _error("minPartitions")),
    _case({"minPartitions": "0"}, _error("minPartitions")),
    _case({"minPartitions": "7.0"}, _error("minPartitions")),
    _case({"minPartitions": "1_000"}, _error("minPartitions")),
    _case({"minPartitions": "\u0663"}, _error("minPartitions")),  # an Arabic-Indic three
    _case({"minPartitions": ""}, _error("minPartitions")),
    _case({"maxDecompressedBytes": "2147483631"}, {"maxDecompressedBytes": 2**31 - 17}),
    _case({"maxDecompressedBytes": "2147483632"}, _error("maxDecompressedBytes")),
    _case({"maxBytesPerPartition": "9223372036854775807"}, {"maxBytesPerPartition": 2**63 - 1}),
    _case({"maxBytesPerPartition": "9223372036854775808"}, _error("maxBytesPerPartition")),
    _case({"maxBytesPerPartition": "-99999999999999999999"}, _error("maxBytesPerPartition")),
    _case({"startingTimestamp": "5"}, {"start": {"kind": "timestamp", "timestamp": 5}}),
    _case({"startingTimestamp": "-1"}, _error("startingTimestamp")),
    # assign: a JSON object of arrays of JSON integers
    _case({"assign": '{"t": [0, 1], "u": [2]}'}, {"mode": "assign", "assigned": ["t-0", "t-1", "u-2"]}, base=OFFSETS),
    _case({"assign": '{"t": [1.5]}'}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"t": ["0"]}'}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"t": [true]}'}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"t": 0}'}, _error("assign"), base=OFFSETS),
    _case({"assign": "[1]"}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"t": [-1]}'}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"t": [2147483648]}'}, _error("assign"), base=OFFSETS),
    _case({"assign": '{"bad name!": [0]}'}, _error("assign"), base=OFFSETS),
    # offsets: {"topic": {"partition": JSON integer}}
    _case({"startingOffsets": '{"t": {"0": 5}}'}, {"start": {"kind": "offsets", "byPartition": {"t-0": 5}}},
          base=OFFSETS),
    _case({"startingOffsets": '{"t": {"0": -2}}'}, {"start": {"kind": "offsets", "byPartition": {"t-0": -2}}},
          base=OFFSETS),
    _case({"startingOffsets": '{"t": {"0": 5.5}}'}, _error("startingOffsets"), base=OFFSETS),
    _case({"startingOffsets": '{"t": {"0": "5"}}'}, _error("startingOffsets"), base=OFFSETS),
    _case({"startingOffsets": '{"t": {"+0": 5}}'}, _error("startingOffsets"), base=OFFSETS),
    _case({"startingOffsets": '{"t": {" 0": 5}}'}, _error("startingOffsets"), base=OFFSETS),
    _case({"startingOffsets": '{"t": {"-1": 5}}'}, _error("startingOffsets"), base=OFFSETS),
    _case({"endingOffsets": '{"t": {"0": -2}}'}, _error("endingOffsets"), base=OFFSETS),
    _case({"endingOffsets": "earliest"}, _error("endingOffsets")),
    _case({"startingOffsets": "latest"}, _error("startingOffsets")),
    _case({"startingOffsets": "latest"}, {"start": {"kind": "latest"}}, streaming=True),
    _case({"startingOffsetsByTimestamp": '{"t": {"0": 100}}'},
          {"start": {"kind": "timestamps", "byPartition": {"t-0": 100}}}, base=OFFSETS),
    _case({"startingOffsetsByTimestampStrategy": "LATEST"}, {"strategyLatest": True}),
    _case({"startingOffsetsByTimestampStrategy": "nearest"}, _error("startingOffsetsByTimestampStrategy")),
    # booleans, isolation
    _case({"failOnDataLoss": "False"}, {"failOnDataLoss": False}),
    _case({"failOnDataLoss": "yes"}, _error("failOnDataLoss")),
    _case({"kafka.isolation.level": "read_committed"}, {"readCommitted": True}),
    _case({"isolation.level": "read_committed", "kafka.isolation.level": "read_uncommitted"},
          _error("kafka.isolation.level")),
    _case({"kafka.isolation.level": "READ_COMMITTED"}, _error("kafka.isolation.level")),
    # which options a query takes
    _case({"foo": "1"}, _error("foo")),
    _case({"maxOffsetsPerTrigger": "10"}, _error("maxOffsetsPerTrigger")),
    _case({"endingOffsets": "latest"}, _error("endingOffsets"), streaming=True),
    _case({"maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "2"}, {"maxOffsets": 10, "minOffsets": 2},
          streaming=True),
    _case({"maxOffsetsPerTrigger": "0"}, _error("maxOffsetsPerTrigger"), streaming=True),
    _case({"maxTriggerDelay": "30s"}, {"maxTriggerDelayMs": 30_000}, streaming=True),
    _case({"maxTriggerDelay": " 5 min "}, {"maxTriggerDelayMs": 300_000}, streaming=True),
    _case({"maxTriggerDelay": "250"}, {"maxTriggerDelayMs": 250}, streaming=True),
    _case({"maxTriggerDelay": "1x"}, _error("maxTriggerDelay"), streaming=True),
    _case({"maxTriggerDelay": "99999999999999999999d"}, _error("maxTriggerDelay"), streaming=True),
    # what to read
    _case({}, _error("path"), base={"subscribe": "t"}),
    _case({"assign": '{"t": [0]}'}, _error("subscribe")),
    _case({"subscribe": " , "}, _error("subscribe")),
    _case({"subscribe": "a, b"}, {"topics": ["a", "b"]}),
    _case({"subscribePattern": "t.*"}, {"mode": "subscribePattern", "topics": None},
          base={"path": "/logs"}),
    _case({"subscribePattern": "("}, _error("subscribePattern"), base={"path": "/logs"}),
    _case({"subscribePattern": "(?i)T[0-9]+|(?:a|b)(?=x)\\.y{1,2}$"}, {"mode": "subscribePattern"},
          base={"path": "/logs"}),
    # a construct only one dialect has, or that means something else in the other
    *(_case({"subscribePattern": p}, _error("subscribePattern"), base={"path": "/logs"})
      for p in ("(?P<n>t)", "(?<n>t)", "(?>t)", "t*+", "t{2}+", "(?u)t", "(?#c)t", "[a-z&&[^b]]", "\\p{Alpha}+",
                "t\\z", "t\\Z", "\\Qt\\E", "\\x{74}", "\\e", "\\U00000074")),
]


def _python(options: dict, streaming: bool) -> dict:
    """What engine.spark.source.Settings makes of `options`, in OptionsCheck's terms."""
    from engine.spark.source import Settings

    try:
        s = Settings(options, streaming=streaming)
    except InvalidConfigurationError as exc:
        return {"error": type(exc).__name__, "message": f"{type(exc).__name__}: {exc.message}"}

    def side(kind, value) -> dict:
        out = {"kind": kind}
        if kind == "timestamp":
            out["timestamp"] = value
        elif value is not None:
            out["byPartition"] = {f"{t}-{p}": v for (t, p), v in sorted(value.items())}
        return out

    return {"mode": s.mode, "topics": sorted(s.topics) if s.mode == "subscribe" else None,
            "assigned": sorted(f"{t}-{p}" for t, p in s.assigned) if s.mode == "assign" else None,
            "readCommitted": s.isolation == "read_committed", "failOnDataLoss": s.fail_on_data_loss,
            "includeHeaders": s.include_headers, "minPartitions": s.min_partitions,
            "maxBytesPerPartition": s.max_bytes, "maxDecompressedBytes": s.max_decompressed,
            "strategyLatest": s.strategy == "latest", "maxOffsets": s.max_offsets, "minOffsets": s.min_offsets,
            "maxTriggerDelayMs": s.max_trigger_delay_ms, "start": side(*s.start), "end": side(*s.end)}


def _jvm(cases: list[dict], tmp_path) -> list[dict]:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps({"options": c["options"], "streaming": c["streaming"]}) + "\n"
                            for c in cases), encoding="utf-8")
    return [json.loads(line) for line in run_check("OptionsCheck", path, timeout=300)]


def _named_option(verdict: dict) -> str:
    """The option an InvalidConfigurationError names ("kafkalog option 'X': why")."""
    return re.match(r"InvalidConfigurationError: kafkalog option '([^']*)'", verdict["message"]).group(1)


def test_one_table_of_option_cases_means_the_same_to_both_sources(tmp_path):
    got = _jvm(CASES, tmp_path)
    assert len(got) == len(CASES)
    for case, on_jvm in zip(CASES, got):
        in_python = _python(case["options"], case["streaming"])
        label = json.dumps({k: case[k] for k in ("options", "streaming")})
        if "error" in case["expected"]:
            for verdict in (in_python, on_jvm):
                assert verdict.get("error") == "InvalidConfigurationError", (label, verdict)
                assert _named_option(verdict) == case["expected"]["error"], (label, verdict)
            continue
        assert on_jvm == in_python, label
        assert {k: in_python[k] for k in case["expected"]} == case["expected"], label
