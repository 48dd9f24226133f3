"""A share consumer over an Engine (KIP-932's queues, Kafka's KafkaShareConsumer in process): a member of a share
group that polls records acquired for it and acknowledges them one by one.

`poll(timeout_ms)` first sends what the previous poll left to acknowledge (implicit mode: every record it returned,
as ACCEPT; explicit mode: what `acknowledge()` marked, and every record of that poll must have been marked), then
acquires up to max_poll_records records of its assigned partitions, waiting up to `timeout_ms` for some (an append
wakes it; it looks again at least every `RELEASE_LOOK_MS` of the engine's clock, for records another member released
or whose lock timed out). `commit_sync()` sends the marked acknowledgements now and returns each partition's outcome;
`close()` sends them, leaves the group, and closes the share session, which releases what the member still holds.
Records are (topic, partition, offset, timestamp, key, value, headers, delivery_count), each delivered within its
acquisition lock (share.record.lock.duration.ms); one not acknowledged in time goes to another poll, perhaps another
member's, with its delivery count raised.
Membership: the engine's heartbeat thread sends the member's ShareGroupHeartbeat at the group's interval, and a poll
sends one at once when the member has nothing assigned or the coordinator holds a new assignment for it (in one
process it can tell); a member fenced or removed (its session timed out) joins again with epoch 0 at its next
heartbeat.
Byte layout: none (memory only). Crash policy: none of its own: what was acknowledged is what the share group
coordinator persisted before answering.
Threads: a share consumer is for one thread at a time (the heartbeat thread only updates its assignment, under its
lock); the engine under it is thread-safe.
"""
from __future__ import annotations

import contextlib
import enum
import threading
import uuid
from typing import Callable, Iterable, NamedTuple

from engine.common.errors import (
    FencedMemberEpochError,
    IllegalStateError,
    InvalidConfigurationError,
    InvalidShareSessionEpochError,
    KafkaError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
    not_supported_yet,
)
from engine.common.structs import TopicPartition
from engine.groups.share_group import ShareHeartbeat
from engine.groups.share_partition import runs
from engine.record import codec

RELEASE_LOOK_MS = 100


