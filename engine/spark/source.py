"""The `kafkalog` Spark data source: a log directory (kafkalog's or a Kafka broker's) read as a DataFrame
with the schema and options of Spark's own Kafka source, and no broker.

Planning (driver): the partition directories are matched against `subscribe` / `subscribePattern` /
`assign`; each partition's offset range comes from `startingOffsets`/`endingOffsets` or the timestamp
options (resolved through the `.timeindex`/`.index` files, with Spark's precedence), is checked against
the log start offset (`failOnDataLoss`) and narrowed by pushed-down filters; ranges larger than
`maxBytesPerPartition` are split at segment boundaries, then further by offsets up to `minPartitions`.
`maxDecompressedBytes` (128 MiB) bounds what one compressed batch may inflate to (RecordTooLargeError past it).
Reading (executors): whole batches come from mmapped segments (segments.partition_reader) and the native
columnar decoder turns them into Arrow record batches; control records never appear and offset gaps
(compaction, markers) are not data loss. What a reader may see (the high watermark bounds "latest"; ListOffsets
by timestamp) comes from replication.partition.PartitionView, the rules the engine's consumers follow.
`kafka.isolation.level` (or `isolation.level`) `read_committed` bounds "latest" by the last stable offset and
skips aborted transactions: the driver scans each partition's batch headers up to the high watermark once
(engine.log.read_committed.scan: open transactions give the LSO, markers the aborted ranges) and hands every task the
aborted ranges it overlaps; a task decodes only the runs of batches a read_committed consumer would return.
Errors: an unknown option, a conflicting pair, or a bad value raises InvalidConfigurationError naming the
option. The options' names, defaults, bounds and syntax are options.json's, which the JVM source reads too.
Thread-safety: a reader holds no shared state; executors open their segments read-only.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import sys
from contextlib import contextmanager
from importlib import resources

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from engine.common.errors import InvalidConfigurationError, InvalidTopicError, OffsetOutOfRangeError
from engine.metadata import INTERNAL_TOPICS
from engine.record import codec
from engine.replication.partition import READ_COMMITTED, READ_UNCOMMITTED, PartitionView
from engine.segments import names
from engine.segments.fs import FileSystem
from engine.segments.partition_reader import Chunk, PartitionReader, read_checkpoints
from engine.segments.txn_index import AbortedTxn
from engine.log import read_committed

EARLIEST, LATEST = -2, -1
CHUNK_BYTES = 8 << 20
SPEC = json.loads(resources.files("engine.spark").joinpath("options.json").read_text("utf-8"))
OPTIONS = {n.lower() for n in SPEC["names"]}
STREAMING_ONLY = {n.lower(): n for n in SPEC["streamingOnly"]}
BATCH_ONLY = {n.lower(): n for n in SPEC["batchOnly"]}
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_PATTERN_REFUSED = [(re.compile(k), why) for k, why in SPEC["patternRefused"].items() if k != "about"]
_DURATION = re.compile(r"\s*([0-9]+)\s*(" + "|".join(sorted(SPEC["durationUnits"], key=len, reverse=True)) + r")\s*",
                       re.ASCII)

HEADERS = StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                        StructField("value", BinaryType())])))


def spark_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source (every field nullable)."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    return StructType(fields + ([HEADERS] if include_headers else []))


def _bad(option: str, why: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"kafkalog option {option!r}: {why}")


def bool_option(options: dict, name: str) -> bool:
    value = str(options.get(name.lower(), SPEC["booleans"][name])).lower()
    if value not in ("true", "false"):
        raise _bad(name, f"must be true or false, got {value!r}")
    return value == "true"


def _int(options: dict, name: str) -> int | None:
    """The integer option `name` within its bounds (options.json), its default when absent."""
    spec = SPEC["integers"][name]
    raw = options.get(name.lower())
    if raw is None:
        return spec["default"]
    if not isinstance(raw, str) or _INTEGER.fullmatch(raw) is None:
        raise _bad(name, f"must be an integer, got {raw!r}")
    value = int(raw)
    if value < spec["min"]:
        raise _bad(name, f"must be >= {spec['min']}, got {value}")
    if value > spec["max"]:
        raise _bad(name, f"must be <= {spec['max']}, got {value}")
    return value


def _json_int(value) -> int:
    """A JSON integer (not a float, string or boolean), as both sources read one."""
    if type(value) is not int:
        raise ValueError(value)
    return value


def _partition_key(key: str) -> int:
    if re.fullmatch(r"-?[0-9]+", key, re.ASCII) is None:
        raise ValueError(key)
    return int(key)


def _json_map(options: dict, name: str) -> dict[tuple[str, int], int] | None:
    """{"topic": {"0": n, ...}} as {(topic, partition): n}."""
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        found = {(topic, _partition_key(p)): _json_int(v) for topic, parts in doc.items() for p, v in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise _bad(name, f'must be JSON like {{"topic": {{"0": 23}}}}, got {raw!r}') from None
    _check_names(name, found)
    return found


def _check_names(option: str, partitions) -> None:
    """A typed error naming `option` for a topic name Kafka refuses or a partition outside int32."""
    for topic, partition in partitions:
        try:
            names.validate_topic(topic)
        except InvalidTopicError as exc:
            raise _bad(option, exc.message) from None
        if not 0 <= partition <= names.MAX_PARTITION:
            raise _bad(option, f"partition {partition} of {topic!r} is not in [0, 2**31)")


class Settings:
    """The validated options of one read (a batch query's, or with `streaming` a streaming query's)."""

    def __init__(self, raw, streaming: bool = False) -> None:
        options = {str(k).lower(): v for k, v in dict(raw).items()}
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise _bad(unknown[0], "unknown option (kafkalog reads the log directory given by 'path'; "
                                   "it takes Spark's Kafka source options for what to read)")
        misplaced = BATCH_ONLY if streaming else STREAMING_ONLY
        for name in sorted(set(options) & set(misplaced)):
            raise _bad(misplaced[name], f"is not valid in {'streaming' if streaming else 'batch'} queries")
        self.streaming = streaming
        self.path = options.get("path")
        if not self.path:
            raise _bad("path", "the log directory is required: .option('path', dir) or .load(dir)")
        chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in options]
        if len(chosen) != 1:
            raise _bad("subscribe", f"exactly one of subscribe, subscribePattern, assign is required, got {chosen}")
        self.mode, self.selector = chosen[0], options[chosen[0].lower()]
        if self.mode == "subscribePattern":
            for construct, why in _PATTERN_REFUSED:
                if construct.search(self.selector):
                    raise _bad("subscribePattern",
                               f"{why}: {self.selector!r} (use what both Java and Python read alike)")
            try:
                self.pattern = re.compile(self.selector)
            except re.error as exc:
                raise _bad("subscribePattern", f"not a regular expression: {exc}") from None
        elif self.mode == "assign":
            try:
                doc = json.loads(self.selector)
                if any(not isinstance(parts, list) for parts in doc.values()):
                    raise TypeError(doc)
                self.assigned = {(t, _json_int(p)) for t, parts in doc.items() for p in parts}
            except (ValueError, AttributeError, TypeError):
                raise _bad("assign", f'must be JSON like {{"topic": [0, 1]}}, got {self.selector!r}') from None
            _check_names("assign", self.assigned)
        else:
            self.topics = {t.strip() for t in self.selector.split(",") if t.strip()}
            if not self.topics:
                raise _bad("subscribe", "names no topic")
            _check_names("subscribe", ((t, 0) for t in self.topics))
        levels = {name: options[name.lower()] for name in ("kafka.isolation.level", "isolation.level")
                  if name.lower() in options}
        if len(set(levels.values())) > 1:
            raise _bad("kafka.isolation.level", f"and isolation.level disagree: {levels}")
        level = next(iter(levels.values()), READ_UNCOMMITTED)
        if level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise _bad(next(iter(levels), "kafka.isolation.level"),
                       f"must be read_uncommitted or read_committed, got {level!r}")
        self.isolation = level
        self.fail_on_data_loss = bool_option(options, "failOnDataLoss")
        self.include_headers = bool_option(options, "includeHeaders")
        self.min_partitions = _int(options, "minPartitions")
        self.max_bytes = _int(options, "maxBytesPerPartition")
        self.max_decompressed = _int(options, "maxDecompressedBytes")
        self.strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
        if self.strategy not in ("error", "latest"):
            raise _bad("startingOffsetsByTimestampStrategy", f"must be 'error' or 'latest', got {self.strategy!r}")
        self.start = self._side(options, "starting")
        self.end = self._side(options, "ending")
        if not streaming and (self.start[0] == "latest" or (self.start[0] == "offsets" and LATEST in
                                                             self.start[1].values())):
            raise _bad("startingOffsets", "cannot be latest (or -1) in a batch query: there would be nothing to read")
        self.max_offsets = _int(options, "maxOffsetsPerTrigger")
        self.min_offsets = _int(options, "minOffsetsPerTrigger")
        self.max_trigger_delay_ms = _duration_ms(options.get("maxtriggerdelay", SPEC["durations"]["maxTriggerDelay"]))

    def _side(self, options: dict, side: str):
        """('timestamp', ts) | ('timestamps', {tp: ts}) | ('offsets', {tp: off}) | ('earliest'|'latest', None)."""
        if f"{side}timestamp" in options:
            return "timestamp", _int(options, f"{side}Timestamp")
        by_ts = _json_map(options, f"{side}OffsetsByTimestamp")
        if by_ts is not None:
            return "timestamps", by_ts
        name = f"{side}Offsets"
        raw = options.get(name.lower(), "earliest" if side == "starting" and not self.streaming else "latest")
        if raw in ("earliest", "latest"):
            if side == "ending" and raw == "earliest":
                raise _bad(name, "'earliest' is not allowed for endingOffsets")
            return raw, None
        offsets = _json_map(options, name)
        if side == "ending" and EARLIEST in offsets.values():
            raise _bad(name, "-2 (earliest) is not allowed for endingOffsets")
        return "offsets", offsets

    def check_specified(self, found) -> None:
        """Offsets given per partition must name exactly the partitions read, as Spark requires."""
        for side, option in ((self.start, "startingOffsets"), (self.end, "endingOffsets")):
            if side[0] in ("offsets", "timestamps"):
                extra = sorted(set(side[1]) - set(found))
                if extra:
                    raise _bad(option if side[0] == "offsets" else option.replace("Offsets", "OffsetsByTimestamp"),
                               f"names {extra[0][0]}-{extra[0][1]}, which is not a partition being read; specify "
                               f"every partition read, and only those")

    def wants(self, topic: str, partition: int) -> bool:
        if self.mode == "subscribe":
            return topic in self.topics
        if self.mode == "subscribePattern":  # internal topics never match a pattern (exclude.internal.topics)
            return topic not in INTERNAL_TOPICS and self.pattern.fullmatch(topic) is not None
        return (topic, partition) in self.assigned


class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition directory."""

    def __init__(self, topic: str, partition: int, directory: str, start: int, end: int,
                 aborted: tuple[AbortedTxn, ...] = ()) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.directory, self.start, self.end = topic, partition, directory, start, end
        self.aborted = aborted  # read_committed: the aborted transactions overlapping [start, end)


