"""RecordBatch v2 constants and per-batch parameter validation shared by both codec twins.

Header layout (big-endian, 61 bytes): baseOffset i64 | length i32 | partitionLeaderEpoch i32 |
magic i8 | crc u32 (CRC-32C of bytes [21, end)) | attributes i16 | lastOffsetDelta i32 |
baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 |
recordsCount i32, then the records (see kafka-format.md §1). Pure functions; leaf module.
"""
from __future__ import annotations

import bisect
import struct

from engine.common.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from engine.record.compression import codec_id

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_ENTRY_SIZE = 14          # smallest legal size field of any magic (LegacyRecord.RECORD_OVERHEAD_V0)
ATTRIBUTES_OFFSET = 21
PRODUCER_ID_OFFSET = 43      # its sign bit is the first byte's top bit
INT64 = struct.Struct(">q")   # a batch's base offset (at 0) and max timestamp (at MAX_TIMESTAMP_OFFSET)
MAX_TIMESTAMP = INT64
MAX_TIMESTAMP_OFFSET = 35
MAGIC = 2
MIN_RECORD_SIZE = 7          # a record of empty fields: 7 one-byte varints/bytes
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# messages shared by both codec twins
BAD_BATCH_OFFSETS = "batch offsets are negative, or its next offset overflows int64"
BAD_OFFSET_DELTA = "record offset delta is outside [0, lastOffsetDelta]"
TIMESTAMP_OVERFLOW = "record timestamp overflows int64"
SIZE_MISMATCH = "invalid record size: declared and read sizes differ"
SIZE_OVERRUN = "invalid record size: it overruns the batch"

COMPRESSION_MASK = 0x07
LOG_APPEND_TIME_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

TIMESTAMP_TYPES = ("create", "log_append")

ABORT, COMMIT = 0, 1
CONTROL_TYPE_NAMES = {
    -1: "UNKNOWN", 0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS",
}
CONTROL_KINDS = {"abort": ABORT, "commit": COMMIT}


