"""One share-partition: the delivery state of a topic partition's records for one share group (KIP-932's
SharePartition), kept by the share group coordinator (engine.groups.share_group_coordinator).

The share-partition start offset (SPSO) is the first offset whose delivery is not finished; every offset from it to
the end offset (SPEO, exclusive: the next offset never acquired) is in flight, in one of Kafka's record states:
AVAILABLE (0: to be delivered), ACQUIRED (1: delivered to one member, locked until its acquisition lock times out),
ACKNOWLEDGED (2) or ARCHIVED (4: rejected, past the delivery count limit, or no record at that offset). A record is
acquired by one member at a time, which raises its delivery count; that member acknowledges it with Kafka's types
(GAP 0 and REJECT 3 archive it, ACCEPT 1 acknowledges it, RELEASE 2 makes it available again; RENEW 4, Kafka 4.2's,
restarts its acquisition lock and leaves it acquired) or lets its lock time out (available again). A record released
or timed out once its delivery count reached the limit is archived. The SPSO moves past every leading acknowledged or
archived offset; a log start offset past it (retention, deleted records) moves it too. Acquisition is by whole
batches of the log, as Kafka's default acquire mode (batch_optimized, the only one ShareFetch v1 has) does:
`max_records` (the fetch's MaxRecords) stops it before the next batch once reached; in Kafka 4.2's record_limit mode
(`strict`) it stops at exactly `max_records`, within a batch (the rest of that batch is acquired by later fetches).
No new batch is taken once `max_in_flight` offsets (group.share.partition.max.record.locks) are in flight (only
available records are acquired again then); offsets between two batches hold no record and are archived at once.

Persisted state (engine.groups.share_state_records): the SPSO and runs of (first, last, state, delivery count) of the
offsets in flight; an acquired record is written as available (an acquisition is not persisted, as in Kafka), so after
a restart it is delivered again with the delivery count it had when last written.
Thread-safety: none; the share group coordinator's lock serialises every call.
"""
from __future__ import annotations

from typing import NamedTuple

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_ACK_STATE = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, REJECT: ARCHIVED}
DONE = (ACKNOWLEDGED, ARCHIVED)  # the states whose delivery is over


