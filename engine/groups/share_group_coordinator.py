"""The share group coordinator (KIP-932's queues): share groups' membership (engine.groups.share_group), their share
sessions, and the delivery state of every share-partition (engine.groups.share_partition), with what ShareFetch and
ShareAcknowledge do to it. One per engine, for every share group.

- Membership: ShareGroupHeartbeat (engine.groups.share_group: the simple assignor, and only initialized
  share-partitions assigned, the heartbeat that first sees a subscribed partition initializing it).
- A share-partition starts where the group's `share.auto.offset.reset` says (latest: the log end when it is first
  assigned; earliest: the log start), unless its state was persisted before.
- Acquisition: a fetch reads the log from the share-partition's first available offset (up to the high watermark,
  or the last stable offset under `share.isolation.level=read_committed`, whose aborted transactions' batches are
  archived rather than delivered; control batches always are) and acquires what it returns for the member, for
  `share.record.lock.duration.ms`.
- Acknowledgement: ShareFetch and ShareAcknowledge carry acknowledgement batches; a share-partition's are applied all
  together or refused (INVALID_RECORD_STATE), and every share-partition changed is persisted before the answer.
- Share sessions: a member's ShareFetch with epoch 0 opens one (replacing the one it had), each later request carries
  the next epoch (INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND without a session), and epoch -1
  closes it, releasing what the member still holds of its partitions; partitions named join the session, forgotten
  ones leave it (what the member holds of them released once the request's acknowledgements are applied). Over the
  wire a share session also closes with its connection (engine.network.share_apis).
- A member whose session times out has its share session closed (its records released: available again, or
  archived at the delivery count limit); one that leaves keeps its share session, which its client closes next; an
  acquisition lock that times out releases its records the same way. Released records wake the fetches waiting for
  records of their partition.
Settings (a group's dynamic configs over the engine's `group_config`, Kafka's `group.share.*`):
share.record.lock.duration.ms, share.session.timeout.ms, share.heartbeat.interval.ms, share.auto.offset.reset
(latest, earliest, by_duration:<ISO-8601 duration>), share.isolation.level; the delivery count limit and the record
locks per partition are the engine's alone.
Storage: every change of a share-partition is a ShareSnapshot record in `__share_group_state` (created on first use,
50 partitions; engine.groups.share_state_records), appended with acks='all' before the request that made it is
answered; on load the coordinator replays them. Membership and sessions are memory only.
Admin: start offsets and lag per share-partition (DescribeShareGroupOffsets), and, of an empty group only, new start
offsets (AlterShareGroupOffsets, kafka-share-groups.sh --reset-offsets), a topic's state forgotten
(DeleteShareGroupOffsets) and the group deleted (DeleteGroups).
Time: `tick()` (called by every request and the engine's background thread) applies session and lock deadlines on the
injected clock; it looks at them only once the earliest is due.
Thread-safety: one lock serialises every call.
"""
from __future__ import annotations

import logging
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from engine.common.errors import (
    GroupIdNotFoundError,
    InvalidConfigurationError,
    InvalidRecordStateError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    KafkaError,
    NonEmptyGroupError,
    OffsetNotAvailableError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from engine.groups import share_state_records as records
from engine.groups.consumer_group import TopicsView
from engine.groups.group_coordinator import InternalLog
from engine.groups.group_coordinator_config import GroupConfig
from engine.groups.share_group import ShareAnswer, ShareGroup, ShareHeartbeat
from engine.groups.share_partition import DONE, RELEASE, RENEW, Acquired, SharePartition
from engine.record import batch_format as bf
from engine.replication.partition import READ_COMMITTED, READ_UNCOMMITTED

log = logging.getLogger("kafkalog.share")
Key = tuple[str, int]  # (topic id, partition)
DYNAMIC_CONFIGS = {"share.record.lock.duration.ms", "share.session.timeout.ms", "share.heartbeat.interval.ms",
                   "share.auto.offset.reset", "share.isolation.level"}


class Fetched(NamedTuple):
    """What one share-partition gave a fetch: whole batches (bytes of the log) and the runs acquired in them."""

    records: bytes | memoryview
    acquired: list[Acquired]


@dataclass
class ShareSession:
    epoch: int  # the epoch the next request carries
    partitions: set[Key] = field(default_factory=set)


_ISO_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?=[-+\d])(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                           r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE | re.ASCII)


