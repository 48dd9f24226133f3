"""`kafkalog console-producer` and `console-consumer`: kafka-console-producer.sh and
kafka-console-consumer.sh over a log directory, with Kafka's options and line formats.

Producer: each stdin line is one record, `[headers<headers.delimiter>][key<key.separator>]value` as the
`--property` settings say (parse.key, key.separator, parse.headers, headers.delimiter, headers.separator,
headers.key.separator, null.marker, ignore.error; Kafka's defaults: tab, tab, ",", ":").
Consumer: prints `[CreateTime:ts\t][Partition:p\t][Offset:o\t][headers\t][key\t]value` per record as
the print.* properties say (Kafka's DefaultMessageFormatter order), or JSON lines with `--json`, then
"Processed a total of N messages" on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys

import engine
from engine.common.errors import InvalidConfigurationError, InvalidRecordError, KafkaError
from engine.common.structs import TopicPartition
from engine.tools.admin import parse_configs
from engine.tools.dump_log import record_json
from engine.tools.output import Output

ACKS = {"-1": "all", "all": "all", "1": 1, "0": 0}
TS_NAMES = {0: "CreateTime", 1: "LogAppendTime"}


def _flag(props: dict, name: str) -> bool:
    value = props.get(name, "false").lower()
    if value not in ("true", "false"):
        raise InvalidConfigurationError(f"--property {name} takes true or false, got {value!r}")
    return value == "true"


def _unescape(value: str) -> str:
    """Separators as Kafka's tools take them: `\\t` and `\\n` written as escapes on the command line."""
    return value.encode("utf-8").decode("unicode_escape") if "\\" in value else value