def _int(name: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRecordError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidRecordError(f"{name}={value} is outside [{lo}, {hi}]")
    return value


def batch_attributes(
    *,
    base_offset: int,
    compression,
    timestamp_type: str,
    log_append_time_ms,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    partition_leader_epoch: int,
) -> tuple[int, int, int]:
    """Validate encode_batch's keywords as Kafka's builder does; return (codec, attributes, max_ts_override).

    max_ts_override is the LogAppendTime to store as maxTimestamp, or -2 for CreateTime.
    """
    _int("base_offset", base_offset, 0, 2**63 - 1)
    _int("partition_leader_epoch", partition_leader_epoch, -1, INT32_MAX)
    _int("producer_id", producer_id, -1, 2**63 - 1)
    _int("producer_epoch", producer_epoch, -1, 32767)
    _int("base_sequence", base_sequence, -1, INT32_MAX)
    codec = codec_id(compression)
    if timestamp_type not in TIMESTAMP_TYPES:
        raise InvalidRecordError(f"timestamp_type must be one of {TIMESTAMP_TYPES}, got {timestamp_type!r}")
    attributes = codec
    max_ts = -2
    if timestamp_type == "log_append":
        if log_append_time_ms is None:
            raise InvalidRecordError("timestamp_type='log_append' needs log_append_time_ms")
        max_ts = _int("log_append_time_ms", log_append_time_ms, 0, 2**63 - 1)
        attributes |= LOG_APPEND_TIME_FLAG
    elif log_append_time_ms is not None:
        raise InvalidRecordError("log_append_time_ms is only meaningful with timestamp_type='log_append'")
    if transactional:
        if producer_id == -1:
            raise InvalidRecordError("a transactional batch needs a producer_id")
        attributes |= TRANSACTIONAL_FLAG
    if producer_id != -1 and (producer_epoch == -1 or base_sequence < 0):
        raise InvalidRecordError("an idempotent batch needs producer_epoch >= 0 and base_sequence >= 0")
    return codec, attributes, max_ts


def control_type(kind) -> int:
    """Map "commit"/"abort" to the control record type."""
    try:
        return CONTROL_KINDS[kind]
    except (KeyError, TypeError):
        raise InvalidRecordError(f"control batch kind must be 'commit' or 'abort', got {kind!r}") from None


def check_timestamp(ts) -> int:
    """A record timestamp: an int ≥ 0, or -1/None for none."""
    if ts is None:
        return -1
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise InvalidTimestampError(f"timestamp must be an int (ms) or None, got {type(ts).__name__}")
    if ts < -1 or ts > 2**63 - 1:
        raise InvalidTimestampError(f"invalid timestamp {ts}")
    return ts


def increment_sequence(sequence: int, delta: int) -> int:
    """Kafka's sequence arithmetic: wraps from 2**31-1 to 0; -1 stays -1."""
    if sequence < 0:
        return -1
    return delta - (INT32_MAX - sequence) - 1 if sequence > INT32_MAX - delta else sequence + delta


def reencoded(attributes: int, target: int) -> bool:
    """Whether a leader re-encodes a batch with these attributes for a topic whose codec is `target` (-1: the
    producer's, kept): when the codecs differ, except that an uncompressed control batch stays as written (Kafka's
    LogValidator)."""
    codec = attributes & COMPRESSION_MASK
    return 0 <= target != codec and not (codec == 0 and attributes & CONTROL_FLAG)


def timestamp_out_of_range(index: int, offset: int, ts: int, bounds: tuple[int, int],
                           source: str | None) -> InvalidTimestampError:
    """The error for record `index` of a batch (at `offset` once appended) whose CreateTime lies outside the
    topic's [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]: the batch is refused."""
    return InvalidTimestampError(
        f"record {index} of the batch has timestamp {ts}, outside [{bounds[0]}, {bounds[1]}] "
        f"(message.timestamp.before.max.ms / message.timestamp.after.max.ms): the batch is refused",
        file=source, offset=offset)


def entry_size(head) -> int:
    """The bytes of the whole batch whose first LOG_OVERHEAD bytes are `head`: its size field plus the base offset and
    the size field themselves (negative for a corrupt size)."""
    return LOG_OVERHEAD + int.from_bytes(head[8:LOG_OVERHEAD], "big", signed=True)


RECORD_OVERHEAD = 21  # an upper bound of a record's framing (size, attributes, deltas, field lengths)


def check_send(value, key, headers, timestamp_ms) -> tuple:
    """A sent record's fields, checked: (value, key, headers as (UTF-8 key bytes, value bytes|None) pairs or
    None, an upper bound of its size in a batch, timestamp_ms or None for "now")."""
    value = check_bytes("value", value)
    key = check_bytes("key", key)
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        headers = normalize_headers(0, headers)
        size += sum(len(k) + (len(v) if v is not None else 0) + 10 for k, v in headers)
    else:
        headers = None
    if timestamp_ms is not None and (type(timestamp_ms) is not int or not 0 <= timestamp_ms <= INT64_MAX):
        raise InvalidTimestampError(f"timestamp_ms must be an int in [0, 2**63) or None, got {timestamp_ms!r}")
    return value, key, headers, size, timestamp_ms


def sent_fields(rec) -> tuple:
    """(key, value, headers, timestamp_ms) of a send_many() item: (key, value) or all four."""
    if type(rec) is not tuple or len(rec) not in (2, 4):
        raise InvalidRecordError(f"a record must be a (key, value) or (key, value, headers, timestamp_ms) tuple, "
                                 f"got {rec!r:.80}")
    return rec if len(rec) == 4 else (rec[0], rec[1], None, None)


def record_too_large(size: int, limit: int, topic: str) -> RecordTooLargeError:
    return RecordTooLargeError(f"the record is {size} bytes when serialized, more than the {limit}-byte limit "
                               f"(max.request.size / max.message.bytes of {topic!r})")


def bad_partition(topic: str, partition, count: int) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(f"partition {partition!r} is not in [0, {count}) for topic {topic!r}")


class BatchHeader:
    """The fields of a batch's 61-byte header that producer state reads, without decoding the batch."""

    __slots__ = ("base_offset", "attributes", "last_offset_delta", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "last_sequence", "is_transactional", "is_control")

    def __init__(self, header) -> None:
        (self.base_offset, _, _, _, _, attributes, self.last_offset_delta, _, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence, _) = HEADER.unpack_from(header)
        self.attributes = attributes
        self.last_sequence = increment_sequence(self.base_sequence, self.last_offset_delta)
        self.is_transactional = bool(attributes & TRANSACTIONAL_FLAG)
        self.is_control = bool(attributes & CONTROL_FLAG)


def check_bytes(name: str, value) -> bytes | None:
    """A key, value or header value: bytes, any object with the buffer protocol (its bytes, in C order) or None."""
    if value is None or isinstance(value, bytes):
        return value
    try:
        return memoryview(value).tobytes()
    except TypeError:
        raise InvalidRecordError(f"{name} must be bytes-like or None, got {type(value).__name__}") from None


def normalize_headers(i: int, headers) -> list[tuple[bytes, bytes | None]]:
    """Record i's headers as (UTF-8 key bytes, value bytes|None) pairs; keys round-trip via surrogateescape."""
    if headers is None:
        return []
    if not isinstance(headers, (list, tuple)):
        raise InvalidRecordError(f"record {i}: headers must be a list of (str, bytes|None)")
    out = []
    for h in headers:
        if not isinstance(h, tuple) or len(h) != 2:
            raise InvalidRecordError(f"record {i}: a header must be a (str, bytes|None) tuple")
        if not isinstance(h[0], str):
            raise InvalidRecordError(f"record {i}: a header key must be str, got {type(h[0]).__name__}")
        try:
            key = h[0].encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise InvalidRecordError(f"record {i}: header key {h[0]!r:.60} is not encodable as UTF-8 ({exc.reason})") \
                from None
        out.append((key, check_bytes("header value", h[1])))
    return out


def timestamp_delta(ts: int, base_ts: int) -> int:
    """ts - base_ts, which must fit the varlong's int64."""
    delta = ts - base_ts
    if not -2**63 <= delta < 2**63:
        raise InvalidTimestampError(f"timestamp {ts} is too far from the batch base timestamp {base_ts}")
    return delta


def unpack_record(i: int, rec, prev_delta: int, base_offset: int):
    """(offset_delta, key, value, headers, timestamp) of input record i, validated.

    A (key, value, headers, timestamp_ms) tuple takes the next offset; a Record keeps its own.
    """
    if isinstance(rec, tuple):
        if len(rec) != 4:
            raise InvalidRecordError(f"record {i}: expected (key, value, headers, timestamp_ms), got {len(rec)} items")
        key, value, headers, ts = rec
        delta = prev_delta + 1
    elif hasattr(rec, "offset") and hasattr(rec, "value"):
        key, value, headers, ts = rec.key, rec.value, rec.headers, rec.timestamp
        if not isinstance(rec.offset, int):
            raise InvalidRecordError(f"record {i}: offset must be an int")
        delta = rec.offset - base_offset
        if delta <= prev_delta:
            raise InvalidRecordError(f"record {i}: offset {rec.offset} does not increase within the batch")
    else:
        raise InvalidRecordError(f"record {i}: expected a tuple or a Record, got {type(rec).__name__}")
    if delta > INT32_MAX:
        raise InvalidRecordError(f"record {i}: offset delta {delta} does not fit an int32")
    return (delta, check_bytes("key", key), check_bytes("value", value),
            normalize_headers(i, headers), check_timestamp(ts))


def last_offset_delta(prev: int, last_offset_delta) -> int:
    """The batch's lastOffsetDelta: the last record's delta unless explicitly extended."""
    if last_offset_delta is None:
        return prev
    if not isinstance(last_offset_delta, int) or not prev <= last_offset_delta <= INT32_MAX:
        raise InvalidRecordError(f"last_offset_delta={last_offset_delta!r} must be an int in [{prev}, 2**31-1]")
    return last_offset_delta


def control_fields(key, value) -> tuple[int, int | None]:
    """(control type id, coordinator epoch or None) of a control record, as Kafka parses them."""
    if key is None or len(key) < 4:
        raise InvalidRecordError("control record key is shorter than 4 bytes")
    version, ctype = struct.unpack_from(">hh", key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    if ctype < 0 or ctype not in CONTROL_TYPE_NAMES:  # UNKNOWN (-1) included: only a marker has a value to read
        return -1, None
    if ctype > COMMIT:
        return ctype, None
    if value is None or len(value) < 6:
        raise InvalidRecordError("end transaction marker value is shorter than 6 bytes")
    vversion, epoch = struct.unpack_from(">hi", value)
    if vversion < 0:
        raise InvalidRecordError(f"invalid end transaction marker version {vversion}")
    return ctype, epoch


def control_batch_params(kind, *, base_offset, producer_id, producer_epoch, coordinator_epoch, timestamp_ms,
                         partition_leader_epoch) -> tuple[bytes, bytes, int]:
    """Validate a transaction marker's fields; return its record (key, value, timestamp)."""
    ctype = control_type(kind)
    _int("coordinator_epoch", coordinator_epoch, -2**31, INT32_MAX)
    batch_attributes(base_offset=base_offset, compression=0, timestamp_type="create", log_append_time_ms=None,
                     producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0,
                     transactional=True, partition_leader_epoch=partition_leader_epoch)
    if producer_id < 0:
        raise InvalidRecordError("a transaction marker needs a producer_id >= 0")
    return struct.pack(">hh", 0, ctype), struct.pack(">hi", 0, coordinator_epoch), check_timestamp(timestamp_ms)


def leading_epoch(entries: list[tuple[int, int]] | None, offset: int) -> tuple[int, int] | None:
    """The leader-epoch entry (epoch, start offset) that leads at `offset`: the last one starting at or below it
    (`entries` ascending, as the leader-epoch cache keeps them); None below the first entry's start or without
    entries."""
    if not entries or offset < entries[0][1]:
        return None
    return entries[bisect.bisect_right(entries, offset, key=lambda entry: entry[1]) - 1]


class _NoHeaders(list):
    """The headers of every record that has none: one shared empty list, so it refuses changes.

    Sharing it keeps decoding from allocating a list per record (a consumer's loop reads `headers` of each);
    it compares, iterates, copies and pickles as `[]`.
    """

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("a record without headers shares one read-only empty list; build a new list, "
                        "for example list(record.headers), to add headers")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> str:
        return "NO_HEADERS"


NO_HEADERS = _NoHeaders()


def record_fields(r) -> tuple:
    """A record's fields in constructor order (either twin's Record, or anything shaped like one)."""
    return (r.offset, r.timestamp, r.key, r.value, list(r.headers), r.control_type, r.coordinator_epoch)


def record_equals(r, other):
    """Records are equal when all their fields are, whichever twin made them."""
    try:
        return record_fields(r) == record_fields(other)
    except AttributeError:
        return NotImplemented
