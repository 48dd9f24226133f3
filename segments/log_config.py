"""Topic-level log configs under Kafka's dotted names, with Kafka's defaults (kafka-format.md §14).

`LogConfig.from_dict({"segment.bytes": ...})` validates names, types and ranges; an unknown name
is an InvalidConfigurationError, and a value kafkalog does not implement yet (preallocation) is an
UnsupportedVersionError that says so, never silently ignored.
Immutable; thread-safe.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property

from engine.common.errors import InvalidConfigurationError, not_supported_yet
from segments.segment import SegmentConfig

LONG_MAX = 2**63 - 1


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
    preallocate: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    # name -> (minimum, maximum) for the int configs
    _RANGES = {
        "segment_bytes": (14, 2**31 - 1), "segment_ms": (1, LONG_MAX), "segment_jitter_ms": (0, LONG_MAX),
        "segment_index_bytes": (8, 2**31 - 1), "index_interval_bytes": (0, 2**31 - 1),
        "flush_messages": (1, LONG_MAX), "flush_ms": (0, LONG_MAX), "retention_ms": (-1, LONG_MAX),
        "retention_bytes": (-1, LONG_MAX), "file_delete_delay_ms": (0, LONG_MAX),
        "max_message_bytes": (0, 2**31 - 1), "min_insync_replicas": (1, 2**31 - 1),
        "min_compaction_lag_ms": (0, LONG_MAX), "max_compaction_lag_ms": (1, LONG_MAX),
        "delete_retention_ms": (0, LONG_MAX),
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
            if attr not in known:
                raise InvalidConfigurationError(f"unknown topic config {name!r}")
            values[attr] = cls._check(name, attr, value)
        return replace(base or cls(), **values)

    @classmethod
    def _check(cls, name: str, attr: str, value):
        if attr in cls._RANGES:
            lo, hi = cls._RANGES[attr]
            if isinstance(value, str) and value.lstrip("-").isdigit():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int in [{lo}, {hi}]")
            return value
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
        if attr == "message_timestamp_type":
            if value not in ("CreateTime", "LogAppendTime"):
                raise InvalidConfigurationError(f"{name}={value!r} must be CreateTime or LogAppendTime")
            return value
        if value not in (True, False, "true", "false"):
            raise InvalidConfigurationError(f"{name}={value!r} must be true or false")
        value = value in (True, "true")
        if attr == "preallocate" and value:
            raise not_supported_yet(f"{name}=true")
        return value

    @cached_property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (`cleanup.policy` holds compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        """Whether retention by time and size applies (`cleanup.policy` holds delete)."""
        return "delete" in self.cleanup_policy.split(",")

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
