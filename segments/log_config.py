"""Topic-level log configs under Kafka's dotted names, with Kafka's defaults (kafka-format.md §14).

Every config of Kafka's topic-config definition is known here, and each is either honoured or refused with the
reason kafkalog cannot honour it (docs/compatibility.md lists them):
- honoured: the segment, retention, flush, index, cleaner, replication and message configs, `compression.type` with
  its levels (applied when a leader re-encodes a batch, txn.leader_validation) and the timestamp bounds;
- accepted with a warning, as Kafka accepts them: the deprecated `message.format.version` (ignored: every batch is
  v2), `message.downconversion.enable` (nothing is ever down-converted) and `message.timestamp.difference.max.ms`
  (honoured, as Kafka does, where a `before`/`after` bound is left at its default);
- refused unless left at their defaults, naming the reason: the tiered-storage configs (there is no remote tier),
  the replication throttles (replicas copy in-process) and `preallocate` (segments grow as they are written).
`LogConfig.from_dict({"segment.bytes": ...})` validates names, types and ranges; an unknown name or a refused
value is an InvalidConfigurationError that names it.
Immutable; thread-safe.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property

from engine.common.errors import InvalidConfigurationError
from engine.record import compression as comp
from engine.segments.segment import SegmentConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
log = logging.getLogger("kafkalog.config")

# Kafka's BrokerCompressionType: `producer` keeps a batch in the codec it was sent in
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
_TARGET_CODEC = {"producer": -1, "uncompressed": comp.NONE, "gzip": comp.GZIP, "snappy": comp.SNAPPY,
                 "lz4": comp.LZ4, "zstd": comp.ZSTD}
_NO_REMOTE_TIER = "kafkalog keeps every segment on local disk and has no remote tier (tiered storage)"
_DEPRECATED = {
    "message.format.version": "ignored: every batch is stored as RecordBatch v2, as Kafka does from 3.0",
    "message.downconversion.enable": "ignored: kafkalog never down-converts a batch for an old reader",
    "message.timestamp.difference.max.ms": "use message.timestamp.before.max.ms and message.timestamp.after.max.ms",
}
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?(-IV\d+)?")


def warn_deprecated(config: Mapping) -> None:
    """Log each deprecated config a user sets, at WARNING, as Kafka logs it (they are accepted all the same)."""
    for name in sorted(set(config) & set(_DEPRECATED)):
        log.warning("topic config %s is deprecated (%s)", name, _DEPRECATED[name])


def _shown(value) -> str:
    """A config value as Kafka's tools print it (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    compression_type: str = "producer"
    compression_gzip_level: int = comp.LEVELS[comp.GZIP][2]
    compression_lz4_level: int = comp.LEVELS[comp.LZ4][2]
    compression_zstd_level: int = comp.LEVELS[comp.ZSTD][2]
    preallocate: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_format_version: str = "3.0-IV1"
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    # name -> (minimum, maximum) for the int configs
    _RANGES = {
        "segment_bytes": (14, INT_MAX), "segment_ms": (1, LONG_MAX), "segment_jitter_ms": (0, LONG_MAX),
        "segment_index_bytes": (8, INT_MAX), "index_interval_bytes": (0, INT_MAX),
        "flush_messages": (1, LONG_MAX), "flush_ms": (0, LONG_MAX), "retention_ms": (-1, LONG_MAX),
        "retention_bytes": (-1, LONG_MAX), "file_delete_delay_ms": (0, LONG_MAX),
        "max_message_bytes": (0, INT_MAX), "min_insync_replicas": (1, INT_MAX),
        "min_compaction_lag_ms": (0, LONG_MAX), "max_compaction_lag_ms": (1, LONG_MAX),
        "delete_retention_ms": (0, LONG_MAX), "message_timestamp_before_max_ms": (0, LONG_MAX),
        "message_timestamp_after_max_ms": (0, LONG_MAX), "message_timestamp_difference_max_ms": (0, LONG_MAX),
        "local_retention_ms": (-2, LONG_MAX), "local_retention_bytes": (-2, LONG_MAX),
    }
    # name -> the codec whose level it is (compression.check_level holds Kafka's ranges)
    _LEVELS = {f"compression_{comp.NAMES[codec]}_level": codec for codec in comp.LEVELS}
    # name -> the values it may take (compared case-insensitively where Kafka does)
    _CHOICES = {"message_timestamp_type": ("CreateTime", "LogAppendTime"), "compression_type": COMPRESSION_TYPES}
    # name -> why a value other than the default is refused
    _REFUSED = {
        "remote_storage_enable": _NO_REMOTE_TIER, "remote_log_copy_disable": _NO_REMOTE_TIER,
        "remote_log_delete_on_disable": _NO_REMOTE_TIER,
        "local_retention_ms": _NO_REMOTE_TIER + ": every segment is local, retention.ms governs it",
        "local_retention_bytes": _NO_REMOTE_TIER + ": every segment is local, retention.bytes governs it",
        "leader_replication_throttled_replicas": "replicas copy batches in-process: there is no traffic to throttle",
        "follower_replication_throttled_replicas": "replicas copy batches in-process: there is no traffic to throttle",
        "preallocate": "a segment's .log grows as batches are appended; kafkalog never preallocates it",
    }

    @classmethod
    def from_dict(cls, config: dict | None = None, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka's dotted names (e.g. {"segment.bytes": 1 << 20}), on top of `base`."""
        if config is not None and not isinstance(config, Mapping):
            raise InvalidConfigurationError(f"a config must be a dict of Kafka's dotted names, got "
                                            f"{type(config).__name__}")
        known = {f.name for f in fields(cls)}
        values = {}
        for name, value in (config or {}).items():
            if not isinstance(name, str):
                raise InvalidConfigurationError(f"a config name must be a str, got {name!r}")
            attr = name.replace(".", "_")
            if attr not in known or "_" in name:
                raise InvalidConfigurationError(f"Unknown topic config name: {name}")
            values[attr] = cls._check(name, attr, value)
        return replace(base or cls(), **values)

    @classmethod
    def _check(cls, name: str, attr: str, value):
        value = cls._parse(name, attr, value)
        default = getattr(cls, attr)
        if attr in cls._REFUSED and value != default:
            raise InvalidConfigurationError(f"{name}={_shown(value)} is refused: {cls._REFUSED[attr]} (only the "
                                            f"default {_shown(default)} is accepted)")
        return value

    @classmethod
    def _parse(cls, name: str, attr: str, value):
        if attr in cls._RANGES or attr in cls._LEVELS:
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            if attr in cls._LEVELS:
                return comp.check_level(cls._LEVELS[attr], value, name)
            lo, hi = cls._RANGES[attr]
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int in [{lo}, {hi}]")
            return value
        if attr in cls._CHOICES:
            choices = cls._CHOICES[attr]
            found = [c for c in choices if isinstance(value, str) and
                     (value == c if attr == "message_timestamp_type" else value.strip().lower() == c)]
            if not found:
                raise InvalidConfigurationError(f"{name}={value!r} must be one of {', '.join(choices)}")
            return found[0]
        if attr == "cleanup_policy":
            policies = value.replace(" ", "").split(",") if isinstance(value, str) else None
            if not policies or not set(policies) <= {"delete", "compact"} or len(set(policies)) != len(policies):
                raise InvalidConfigurationError(f"cleanup.policy={value!r} must be 'delete', 'compact' or "
                                                f"'compact,delete'")
            return ",".join(policies)
        if attr == "min_cleanable_dirty_ratio":
            try:
                ratio = float(value) if not isinstance(value, bool) else None
            except (TypeError, ValueError):
                ratio = None
            if ratio is None or not 0 <= ratio <= 1:
                raise InvalidConfigurationError(f"{name}={value!r} must be a number in [0, 1]")
            return ratio
        if attr == "message_format_version":
            if not isinstance(value, str) or not _VERSION.fullmatch(value.strip()):
                raise InvalidConfigurationError(f"{name}={value!r} must be a Kafka version such as 2.8 or 3.0-IV1")
            return value.strip()
        if isinstance(getattr(cls, attr), str):  # the replication throttles: a list of partition:broker, or *
            if not isinstance(value, str):
                raise InvalidConfigurationError(f"{name}={value!r} must be a string")
            return value.strip()
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if value not in (True, False) or not isinstance(value, bool):
            raise InvalidConfigurationError(f"{name}={value!r} must be true or false")
        return value

    @cached_property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (`cleanup.policy` holds compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        """Whether retention by time and size applies (`cleanup.policy` holds delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @cached_property
    def timestamp_bounds(self) -> tuple[int, int] | None:
        """(before, after): how far a CreateTime record's timestamp may lie behind and ahead of the leader's clock
        (Kafka's rule: a bound left at its default takes `message.timestamp.difference.max.ms`); None when neither
        bounds anything (both unlimited, or the topic stamps LogAppendTime)."""
        if self.message_timestamp_type == "LogAppendTime":
            return None
        before, after = (self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms)
        before = self.message_timestamp_difference_max_ms if before == LONG_MAX else before
        after = self.message_timestamp_difference_max_ms if after == LONG_MAX else after
        return None if before == after == LONG_MAX else (before, after)

    @cached_property
    def target_compression(self) -> tuple[int, int | None]:
        """(codec id, level) a leader stores batches in: codec -1 keeps each batch's own (`producer`); the level is
        the topic's for that codec (None for a codec without levels)."""
        codec = _TARGET_CODEC[self.compression_type]
        return codec, getattr(self, f"compression_{comp.NAMES[codec]}_level") if codec in comp.LEVELS else None

    @cached_property
    def leader_checks(self) -> bool:
        """Whether a leader's append may have to re-encode a batch or read its records' timestamps (so the one-call
        append, which does neither, leaves it to the general path)."""
        return self.compression_type != "producer" or self.timestamp_bounds is not None

    def to_dict(self) -> dict:
        """Kafka's dotted names and values."""
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self)}

    @property
    def segment(self) -> SegmentConfig:
        """The segments' knobs; a compacted log rolls by `max.compaction.lag.ms` too (Kafka's maxSegmentMs), so
        its records become cleanable in time."""
        roll_ms = min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms
        return SegmentConfig(index_interval_bytes=self.index_interval_bytes,
                             max_index_size=self.segment_index_bytes,
                             segment_jitter_ms=self.segment_jitter_ms, segment_ms=roll_ms)