class Acquired(NamedTuple):
    """Offsets first_offset..last_offset acquired by one member, delivered `delivery_count` times (this time included)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    """A run of in-flight offsets with one state and delivery count (ShareSnapshotValue's StateBatch)."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


class SharePartition:
    """The in-flight offsets of one share-partition from `start` (see the module docstring)."""

    def __init__(self, start: int, delivery_limit: int, max_in_flight: int) -> None:
        self.start = start
        self.delivery_limit, self.max_in_flight = delivery_limit, max_in_flight
        self._state = bytearray()          # by offset - start
        self._count: list[int] = []        # delivery counts
        self._owner: list[str | None] = []  # the acquiring member of an ACQUIRED offset
        self._deadline: list[int] = []     # its acquisition lock's deadline (ms on the coordinator's clock)

    @property
    def end(self) -> int:
        return self.start + len(self._state)

    @classmethod
    def restore(cls, start: int, batches: list[StateBatch], delivery_limit: int, max_in_flight: int) -> SharePartition:
        """The share-partition a persisted state describes; offsets no batch names are available, never delivered."""
        sp = cls(start, delivery_limit, max_in_flight)
        for b in sorted(batches):
            if b.last_offset < sp.end or b.first_offset > b.last_offset:
                continue
            if b.first_offset > sp.end:
                sp._extend(b.first_offset - sp.end, AVAILABLE, 0)
            state = ARCHIVED if b.state == ARCHIVED else ACKNOWLEDGED if b.state == ACKNOWLEDGED else AVAILABLE
            sp._extend(b.last_offset + 1 - max(b.first_offset, sp.end), state, max(0, b.delivery_count))
        sp._advance()
        return sp

    def _extend(self, n: int, state: int, count: int, owner: str | None = None, deadline: int = 0) -> None:
        self._state.extend(bytes((state,)) * n)
        self._count.extend([count] * n)
        self._owner.extend([owner] * n)
        self._deadline.extend([deadline] * n)

    def fetch_offset(self) -> int:
        """Where the next acquisition reads the log: the first available offset in flight, else the end."""
        i = self._state.find(AVAILABLE)
        return self.end if i < 0 else self.start + i

    def can_acquire(self) -> bool:
        return self._state.find(AVAILABLE) >= 0 or len(self._state) < self.max_in_flight

    def move_start(self, log_start: int) -> bool:
        """The log's start offset moved to `log_start`: the offsets before it are gone, in flight or not."""
        if log_start <= self.start:
            return False
        drop = min(log_start - self.start, len(self._state))
        self._drop(drop)
        self.start = log_start
        return True

    def acquire(self, member: str, batches: list[tuple[int, int, bool]], max_records: int, now: int,
                lock_ms: int, strict: bool = False) -> list[Acquired]:
        """Acquire for `member` the available offsets of `batches` ((base offset, last offset, deliverable) of each
        batch the log holds from fetch_offset(), in order), for `lock_ms`, batch by batch until `max_records` are
        acquired (`strict`: exactly up to `max_records`, within a batch); the runs acquired. A batch that is not
        deliverable (a control batch, an aborted transaction's under read_committed) is archived instead."""
        got: list[tuple[int, int]] = []  # (offset, delivery count)
        deadline = now + lock_ms
        for base, last, deliver in batches:
            if len(got) >= max_records:
                break
            lo = max(base, self.start)
            if last < lo:
                continue
            for o in range(lo, min(last + 1, self.end)):
                i = o - self.start
                if self._state[i] == AVAILABLE:
                    if not deliver:
                        self._state[i] = ARCHIVED
                    elif not strict or len(got) < max_records:
                        self._set_acquired(i, member, deadline)
                        got.append((o, self._count[i]))
            if last < self.end:
                continue
            if len(self._state) >= self.max_in_flight or (strict and deliver and len(got) >= max_records):
                break
            if base > self.end:  # no record between the last batch and this one
                self._extend(base - self.end, ARCHIVED, 0)
            first = self.end
            if deliver:
                upto = min(last, first + max_records - len(got) - 1) if strict else last
                self._extend(upto + 1 - first, ACQUIRED, 1, member, deadline)
                got.extend((o, 1) for o in range(first, upto + 1))
            else:
                self._extend(last + 1 - first, ARCHIVED, 0)
        self._advance()
        return _runs(got)

    def _set_acquired(self, i: int, member: str, deadline: int) -> None:
        self._state[i] = ACQUIRED
        self._count[i] += 1
        self._owner[i] = member
        self._deadline[i] = deadline

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]], renewed: int = 0) -> str | None:
        """Apply `member`'s acknowledgement batches ((first, last, types): one type for every offset, or one per
        offset; in ascending order, not overlapping) all or none: None when applied, else why they were refused
        (INVALID_RECORD_STATE). RENEW moves a lock's deadline to `renewed`."""
        previous = self.start - 1
        for first, last, types in batches:
            why = self._refusal(member, first, last, types)
            if why is None and first <= previous:
                why = f"acknowledgement batch {first}..{last} overlaps or precedes the one before it"
            if why is not None:
                return why
            previous = last
        for first, last, types in batches:
            lo = first - self.start
            for i in range(lo, last - self.start + 1):
                kind = types[0] if len(types) == 1 else types[i - lo]
                if kind == RELEASE:
                    self._release(i)
                elif kind == RENEW:
                    self._deadline[i] = renewed
                else:
                    self._state[i] = _ACK_STATE[kind]
                    self._owner[i] = None
        self._advance()
        return None

    def _refusal(self, member: str, first: int, last: int, types: list[int]) -> str | None:
        if first > last or (len(types) != 1 and len(types) != last - first + 1):
            return f"acknowledgement batch {first}..{last} has {len(types)} types"
        if any(kind not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for kind in types):
            return f"acknowledgement batch {first}..{last} has a type that is none of 0 to 4"
        if first < self.start or last >= self.end:
            return f"offsets {first}..{last} are not in flight ({self.start}..{self.end - 1})"
        for i in range(first - self.start, last - self.start + 1):
            if self._state[i] != ACQUIRED or self._owner[i] != member:
                return f"offset {self.start + i} is not acquired by this member"
        return None

    def _release(self, i: int) -> None:
        self._state[i] = ARCHIVED if self._count[i] >= self.delivery_limit else AVAILABLE
        self._owner[i] = None

    def release(self, member: str | None = None, now: int | None = None) -> bool:
        """Release the records `member` acquired (None: every member's), or with `now` only those whose lock timed
        out by then; True if any was."""
        changed = False
        for i, state in enumerate(self._state):
            if state == ACQUIRED and (member is None or self._owner[i] == member) and \
                    (now is None or self._deadline[i] <= now):
                self._release(i)
                changed = True
        if changed:
            self._advance()
        return changed

    def next_deadline(self) -> int | None:
        """The earliest acquisition lock deadline, None when nothing is acquired."""
        found = [d for s, d in zip(self._state, self._deadline) if s == ACQUIRED]
        return min(found) if found else None

    def _advance(self) -> None:
        n = 0
        for state in self._state:
            if state not in DONE:
                break
            n += 1
        if n:
            self._drop(n)
            self.start += n

    def _drop(self, n: int) -> None:
        del self._state[:n], self._count[:n], self._owner[:n], self._deadline[:n]

    def state_batches(self) -> list[StateBatch]:
        """The offsets in flight as persisted: runs of one state and count, acquired ones written as available."""
        out: list[StateBatch] = []
        for i, state in enumerate(self._state):
            state = AVAILABLE if state == ACQUIRED else state
            o, count = self.start + i, self._count[i]
            if out and out[-1].state == state and out[-1].delivery_count == count and out[-1].last_offset == o - 1:
                out[-1] = out[-1]._replace(last_offset=o)
            else:
                out.append(StateBatch(o, o, state, count))
        return out

    def states(self) -> list[tuple[int, int, int, str | None]]:
        """(offset, state, delivery count, owner) of every offset in flight (for tests and describe)."""
        return [(self.start + i, s, self._count[i], self._owner[i]) for i, s in enumerate(self._state)]


def runs(pairs) -> list[tuple[int, int, object]]:
    """(offset, value) pairs in ascending offset order as (first, last, value) runs of consecutive offsets with one
    value (acquired offsets by delivery count here; a member's acknowledgements by type in the share consumer)."""
    out: list[list] = []
    for offset, value in pairs:
        if out and out[-1][1] == offset - 1 and out[-1][2] == value:
            out[-1][1] = offset
        else:
            out.append([offset, offset, value])
    return [(first, last, value) for first, last, value in out]


def _runs(got: list[tuple[int, int]]) -> list[Acquired]:
    return [Acquired(first, last, count) for first, last, count in runs(got)]
