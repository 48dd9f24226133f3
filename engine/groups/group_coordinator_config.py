"""GroupCoordinatorConfig: the broker settings a group coordinator honours (Kafka's `group.*` and
`offsets.retention.minutes` names, with underscores), checked as they are given.
No file of its own (the engine's `group_config` option); no state: an immutable tuple, safe from any thread.
"""
from __future__ import annotations

from typing import NamedTuple

from engine.common.errors import InvalidConfigurationError
from engine.common.structs import settings_of
from engine.groups import server_assignors

MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")  # Kafka's group.consumer.migration.policy


class GroupConfig(NamedTuple):
    """The broker settings a group coordinator honours (Kafka's names, with underscores)."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # Kafka's broker default is 3000; an embedded engine has no join storms from other hosts, so it starts at once
    group_initial_rebalance_delay_ms: int = 0
    offsets_retention_minutes: int = 10_080
    # the consumer group protocol (KIP-848)
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_assignors: tuple = ("uniform", "range")  # names of built-in ones or ServerAssignor objects
    # online migration between a classic group and a consumer group (engine.groups.classic_members): Kafka's values
    group_consumer_migration_policy: str = "bidirectional"
    # share groups (KIP-932; engine.groups.share_group_coordinator): Kafka's group.share.* defaults
    group_share_record_lock_duration_ms: int = 30_000
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_delivery_count_limit: int = 5
    group_share_partition_max_record_locks: int = 2_000

    @classmethod
    def of(cls, settings: dict | None) -> "GroupConfig":
        out = settings_of(cls, settings, "group")
        out = out._replace(group_consumer_assignors=tuple(server_assignors.resolve(out.group_consumer_assignors)
                                                          .values()))
        if out.group_consumer_migration_policy not in MIGRATION_POLICIES:
            raise InvalidConfigurationError(f"group_consumer_migration_policy={out.group_consumer_migration_policy!r} "
                                            f"must be one of {', '.join(MIGRATION_POLICIES)}")
        for name, value in out._asdict().items():
            if name in ("group_consumer_assignors", "group_consumer_migration_policy"):
                continue
            if type(value) is not int or value < (0 if name == "group_initial_rebalance_delay_ms" else 1):
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= "
                                                f"{0 if name == 'group_initial_rebalance_delay_ms' else 1}")
        if out.group_min_session_timeout_ms > out.group_max_session_timeout_ms:
            raise InvalidConfigurationError("group_min_session_timeout_ms is above group_max_session_timeout_ms")
        return out