def check_worker(expected_impl: str) -> None:
    """Fail at once, in one line, when this Spark worker's kafkalog is not the build the driver used (another
    interpreter: the native core or its dependencies did not load there)."""
    if codec.IMPL != expected_impl:
        raise RuntimeError(
            f"kafkalog on this Spark worker ({sys.executable}) runs the {codec.IMPL} core, not the driver's "
            f"{expected_impl} core ({codec.LOAD_ERROR}); call engine.spark.use_this_python() before building the "
            f"SparkSession, or set PYSPARK_PYTHON to the Python that has kafkalog installed")


class KafkalogReader(DataSourceReader):
    def __init__(self, settings: Settings, schema: StructType) -> None:
        self.settings, self.schema = settings, schema
        self.driver_impl = codec.IMPL
        self.partition_filter: set[int] | None = None
        self.topic_filter: set[str] | None = None
        self.offset_bounds = [0, 2**63 - 1]      # [lo, hi)
        self.time_bounds: list = []              # (op, epoch ms) applied exactly to each batch

    def _accept(self, f) -> bool:
        """Take a pushed-down filter if it can be applied exactly (pruning what the indexes allow)."""
        if len(f.attribute) != 1:
            return False
        column = f.attribute[0]
        if isinstance(f, (EqualTo, In)) and column in ("partition", "topic"):
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            attr = "partition_filter" if column == "partition" else "topic_filter"
            current = getattr(self, attr)
            setattr(self, attr, values if current is None else current & values)
            return True
        comparisons = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
        if column == "offset" and isinstance(f, comparisons) and type(f.value) is int:
            lo, hi = {EqualTo: (f.value, f.value + 1), GreaterThan: (f.value + 1, None),
                      GreaterThanOrEqual: (f.value, None), LessThan: (None, f.value),
                      LessThanOrEqual: (None, f.value + 1)}[type(f)]
            if lo is not None:
                self.offset_bounds[0] = max(self.offset_bounds[0], lo)
            if hi is not None:
                self.offset_bounds[1] = min(self.offset_bounds[1], hi)
            return True
        if column == "timestamp" and isinstance(f, comparisons) and isinstance(f.value, datetime.datetime):
            self.time_bounds.append((type(f).__name__, _epoch_micros(f.value)))
            return True
        return False

    # --- planning -------------------------------------------------------------------------------
    def partition_dirs(self) -> dict[tuple[str, int], str]:
        """The directory of each partition the options select, by (topic, partition)."""
        s = self.settings
        if not os.path.isdir(s.path):
            raise _bad("path", f"{s.path!r} is not a directory")
        out = {}
        for entry in sorted(os.listdir(s.path)):
            tp = names.parse_partition_dir(entry)
            directory = os.path.join(s.path, entry)
            if tp is not None and os.path.isdir(directory) and s.wants(*tp):
                out[tp] = directory
        return out

    @contextmanager
    def opened(self, tp: tuple[str, int], directory: str, checkpoints: tuple[dict, dict]):
        """(reader, read_committed log or None, the view a consumer at the isolation level has) of a partition."""
        starts, hws = checkpoints
        reader = PartitionReader(directory, log_start_offset=starts.get(tp), high_watermark=hws.get(tp))
        try:
            committed = (read_committed.CommittedLog(reader, CHUNK_BYTES)
                         if self.settings.isolation == READ_COMMITTED else None)
            yield reader, committed, PartitionView(tp[0], tp[1], committed or reader)
        finally:
            reader.close()

    def ranges(self, reader: PartitionReader, committed, tp, directory: str, start: int, end: int) -> list:
        """[start, end) of one partition as the OffsetRanges of its tasks (split by size, with the aborted
        transactions each overlaps)."""
        return [OffsetRange(r.topic, r.partition, r.directory, r.start, r.end,
                            overlapping(committed.aborted, r.start, r.end) if committed else ())
                for r in self._split(reader, tp, directory, start, end)]

    def partitions(self):
        s = self.settings
        dirs = self.partition_dirs()
        s.check_specified(dirs)
        checkpoints = read_checkpoints(FileSystem(), s.path)
        ranges, seen = [], set(dirs)
        for tp, directory in dirs.items():
            if self.topic_filter is not None and tp[0] not in self.topic_filter:
                continue
            if self.partition_filter is not None and tp[1] not in self.partition_filter:
                continue
            with self.opened(tp, directory, checkpoints) as (reader, committed, view):
                start, end = self._range(view, tp)
                if start < end:
                    ranges += self.ranges(reader, committed, tp, directory, start, end)
        missing = s.assigned - seen if s.mode == "assign" else set()
        if missing:
            raise _bad("assign", f"no partition directory for {sorted(missing)[0]} in {s.path!r}")
        # an empty plan still needs one (empty) partition: Spark reads "no partitions" as one unnamed one
        return _split_to(ranges, s.min_partitions) or [OffsetRange("", -1, "", 0, 0)]

    def _resolve(self, view: PartitionView, tp, side) -> int | None:
        kind, value = side
        if kind in ("timestamp", "timestamps"):
            ts = value if kind == "timestamp" else value.get(tp)
            if ts is None:
                raise _bad("startingOffsetsByTimestamp/endingOffsetsByTimestamp",
                           f"has no timestamp for {tp[0]}-{tp[1]}")
            found = view.offset_for_timestamp(ts, self.settings.isolation)
            return None if found is None else found[1]
        if kind in ("earliest", "latest"):
            off = EARLIEST if kind == "earliest" else LATEST
        elif tp not in value:
            raise _bad("startingOffsets/endingOffsets", f"has no offset for {tp[0]}-{tp[1]}")
        else:
            off = value[tp]
        return view.offset_for_timestamp(off, self.settings.isolation)[1] if off in (EARLIEST, LATEST) else off

    def _range(self, view: PartitionView, tp) -> tuple[int, int]:
        s = self.settings
        where = view.log.dir
        first, bound = view.log_start_offset, view.fetch_upper_bound(s.isolation)
        start = self._resolve(view, tp, s.start)
        if start is None:  # no record that late
            if s.strategy == "error":
                raise OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: no offset has a timestamp at or after the "
                                            f"starting timestamp (startingOffsetsByTimestampStrategy=error)",
                                            file=where)
            start = bound
        end = self._resolve(view, tp, s.end)
        end = bound if end is None else end
        for name, off in (("start", start), ("end", end)):
            if (off < first or off > bound) and s.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{tp[0]}-{tp[1]}: the {name} offset {off} is outside the log's [{first}, {bound}] (records "
                    f"were deleted or never written; failOnDataLoss=false reads what is there)", file=where, offset=off)
        start = min(max(start, first), bound)
        end = min(max(end, first), bound)
        if start > end:
            raise _bad("endingOffsets", f"{tp[0]}-{tp[1]}: ending offset {end} is before starting offset {start}")
        start, end = max(start, self.offset_bounds[0]), min(end, self.offset_bounds[1])
        for op, micros in self.time_bounds:
            if op in ("GreaterThan", "GreaterThanOrEqual", "EqualTo"):
                found = view.offset_for_timestamp(micros // 1000, s.isolation)  # every earlier record is older
                start = max(start, end if found is None else found[1])
        return start, end

    def _split(self, reader: PartitionReader, tp, directory: str, start: int, end: int) -> list[OffsetRange]:
        """One range, or several cut at segment boundaries so none holds much more than maxBytesPerPartition."""
        out, lo, size = [], start, 0
        for seg_lo, seg_hi, nbytes in reader.bytes_between(start, end):
            if size and size + nbytes > self.settings.max_bytes:
                out.append(OffsetRange(tp[0], tp[1], directory, lo, seg_lo))
                lo, size = seg_lo, 0
            size += nbytes
        out.append(OffsetRange(tp[0], tp[1], directory, lo, end))
        return out

    # --- reading (executors) --------------------------------------------------------------------
    def read(self, partition: OffsetRange):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.pandas.types import to_arrow_schema

        check_worker(self.driver_impl)
        if partition.start >= partition.end:
            return
        target = to_arrow_schema(self.schema, timezone="UTC")
        reader = PartitionReader(partition.directory)
        runs = reader.chunks(partition.start, partition.end, CHUNK_BYTES)
        if self.settings.isolation == READ_COMMITTED:
            runs = _visible_runs(runs, read_committed.AbortedFilter(partition.aborted))
        try:
            for chunk in runs:
                cols = codec.decode_columnar(chunk.data, start_offset=partition.start, end_offset=partition.end,
                                             include_headers=self.settings.include_headers,
                                             max_decompressed_bytes=self.settings.max_decompressed,
                                             position=chunk.position, source=chunk.file)
                n = len(cols)
                if not n:
                    continue
                raw = cols.to_arrow()
                arrays = [raw.column("key"), raw.column("value"),
                          pa.repeat(pa.scalar(partition.topic, pa.string()), n),
                          pa.repeat(pa.scalar(partition.partition, pa.int32()), n),
                          raw.column("offset"), raw.column("timestamp").cast(target.field("timestamp").type),
                          raw.column("timestampType")]
                if self.settings.include_headers:
                    arrays.append(raw.column("headers").cast(target.field("headers").type))
                batch = pa.RecordBatch.from_arrays(arrays, schema=target)
                for op, micros in self.time_bounds:
                    batch = batch.filter(getattr(pc, _TIME_OPS[op])(pc.cast(batch.column("timestamp"), pa.int64()),
                                                                     micros))
                if batch.num_rows:
                    yield batch
        finally:
            reader.close()


class KafkalogPushdownReader(KafkalogReader):
    def pushFilters(self, filters):
        """Keep partition/topic =/IN, offset and timestamp comparisons; hand the rest back to Spark."""
        for f in filters:
            if not self._accept(f):
                yield f


def _duration_ms(raw) -> int:
    """Spark's duration strings ("15m", "30s", "500ms", "1h", or bare milliseconds) in milliseconds."""
    match = _DURATION.fullmatch(str(raw))
    value = None if match is None else int(match.group(1)) * SPEC["durationUnits"][match.group(2)]
    if value is None or value > 2**63 - 1:
        raise _bad("maxTriggerDelay", f"must be a duration like 15m, 30s or 500ms, got {raw!r}")
    return value


def overlapping(aborted, start: int, end: int) -> tuple[AbortedTxn, ...]:
    """The aborted transactions a task reading [start, end) must know: exactly those whose data or marker falls
    in it (one that ended before it would hide its producer's later batches: its marker is never read)."""
    return tuple(t for t in aborted if t.last_offset >= start and t.first_offset < end)


def _visible_runs(chunks, visible: read_committed.AbortedFilter):
    """The chunks cut into runs of consecutive batches a read_committed reader returns (aborted transactions'
    batches left out; control batches the decoder skips anyway)."""
    for chunk in chunks:
        run_start = None
        pos = 0
        for batch in codec.iter_batches(chunk.data, position=chunk.position, source=chunk.file):
            end = pos + batch.size_in_bytes
            if visible.visible(batch) or batch.is_control:  # (a marker must reach the filter: it ends an abort)
                run_start = pos if run_start is None else run_start
            elif run_start is not None:
                yield Chunk(chunk.position + run_start, chunk.data[run_start:pos], chunk.file)
                run_start = None
            pos = end
        if run_start is not None:
            yield Chunk(chunk.position + run_start, chunk.data[run_start:pos], chunk.file)


_TIME_OPS = {"EqualTo": "equal", "GreaterThan": "greater", "GreaterThanOrEqual": "greater_equal",
             "LessThan": "less", "LessThanOrEqual": "less_equal"}  # pyarrow.compute functions


def _epoch_micros(value: datetime.datetime) -> int:
    """Microseconds since the epoch (a naive datetime is local time, as PySpark hands timestamps over)."""
    if value.tzinfo is None:
        value = value.astimezone()
    delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _split_to(ranges: list[OffsetRange], minimum: int) -> list[OffsetRange]:
    """Split the largest ranges by offsets until there are at least `minimum` (Spark's minPartitions)."""
    ranges = list(ranges)
    while 0 < len(ranges) < minimum:
        widest = max(ranges, key=lambda r: r.end - r.start)
        if widest.end - widest.start < 2:
            break
        mid = widest.start + (widest.end - widest.start) // 2
        i = ranges.index(widest)
        ranges[i:i + 1] = [OffsetRange(widest.topic, widest.partition, widest.directory, lo, hi,
                                       overlapping(widest.aborted, lo, hi))
                           for lo, hi in ((widest.start, mid), (mid, widest.end))]
    return ranges