class AcknowledgeType(enum.IntEnum):
    """Kafka's AcknowledgeType: how a delivered record is acknowledged."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # (Kafka 4.2, KIP-1222: the record's acquisition lock starts again; it still needs one of the others)


class ShareRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: object
    value: object
    headers: list
    delivery_count: int


class ShareConsumer:
    """A member of share group `group_id` (see the module docstring). Options: acknowledgement_mode ('implicit' or
    'explicit'), share_acquire_mode ('batch_optimized': whole batches, max_poll_records a soft limit; 'record_limit':
    never more than max_poll_records records a poll, Kafka 4.2's), max_poll_records, fetch_max_bytes, client_id,
    key_deserializer, value_deserializer."""

    def __init__(self, engine, group_id: str, topics: Iterable[str] = (), *, acknowledgement_mode: str = "implicit",
                 share_acquire_mode: str = "batch_optimized", max_poll_records: int = 500,
                 fetch_max_bytes: int = 52_428_800, client_id: str = "kafkalog-share",
                 key_deserializer: Callable | None = None, value_deserializer: Callable | None = None) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidConfigurationError("a share consumer needs a group_id")
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise InvalidConfigurationError(f"acknowledgement_mode={acknowledgement_mode!r}: implicit or explicit")
        if share_acquire_mode not in ("batch_optimized", "record_limit"):
            raise InvalidConfigurationError(f"share_acquire_mode={share_acquire_mode!r}: batch_optimized or "
                                            f"record_limit")
        for name, value in (("max_poll_records", max_poll_records), ("fetch_max_bytes", fetch_max_bytes)):
            if type(value) is not int or value < 1:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= 1")
        self.engine, self.group_id, self.client_id = engine, group_id, client_id
        self.explicit = acknowledgement_mode == "explicit"
        self.record_limit = share_acquire_mode == "record_limit"
        self.max_poll_records, self.fetch_max_bytes = max_poll_records, fetch_max_bytes
        self._key, self._value = key_deserializer, value_deserializer
        self.member_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._epoch = 0
        self._topics: tuple[str, ...] = ()
        self._assignment: dict[str, frozenset[int]] = {}  # topic id -> partitions
        self._session_epoch = 0  # the next share request's epoch (0: open a session)
        self._session: set[tuple[str, int]] = set()
        self._delivered: dict[tuple[str, int, int], ShareRecord] = {}  # the last poll's, not yet marked
        self._marked: dict[tuple[str, int], dict[int, int]] = {}  # (topic id, partition) -> offset -> type
        self._names: dict[str, str] = {}  # topic id -> name
        self._interval_ms = 5_000  # the group's heartbeat interval (from its first heartbeat on)
        self._got: dict = {}  # what the last share request acquired
        self.closed = False
        if isinstance(topics, str) or list(topics):
            self.subscribe(topics)

    # --- membership ----------------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        self._check_open()
        given = [topics] if isinstance(topics, str) else list(topics)
        if not given:  # (Kafka's consumers take it as unsubscribe())
            raise not_supported_yet("a share consumer's unsubscribe (subscribe to no topic)")
        if isinstance(topics, str) or not all(isinstance(t, str) and t for t in given):
            raise InvalidConfigurationError(f"subscribe({topics!r}): a list of topic names")
        names = tuple(sorted(set(given)))
        self._topics = names
        self._beat(names)
        self.engine.heartbeats.add(self, self._interval_ms, self._heartbeat)

    def subscription(self) -> set[str]:
        return set(self._topics)

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return {TopicPartition(self._name(t), p) for t, ps in self._assignment.items() for p in ps}

    def _heartbeat(self) -> None:
        if not self.closed:
            self._beat(None)

    def _beat(self, topics: tuple[str, ...] | None) -> None:
        with self._lock:
            epoch = self._epoch
            if epoch == 0:
                topics = self._topics
        try:
            answer = self.engine.share_groups.heartbeat(ShareHeartbeat(
                self.group_id, self.member_id, epoch, topic_names=list(topics) if topics is not None else None,
                client_id=self.client_id))
        except (FencedMemberEpochError, UnknownMemberIdError):
            with self._lock:
                self._epoch = 0  # join again at the next heartbeat
            return
        with self._lock:
            self._epoch = answer.member_epoch
            self._interval_ms = answer.heartbeat_interval_ms
            if answer.assignment is not None:
                self._assignment = dict(answer.assignment)

    def _name(self, topic_id: str) -> str:
        name = self._names.get(topic_id)
        if name is None:
            name = self._names[topic_id] = self.engine.admin.topic_named(topic_id) or topic_id
        return name

    # --- polling and acknowledging -------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0) -> list[ShareRecord]:
        """Acknowledge what the previous poll left (see the module docstring), then up to max_poll_records records
        acquired for this member, waiting up to `timeout_ms` of the engine's clock for some."""
        self.begin_poll()
        clock = self.engine.clock
        deadline = clock.time_ms() + max(0, timeout_ms)
        event = self.engine.watch()
        try:
            while True:
                records = self.fetch_now()
                left = deadline - clock.time_ms()
                if records or left <= 0 or self.closed:
                    return records
                self.engine.wait_for_data(event, min(left, RELEASE_LOOK_MS))
                event.clear()
        finally:
            self.engine.unwatch(event)

    def begin_poll(self) -> None:
        """A poll's first step (the asyncio share consumer's too): check the last poll's records were acknowledged
        (explicit mode) or mark them accepted (implicit mode)."""
        self._check_open()
        if not self._topics:
            raise IllegalStateError("poll() before subscribe()")
        if self.explicit and self._delivered:
            raise IllegalStateError(f"{len(self._delivered)} records of the last poll are not acknowledged "
                                    f"(explicit acknowledgement mode)")
        if not self.explicit:
            for record in list(self._delivered.values()):
                self._mark(record, AcknowledgeType.ACCEPT)

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Mark a record the last poll returned (explicit mode); sent with the next poll, commit_sync or close. RENEW
        (sent by commit_sync) keeps the record acquired for another lock duration: it still needs one of the other
        types before the next poll."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() is for the explicit acknowledgement mode")
        if (record.topic, record.partition, record.offset) not in self._delivered:
            raise IllegalStateError(f"{record.topic}-{record.partition} offset {record.offset} is not a record of "
                                    f"the last poll waiting for its acknowledgement")
        self._mark(record, AcknowledgeType(type))

    def _mark(self, record: ShareRecord, kind: int) -> None:
        if kind != AcknowledgeType.RENEW:
            del self._delivered[(record.topic, record.partition, record.offset)]
        topic_id = self.engine.admin.topic_id_of(record.topic)
        self._marked.setdefault((topic_id, record.partition), {})[record.offset] = kind

    def commit_sync(self) -> dict[TopicPartition, KafkaError | None]:
        """Send the marked acknowledgements now; each partition's outcome (None: all applied)."""
        self._check_open()
        out = self._send(fetch=False)
        return {TopicPartition(self._name(t), p): exc for (t, p), exc in out.items()}

    def _send(self, fetch: bool, final: bool = False, rejoined: bool = False):
        """One share request: the session step, the marked acknowledgements, and (with `fetch`) an acquisition (once
        more after joining again, when the member was no longer in the group)."""
        sg = self.engine.share_groups
        with self._lock:
            assigned = {(t, p) for t, ps in self._assignment.items() for p in ps}
        acks, self._marked = {key: [(first, last, [kind]) for first, last, kind in runs(sorted(marks.items()))]
                             for key, marks in self._marked.items()}, {}
        if not fetch and not acks and not final:
            return {}
        epoch = -1 if final else self._session_epoch
        if epoch == 0 and not fetch:
            return {}  # (no session yet, so nothing was delivered)
        add, forget = sorted(assigned - self._session), sorted(self._session - assigned)
        try:
            sg.session(self.group_id, self.member_id, epoch, add, forget, acknowledging_only=not fetch)
        except (ShareSessionNotFoundError, InvalidShareSessionEpochError, UnknownMemberIdError) as exc:
            self._session_epoch, self._session = 0, set()  # open a new session next time
            if isinstance(exc, UnknownMemberIdError) and not final:  # (removed from the group: it joins again)
                with self._lock:
                    self._epoch = 0
                self._beat(None)
                if fetch and not rejoined:
                    self._send(fetch, rejoined=True)
            return {key: exc for key in acks}  # (not applied: their records were released with the session)
        self._session = set(assigned)
        self._session_epoch = 0 if final else (epoch + 1 if epoch < 0x7FFFFFFF else 1)
        out = sg.acknowledge(self.group_id, self.member_id, acks) if acks else {}
        sg.release_partitions(self.group_id, self.member_id, forget)
        if final:
            sg.close_session(self.group_id, self.member_id)
        if fetch and assigned:
            self._got = sg.acquire(self.group_id, self.member_id, sorted(assigned), self.max_poll_records,
                                   self.fetch_max_bytes, strict=self.record_limit)
        return out

    def fetch_now(self) -> list[ShareRecord]:
        """One share request without waiting: the marked acknowledgements sent, then the records acquired. (A member
        with nothing assigned, or whose assignment changed, heartbeats first: a group's first heartbeats initialize
        its share-partitions and assign them at the next, and a member joining moves partitions between members.)"""
        with self._lock:
            unassigned = not self._assignment
        if unassigned or self.engine.share_groups.assignment_pending(self.group_id, self.member_id):
            self._beat(None)
        self._got = {}
        self._send(fetch=True)
        records = []
        for (topic_id, partition), got in sorted(self._got.items()):
            if isinstance(got, KafkaError):
                continue
            counts = {}
            for a in got.acquired:
                for o in range(a.first_offset, a.last_offset + 1):
                    counts[o] = a.delivery_count
            topic = self._name(topic_id)
            for batch in codec.iter_batches(got.records):
                if batch.is_control:
                    continue
                for r in batch:
                    count = counts.pop(r.offset, None)
                    if count is None:
                        continue
                    record = ShareRecord(topic, partition, r.offset, r.timestamp,
                                         self._key(r.key) if self._key and r.key is not None else r.key,
                                         self._value(r.value) if self._value and r.value is not None else r.value,
                                         list(r.headers or ()), count)
                    self._delivered[(topic, partition, r.offset)] = record
                    records.append(record)
            for o in counts:  # acquired offsets with no record (compacted away): acknowledged as gaps
                self._marked.setdefault((topic_id, partition), {})[o] = 0
        return records

    # --- lifecycle -----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("the share consumer is closed")
        self.engine.registry.check_open()

    def close(self) -> None:
        """Send the acknowledgements (implicit mode: every record of the last poll as ACCEPT), leave the group and
        close the share session (what the member still holds is released)."""
        if self.closed:
            return
        self.closed = True
        self.engine.heartbeats.remove(self)
        if self.engine.closed:
            return
        if not self.explicit:
            for record in list(self._delivered.values()):
                self._mark(record, AcknowledgeType.ACCEPT)
        try:
            if self._session_epoch:  # (a share session is open: it closes, with the last acknowledgements)
                self._send(fetch=False, final=True)
        finally:
            with self._lock:
                epoch, self._epoch = self._epoch, 0
            if epoch:
                with contextlib.suppress(UnknownMemberIdError, FencedMemberEpochError):  # (already removed)
                    self.engine.share_groups.heartbeat(ShareHeartbeat(self.group_id, self.member_id, -1))

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