# --- producer -------------------------------------------------------------------------------------
def add_producer(sub) -> None:
    p = sub.add_parser("console-producer", help="send stdin lines as records (kafka-console-producer.sh)")
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
                        "headers.key.separator, null.marker, ignore.error")
    p.add_argument("--compression-codec", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--request-required-acks", default="-1", choices=sorted(ACKS), help="acks (default -1: all)")
    p.add_argument("--sync", action="store_true", help="wait for each record's append before the next")
    p.set_defaults(func=produce)


class LineReader:
    """Kafka's LineMessageReader: one line to (key, value, headers)."""

    KNOWN = {"parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
             "headers.key.separator", "null.marker", "ignore.error"}

    def __init__(self, props: dict) -> None:
        unknown = sorted(set(props) - self.KNOWN)
        if unknown:
            raise InvalidConfigurationError(f"--property {unknown[0]} is not a console-producer property")
        self.parse_key, self.parse_headers = _flag(props, "parse.key"), _flag(props, "parse.headers")
        self.ignore_error = _flag(props, "ignore.error")
        self.key_sep = _unescape(props.get("key.separator", "\t"))
        self.headers_delim = _unescape(props.get("headers.delimiter", "\t"))
        self.headers_sep = _unescape(props.get("headers.separator", ","))
        self.header_key_sep = _unescape(props.get("headers.key.separator", ":"))
        self.null_marker = props.get("null.marker")
        for name, sep in (("key.separator", self.key_sep), ("headers.delimiter", self.headers_delim),
                          ("headers.separator", self.headers_sep), ("headers.key.separator", self.header_key_sep)):
            if not sep:
                raise InvalidConfigurationError(f"--property {name} must not be empty")

    def _bytes(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode("utf-8")

    def _split(self, line: str, sep: str, what: str, number: int) -> tuple[str | None, str]:
        head, found, rest = line.partition(sep)
        if found:
            return head, rest
        if self.ignore_error:
            return None, line
        raise InvalidRecordError(f"no {what} found on line number {number}: {line!r}")

    def parse(self, line: str, number: int):
        headers = None
        if self.parse_headers:
            text, line = self._split(line, self.headers_delim, "headers delimiter", number)
            if text:
                headers = []
                for pair in text.split(self.headers_sep):
                    name, found, value = pair.partition(self.header_key_sep)
                    headers.append((name, self._bytes(value) if found else None))
        key = None
        if self.parse_key:
            text, line = self._split(line, self.key_sep, "key separator", number)
            key = None if text is None else self._bytes(text)
        return key, self._bytes(line), headers


def produce(args: argparse.Namespace, out: Output) -> int:
    reader = LineReader(parse_configs(args.property, "--property"))
    sent = 0
    failed: list[tuple[int, KafkaError]] = []  # (line, error) of each record the log refused
    with engine.open(args.data) as eng:
        eng.partitions_for(args.topic)  # an unknown topic fails before stdin is read
        acks = ACKS[args.request_required_acks]
        with eng.producer(acks=acks, compression_type=args.compression_codec, linger_ms=0) as producer:
            for number, raw in enumerate(sys.stdin, 1):
                key, value, headers = reader.parse(raw.rstrip("\r\n"), number)
                future = producer.send(args.topic, value=value, key=key, headers=headers)
                future.add_errback(lambda exc, line=number: failed.append((line, exc)))
                if args.sync:
                    future.get()
                sent += 1
            producer.flush()
    if failed:
        line, exc = min(failed, key=lambda f: f[0])
        kind = type(exc) if isinstance(exc, KafkaError) else KafkaError
        raise kind(f"{len(failed)} of {sent} records were not appended; the first, line {line}: {exc}")
    out.result({"topic": args.topic, "records": sent}, None)
    return 0


# --- consumer -------------------------------------------------------------------------------------
def add_consumer(sub) -> None:
    p = sub.add_parser("console-consumer", help="print a topic's records (kafka-console-consumer.sh)")
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset (default: latest)")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="earliest, latest or an offset (needs --partition)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop after this long without a record")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="print.timestamp, print.partition, print.offset, print.headers, print.key, print.value, "
                        "key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--isolation-level", default="read_uncommitted", choices=("read_uncommitted", "read_committed"))
    p.add_argument("--group", help="read as a member of this consumer group (committing its positions)")
    p.set_defaults(func=consume)


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    KNOWN = {"print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value",
             "key.separator", "line.separator", "headers.separator", "null.literal"}

    def __init__(self, props: dict) -> None:
        unknown = sorted(set(props) - self.KNOWN)
        if unknown:
            raise InvalidConfigurationError(f"--property {unknown[0]} is not a console-consumer property")
        self.show = {name: _flag(props, f"print.{name}") for name in ("timestamp", "partition", "offset",
                                                                      "headers", "key")}
        self.show["value"] = props.get("print.value", "true").lower() != "false"
        self.key_sep = _unescape(props.get("key.separator", "\t"))
        self.line_sep = _unescape(props.get("line.separator", "\n"))
        self.headers_sep = _unescape(props.get("headers.separator", ","))
        self.null = props.get("null.literal", "null")

    def _text(self, raw: bytes | None) -> str:
        return self.null if raw is None else raw.decode("utf-8", "replace")

    def format(self, r) -> str:
        parts = []
        if self.show["timestamp"]:
            parts.append(f"{TS_NAMES.get(r.timestamp_type, 'NoTimestampType')}:{r.timestamp}")
        if self.show["partition"]:
            parts.append(f"Partition:{r.partition}")
        if self.show["offset"]:
            parts.append(f"Offset:{r.offset}")
        if self.show["headers"]:
            parts.append(self.headers_sep.join(f"{k}:{self._text(v)}" for k, v in r.headers) or "NO_HEADERS")
        if self.show["key"]:
            parts.append(self._text(r.key))
        if self.show["value"]:
            parts.append(self._text(r.value))
        return self.key_sep.join(parts)


def _record_json(r) -> dict:
    return {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
            "timestampType": TS_NAMES.get(r.timestamp_type), **record_json(r.key, r.value, r.headers)}


def consume(args: argparse.Namespace, out: Output) -> int:
    if args.offset is not None and args.partition is None:
        raise InvalidConfigurationError("--offset needs --partition")
    for name in ("max_messages", "timeout_ms"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise InvalidConfigurationError(f"--{name.replace('_', '-')} must be >= 0")
    fmt = Formatter(parse_configs(args.property, "--property"))
    printed = [0]
    status = 0
    try:
        _print_records(args, out, fmt, printed)
    except KeyboardInterrupt:  # Kafka's tool still says how many it printed
        status = 130
    out.stream.flush()
    sys.stderr.write(f"Processed a total of {printed[0]} messages\n")
    return status


def _print_records(args: argparse.Namespace, out: Output, fmt: Formatter, printed: list[int]) -> None:
    with engine.open(args.data) as eng:
        config = {"auto_offset_reset": "earliest" if args.from_beginning else "latest",
                  "isolation_level": args.isolation_level, "group_id": args.group}
        if args.timeout_ms is not None:
            config["consumer_timeout_ms"] = args.timeout_ms
        with eng.consumer(**config) as consumer:
            if args.partition is None:
                consumer.subscribe([args.topic])
            else:
                tp = TopicPartition(args.topic, args.partition)
                consumer.assign([tp])
                _seek(consumer, tp, args.offset or ("earliest" if args.from_beginning else "latest"))
            if args.max_messages != 0:
                for record in consumer:
                    out.stream.write(json_line(record) if out.as_json else fmt.format(record) + fmt.line_sep)
                    printed[0] += 1
                    if args.max_messages is not None and printed[0] >= args.max_messages:
                        break


def json_line(record) -> str:
    return json.dumps(_record_json(record), ensure_ascii=False, separators=(",", ":")) + "\n"


def _seek(consumer, tp: TopicPartition, offset: str) -> None:
    if offset == "latest":
        consumer.seek_to_end(tp)
    elif offset == "earliest":
        consumer.seek_to_beginning(tp)
    else:
        try:
            value = int(offset)
        except ValueError:
            raise InvalidConfigurationError(f"--offset takes earliest, latest or an offset, got {offset!r}") from None
        if value < 0:
            raise InvalidConfigurationError(f"--offset must be >= 0, got {value}")
        consumer.seek(tp, value)