def by_duration_ms(value: str) -> int | None:
    """The milliseconds of `by_duration:<ISO-8601 duration>` (Java's Duration.parse: PnDTnHnMn.nS, each part
    optional, signs allowed, the whole not negative), None for any other text."""
    if not value.startswith("by_duration:"):
        return None
    m = _ISO_DURATION.fullmatch(value[len("by_duration:"):])
    if m is None or not any(m.group(i) for i in (2, 3, 4, 5)):
        return None
    sign, days, hours, minutes, seconds, fraction = m.groups()
    nanos = sum(int(n or 0) * unit for n, unit in ((days, 86_400), (hours, 3_600), (minutes, 60), (seconds, 1))) \
        * 1_000_000_000
    if fraction:
        nanos += (-1 if (seconds or "").startswith("-") else 1) * int(fraction.ljust(9, "0"))
    nanos = -nanos if sign == "-" else nanos
    return None if nanos < 0 else nanos // 1_000_000


def group_settings(dynamic: dict[str, str], config: GroupConfig) -> dict[str, object]:
    """A group's effective share settings (its dynamic configs over the engine's); InvalidConfigurationError for a
    value Kafka refuses."""
    out: dict[str, object] = {"share.record.lock.duration.ms": config.group_share_record_lock_duration_ms,
                              "share.session.timeout.ms": config.group_share_session_timeout_ms,
                              "share.heartbeat.interval.ms": config.group_share_heartbeat_interval_ms,
                              "share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}
    for name, value in dynamic.items():
        if name not in DYNAMIC_CONFIGS:
            continue
        if name == "share.auto.offset.reset":
            if value not in ("latest", "earliest") and by_duration_ms(value) is None:
                raise InvalidConfigurationError(
                    f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                    f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
            out[name] = value
        elif name == "share.isolation.level":
            if value not in ("read_committed", "read_uncommitted"):
                raise InvalidConfigurationError(f"share.isolation.level={value!r}: read_committed or read_uncommitted")
            out[name] = value
        else:
            try:
                n = int(value)
            except ValueError:
                n = 0
            if n < 1:
                raise InvalidConfigurationError(f"{name}={value!r} must be a positive integer")
            out[name] = n
    return out


class ShareGroupCoordinator:
    """The share group coordinator of one engine (see the module docstring). `topics(names)` resolves subscribed
    topic names, `topic_named(topic id)` a topic id's name, `partition(name, index)` the partition a fetch reads,
    `dynamic(group)` a group's dynamic configs, and `other_group(group)` says whether a group of another type has
    that id; `available(topic, partition)` is told when released records can be acquired again (as an append would
    be: it wakes the fetches waiting)."""

    def __init__(self, storage: InternalLog, clock, topics: TopicsView, topic_named: Callable[[str], str | None],
                 partition: Callable[[str, int], object], dynamic: Callable[[str], dict[str, str]],
                 other_group: Callable[[str], bool], config: GroupConfig | None = None,
                 available: Callable[[str, int], None] = lambda topic, partition: None) -> None:
        self._store, self.clock, self._topics, self._topic_named = records.ShareStateStore(storage), clock, topics, \
            topic_named
        self._partition, self._dynamic, self._other_group = partition, dynamic, other_group
        self._available = available  # records of topic-partition became available again: wakes waiting fetches
        self.config = config or GroupConfig.of(None)
        self._lock = threading.RLock()
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self._persisted: dict[tuple[str, str, int], records.ShareState] = {}  # loaded, not yet in use
        self._next_deadline: float = 0  # no session or lock deadline passes before this (0: look at every one)

    # --- storage ---------------------------------------------------------------------------------------
    def load(self) -> None:
        """Replay `__share_group_state`: each share-partition's last state."""
        states = self._store.load()
        with self._lock:
            self._persisted = states
            for group_id, _, _ in states:
                if group_id not in self.groups:
                    self.groups[group_id] = self._new_group(group_id)

    def _persist(self, group_id: str, changed: set[Key], now: int) -> None:
        self._store.write([(group_id, t, p, sp.start, sp.state_batches()) for t, p in sorted(changed)
                           if (sp := self.partitions.get((group_id, t, p))) is not None], now)

    def _released(self, group_id: str, changed: set[Key], now: int) -> None:
        """Persist share-partitions whose records were released, and wake the fetches that could acquire them."""
        self._persist(group_id, changed, now)
        for topic_id, index in changed:
            name = self._topic_named(topic_id)
            if name is not None:
                self._available(name, index)

    # --- membership ------------------------------------------------------------------------------------
    def _settings(self, group_id: str) -> dict[str, object]:
        return group_settings(self._dynamic(group_id), self.config)

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        g = self.groups.get(group_id)
        if g is None:
            if self._other_group(group_id):
                raise GroupIdNotFoundError(f"group {group_id!r} is not a share group")
            if not create:
                raise GroupIdNotFoundError(f"Group {group_id} not found.")  # (Kafka's text)
            g = self.groups[group_id] = self._new_group(group_id)
        return g

    def _new_group(self, group_id: str) -> ShareGroup:
        return ShareGroup(group_id, lambda topic_id, index: (group_id, topic_id, index) in self.partitions
                          or (group_id, topic_id, index) in self._persisted)

    def heartbeat(self, hb: ShareHeartbeat) -> ShareAnswer:
        if not hb.group_id:
            raise InvalidRequestError("a share group's id may not be empty")
        with self._lock:
            now = self.clock.time_ms()
            self._tick(now)
            settings = self._settings(hb.group_id)
            g = self._group(hb.group_id, create=hb.member_epoch == 0)
            answer = g.heartbeat(hb, self._topics, now, settings["share.session.timeout.ms"],
                                 settings["share.heartbeat.interval.ms"])
            self._due(now + int(settings["share.session.timeout.ms"]))
            self._start_partitions(g, settings, now)
            return answer

    def _start_partitions(self, g: ShareGroup, settings: dict, now: int) -> None:
        """Initialize the share-partitions the group subscribes to (from their persisted state, else
        share.auto.offset.reset); the members are assigned those newly initialized from their next heartbeats."""
        self._drop_deleted(g.group_id, now)
        new: set[Key] = set()
        for topic_id, index in sorted(g.subscribed_partitions()):
            key = (g.group_id, topic_id, index)
            if key in self.partitions:
                continue
            s = self._persisted.pop(key, None)
            if s is not None:
                self.partitions[key] = SharePartition.restore(s.start_offset, list(s.batches),
                                                              self.config.group_share_delivery_count_limit,
                                                              self.config.group_share_partition_max_record_locks)
                continue
            name = self._topic_named(topic_id)
            if name is None:
                continue
            try:
                start = _reset_offset(self._partition(name, index), settings, now)
            except KafkaError as exc:  # (no leader, or no record by_duration finds: started at a later heartbeat)
                log.info("share group %s: %s-%d not started: %s", g.group_id, name, index, exc)
                continue
            self.partitions[key] = self._new_partition(start)
            new.add((topic_id, index))
        self._persist(g.group_id, new, now)
        if new:
            g.reassign(self._topics)

    def assignment_pending(self, group_id: str, member_id: str) -> bool:
        """Whether the member has an assignment it was not sent yet (an in-process member heartbeats at once: over
        the wire a member hears of it at its next heartbeat)."""
        with self._lock:
            g = self.groups.get(group_id)
            m = g.members.get(member_id) if g is not None else None
            return m is not None and not m.sent

    def _forget_member(self, group_id: str, member_id: str, now: int) -> None:
        """A member's session timed out: its share session closes and its records are released. (One that leaves
        keeps its share session: its client closes it next, acknowledging what it still holds.)"""
        self.sessions.pop((group_id, member_id), None)
        changed = {(t, p) for (gid, t, p), sp in self.partitions.items() if gid == group_id and sp.release(member_id)}
        self._released(group_id, changed, now)

    # --- share sessions, fetch and acknowledge ------------------------------------------------------------
    def session(self, group_id: str, member_id: str, epoch: int, add: list[Key], forget: list[Key],
                acknowledging_only: bool = False) -> list[Key]:
        """Check (and move on) the member's share session for a request with `epoch`; the partitions it now fetches.
        A request with epoch -1 closes the session: `close_session` once its acknowledgements are applied; the
        partitions it forgets leave the session now, and what the member holds of them is released by
        `release_partitions` once its acknowledgements (which may name them) are applied."""
        with self._lock:
            now = self.clock.time_ms()
            self._tick(now)
            g = self._group(group_id, create=False)
            key = (group_id, member_id)
            s = self.sessions.get(key)
            if epoch == 0 and member_id not in g.members:
                raise UnknownMemberIdError(f"share group {group_id!r} has no member {member_id!r}")
            if epoch == 0:
                if acknowledging_only:
                    raise InvalidShareSessionEpochError("ShareAcknowledge cannot open a share session (epoch 0)")
                s = self.sessions[key] = ShareSession(1)
            elif s is None:
                raise ShareSessionNotFoundError(f"member {member_id!r} of share group {group_id!r} has no share "
                                                f"session")
            elif epoch != -1 and epoch != s.epoch:
                raise InvalidShareSessionEpochError(f"share session epoch {epoch}; the session expects {s.epoch}")
            elif epoch != -1:
                s.epoch = s.epoch + 1 if s.epoch < 0x7FFFFFFF else 1
            s.partitions.update(add)
            s.partitions -= set(forget)
            return sorted(s.partitions)

    def release_partitions(self, group_id: str, member_id: str, keys: list[Key]) -> None:
        """Release what the member holds of share-partitions its session forgot."""
        with self._lock:
            changed = {k for k in keys if self._release(group_id, k, member_id)}
            self._released(group_id, changed, self.clock.time_ms())

    def close_session(self, group_id: str, member_id: str, only: ShareSession | None = None) -> None:
        """Close the member's share session (epoch -1; with `only`, that session if it is still the member's),
        releasing what it holds of the session's partitions."""
        with self._lock:
            s = self.sessions.get((group_id, member_id))
            if s is None or only is not None and s is not only:
                return
            del self.sessions[(group_id, member_id)]
            changed = {k for k in s.partitions if self._release(group_id, k, member_id)}
            self._released(group_id, changed, self.clock.time_ms())

    def _release(self, group_id: str, key: Key, member_id: str) -> bool:
        sp = self.partitions.get((group_id, *key))
        return sp is not None and sp.release(member_id)

    def acknowledge(self, group_id: str, member_id: str,
                    acks: dict[Key, list[tuple[int, int, list[int]]]]) -> dict[Key, KafkaError | None]:
        """Apply each share-partition's acknowledgement batches (all of a share-partition's or none, as Kafka's
        share-partitions do) and persist what changed (a RENEW changes only a lock's deadline, which is not
        persisted); the error of each share-partition (None: applied)."""
        with self._lock:
            now = self.clock.time_ms()
            self._tick(now)
            renewed = now + self.lock_duration_ms(group_id)
            out: dict[Key, KafkaError | None] = {}
            changed: set[Key] = set()
            for key, batches in acks.items():
                sp = self.partitions.get((group_id, *key))
                if self._topic_named(key[0]) is None:
                    out[key] = UnknownTopicIdError(f"no topic has id {key[0]} (deleted?)")
                    self._drop_deleted(group_id, now)
                    continue
                if sp is None:
                    out[key] = InvalidRecordStateError(f"share group {group_id!r} has no state for {key[0]}-{key[1]}")
                    continue
                why = sp.acknowledge(member_id, batches, renewed)
                out[key] = None if why is None else \
                    InvalidRecordStateError(f"share group {group_id!r}, {key[0]}-{key[1]}: {why}")
                if why is None and any(kind != RENEW for _, _, types in batches for kind in types):
                    changed.add(key)
            released = {key for key in changed if any(RELEASE in types for _, _, types in acks[key])}
            self._persist(group_id, changed - released, now)
            self._released(group_id, released, now)
            return out

    def acquire(self, group_id: str, member_id: str, keys: list[Key], max_records: int,
                max_bytes: int, strict: bool = False) -> dict[Key, Fetched | KafkaError]:
        """Acquire records of `keys` for the member (at most about `max_records`, by whole batches, and `max_bytes`
        of them; `strict`, Kafka 4.2's record_limit acquire mode: at most `max_records`); what each share-partition
        gave (nothing when it had nothing to give), or its error."""
        with self._lock:
            now = self.clock.time_ms()
            self._tick(now)
            g = self._group(group_id, create=False)
            if (group_id, member_id) not in self.sessions:
                raise ShareSessionNotFoundError(f"member {member_id!r} of share group {group_id!r} has no share "
                                                f"session")
            settings = self._settings(group_id)
            self._start_partitions(g, settings, now)
            out: dict[Key, Fetched | KafkaError] = {}
            budget, left = max_bytes, max_records
            for key in keys:
                try:
                    got = self._acquire_one(group_id, member_id, key, left, budget, now, settings, strict)
                except KafkaError as exc:
                    out[key] = exc
                    continue
                if got.acquired:
                    out[key] = got
                    budget -= len(got.records)
                    left -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
                    if left <= 0 or budget <= 0:
                        break
            return out

    def _acquire_one(self, group_id: str, member_id: str, key: Key, max_records: int, budget: int, now: int,
                     settings: dict, strict: bool) -> Fetched:
        empty = Fetched(b"", [])
        sp = self.partitions.get((group_id, *key))
        name = self._topic_named(key[0])
        if name is None:
            self._drop_deleted(group_id, now)
            raise UnknownTopicIdError(f"no topic has id {key[0]} (deleted?)")
        if sp is None:
            return empty
        part = self._partition(name, key[1])
        moved = sp.move_start(part.log_start_offset)
        if not sp.can_acquire():
            return empty
        isolation = _isolation(settings)
        data = part.fetch(sp.fetch_offset(), max(1, budget), isolation)
        if data is None:
            return empty
        view = data.records
        aborted = sorted((t.first_offset, t.producer_id) for t in part.aborted_transactions(data)) \
            if isolation == READ_COMMITTED else []
        bounds = _batches(view, aborted)
        lock_ms = int(settings["share.record.lock.duration.ms"])
        acquired = sp.acquire(member_id, [(b, last, ok) for b, last, ok, _, _ in bounds], max(1, max_records), now,
                              lock_ms, strict)
        if acquired:
            self._due(now + lock_ms)
        if moved or any(not ok for _, _, ok, _, _ in bounds):
            self._persist(group_id, {key}, now)
        if not acquired:
            return empty
        lo, hi = acquired[0].first_offset, acquired[-1].last_offset
        spans = [(start, end) for b, last, _, start, end in bounds if last >= lo and b <= hi]
        return Fetched(view[spans[0][0]:spans[-1][1]], acquired)

    # --- time --------------------------------------------------------------------------------------------
    def tick(self) -> int:
        """Apply every session and lock deadline passed; how many members were removed."""
        with self._lock:
            return self._tick(self.clock.time_ms())

    def _tick(self, now: int) -> int:
        if now < self._next_deadline:
            return 0
        removed = 0
        for g in list(self.groups.values()):
            for member_id in g.expired(now):
                log.info("share group %s: member %s removed: session timed out", g.group_id, member_id)
                g.remove(member_id, self._topics)
                self._forget_member(g.group_id, member_id, now)
                removed += 1
        timed_out: dict[str, set[Key]] = {}
        for (gid, t, p), sp in self.partitions.items():
            if sp.release(now=now):
                timed_out.setdefault(gid, set()).add((t, p))
        for gid, changed in timed_out.items():
            self._released(gid, changed, now)
        deadlines = [m.session_deadline for g in self.groups.values() for m in g.members.values()]
        deadlines += [d for sp in self.partitions.values() if (d := sp.next_deadline()) is not None]
        self._next_deadline = min(deadlines, default=math.inf)
        return removed

    def _due(self, at: int) -> None:
        """A session or lock deadline at `at` exists now (ticks look again no later than it)."""
        self._next_deadline = min(self._next_deadline, at)

    # --- admin ---------------------------------------------------------------------------------------------
    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group."""
        with self._lock:
            return sorted((gid, g.state) for gid, g in self.groups.items())

    def describe(self, group_id: str) -> ShareGroup:
        with self._lock:
            self._tick(self.clock.time_ms())
            return self._group(group_id, create=False)

    def lock_duration_ms(self, group_id: str) -> int:
        """The acquisition lock's duration for `group_id` (share.record.lock.duration.ms)."""
        return int(self._settings(group_id)["share.record.lock.duration.ms"])

    def lag(self, group_id: str, key: Key, end: int) -> int | None:
        """How many records of one share-partition below `end` are not yet acknowledged or archived (None: the group
        has no state for it)."""
        with self._lock:
            sp = self.partitions.get((group_id, *key))
            if sp is None:
                s = self._persisted.get((group_id, *key))
                return None if s is None else max(0, end - s.start_offset) - sum(
                    b.last_offset - b.first_offset + 1 for b in s.batches if b.state in DONE and b.last_offset < end)
            return max(0, end - sp.start) - sum(1 for o, state, _, _ in sp.states() if state in DONE and o < end)

    def _empty_group(self, group_id: str, create: bool, now: int) -> ShareGroup:
        """The share group an admin change is for, which must have no members (NON_EMPTY_GROUP otherwise)."""
        self._tick(now)
        g = self._group(group_id, create=create)
        if g.members:
            raise NonEmptyGroupError(f"share group {group_id!r} has {len(g.members)} members: it must be empty")
        return g

    def _new_partition(self, start: int) -> SharePartition:
        return SharePartition(start, self.config.group_share_delivery_count_limit,
                              self.config.group_share_partition_max_record_locks)

    def reset_offsets(self, group_id: str, starts: dict[Key, int], create: bool = True) -> None:
        """Start share-partitions of an empty share group afresh at the offsets given (kafka-share-groups.sh
        --reset-offsets; AlterShareGroupOffsets, which names a group that exists: `create` False): what was
        delivered, acknowledged or archived of them is forgotten."""
        with self._lock:
            now = self.clock.time_ms()
            self._empty_group(group_id, create, now)
            for key, start in starts.items():
                self._persisted.pop((group_id, *key), None)
                self.partitions[(group_id, *key)] = self._new_partition(start)
            self._persist(group_id, set(starts), now)

    def delete_offsets(self, group_id: str, topic_ids: list[str]) -> dict[str, KafkaError | None]:
        """DeleteShareGroupOffsets: forget an empty share group's state of whole topics (tombstones; their
        share-partitions start afresh from share.auto.offset.reset when next assigned). Per topic: None, or
        UNKNOWN_TOPIC_OR_PARTITION where the group holds no state of it."""
        with self._lock:
            now = self.clock.time_ms()
            self._empty_group(group_id, False, now)
            held = self._held(group_id)
            out: dict[str, KafkaError | None] = {}
            for topic_id in topic_ids:
                keys = {k for k in held if k[0] == topic_id}
                out[topic_id] = None if keys else UnknownTopicOrPartitionError(
                    "There is no offset information to delete.")  # (Kafka's text)
                self._drop_state(group_id, keys, now)
            return out

    def _held(self, group_id: str) -> set[Key]:
        """The share-partitions `group_id` holds state of (in use or persisted)."""
        return {(t, p) for gid, t, p in list(self.partitions) + list(self._persisted) if gid == group_id}

    def delete_group(self, group_id: str) -> None:
        """Delete an empty share group and the state of its share-partitions (tombstones)."""
        with self._lock:
            now = self.clock.time_ms()
            self._empty_group(group_id, False, now)
            self._drop_state(group_id, self._held(group_id), now)
            del self.groups[group_id]
            for key in [k for k in self.sessions if k[0] == group_id]:
                del self.sessions[key]

    def _drop_deleted(self, group_id: str, now: int) -> None:
        """Forget the share-partitions of `group_id` whose topic was deleted."""
        held = self._held(group_id)
        gone = {t for t, _ in held if self._topic_named(t) is None}
        self._drop_state(group_id, {(t, p) for t, p in held if t in gone}, now)

    def _drop_state(self, group_id: str, keys, now: int) -> None:
        """Forget share-partitions of `group_id` (a deleted group's, a deleted topic's): tombstones for their state."""
        known = []
        for t, p in sorted(keys):
            in_use = self.partitions.pop((group_id, t, p), None) is not None
            if self._persisted.pop((group_id, t, p), None) is not None or in_use:
                known.append((group_id, t, p))
        self._store.delete(known, now)

    def start_offsets(self, group_id: str) -> dict[Key, int]:
        """Each share-partition's start offset (SPSO) of `group_id`."""
        with self._lock:
            out = {(t, p): sp.start for (gid, t, p), sp in self.partitions.items() if gid == group_id}
            out.update({(t, p): s.start_offset for (gid, t, p), s in self._persisted.items() if gid == group_id})
            return out


def _reset_offset(part, settings: dict, now: int) -> int:
    """Where a share-partition without state starts: share.auto.offset.reset's earliest (the log start), latest
    (the log end, or the last stable offset under read_committed), or by_duration (the first record whose
    timestamp is at most that long before now; OFFSET_NOT_AVAILABLE while none is, as Kafka's brokers answer)."""
    reset = settings["share.auto.offset.reset"]
    if reset == "earliest":
        return part.log_start_offset
    if reset == "latest":
        return part.fetch_upper_bound(_isolation(settings))
    since = now - by_duration_ms(reset)
    found = part.offset_for_timestamp(since)
    if found is None:
        raise OffsetNotAvailableError(f"no record of {part.topic}-{part.index} has a timestamp at or after "
                                      f"{since} ({reset})")
    return found[1]


def _isolation(settings: dict) -> str:
    return READ_COMMITTED if settings["share.isolation.level"] == "read_committed" else READ_UNCOMMITTED


def _batches(view, aborted: list[tuple[int, int]]) -> list[tuple[int, int, bool, int, int]]:
    """(base offset, last offset, deliverable, start, end) of each whole batch in `view` (bytes of the log): a
    control batch is not deliverable, nor a transactional batch of an aborted transaction (`aborted`: (first offset,
    producer id) of each, by first offset) from its first offset until its producer's next marker, as Kafka's
    read_committed consumers skip them."""
    out = []
    pos, size, due = 0, len(view), 0
    open_aborts: set[int] = set()  # producer ids whose aborted transaction the batches are in
    while pos + bf.HEADER_SIZE <= size:
        base, length, _, _, _, attributes, delta, _, _, producer_id, *_ = bf.HEADER.unpack_from(view, pos)
        end = pos + bf.LOG_OVERHEAD + length
        if end > size:
            break
        while due < len(aborted) and aborted[due][0] <= base + delta:
            open_aborts.add(aborted[due][1])
            due += 1
        control = bool(attributes & bf.CONTROL_FLAG)
        aborted_batch = bool(attributes & bf.TRANSACTIONAL_FLAG) and producer_id in open_aborts
        if control:
            open_aborts.discard(producer_id)
        out.append((base, base + delta, not control and not aborted_batch, pos, end))
        pos = end
    return out
