"""A partition's log with its producer state (Kafka's UnifiedLog over LocalLog + ProducerStateManager).

Client appends are checked against the producer state before anything is written: a batch that
repeats one of its producer's last 5 batches is not appended and the original offsets are returned
(`AppendInfo.duplicate`); an old epoch or a sequence gap raises. Batches from an idempotent producer
must come one per append, as Kafka requires.
On-disk: the segments (segments.log) plus `<offset>.snapshot` files, written at every roll (the
state up to the new segment's base) and on close (up to the log end), deleted with their segment.
Crash policy: on open the state is the newest usable snapshot plus a replay of the log after it
(kafka-format.md §7 step 7); a snapshot above the log end (the tail was lost) is deleted first.
Thread-safety: as segments.log.Log; producer state is only touched under the log's lock.
"""
from __future__ import annotations

from engine import codec
from engine.errors import InvalidRecordError
from segments.log import AppendInfo, Log
from txn.producer_state import ProducerStateManager

DEFAULT_EXPIRATION_MS = 86_400_000
REPLAY_CHUNK = 8 << 20


class UnifiedLog(Log):
    def __init__(self, *args, producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, **kwargs) -> None:
        self.producer_state: ProducerStateManager | None = None
        super().__init__(*args, **kwargs)
        self.producer_state = ProducerStateManager(self.fs, self.dir, self.clock, producer_id_expiration_ms)
        self._rebuild_producer_state(self.recovery.clean_shutdown)

    # --- producer state on load and truncation -----------------------------------------------
    def _rebuild_producer_state(self, clean_shutdown: bool) -> None:
        ps = self.producer_state
        ps.remove_stray_snapshots([s.base_offset for s in self.segments])
        end = self.log_end_offset
        if not ps.snapshot_offsets() and clean_shutdown:
            # Kafka's shortcut: a clean shutdown without snapshots had no producers to remember
            ps.load(self.log_start_offset, end)
            for seg in self.segments[-2:]:
                ps.map_end_offset = seg.base_offset
                ps.take_snapshot()
        else:
            start = ps.load(self.log_start_offset, end)
            self._replay(max(start if start is not None else 0, self.log_start_offset), end)
        ps.map_end_offset = end
        ps.take_snapshot()

    def _replay(self, offset: int, end: int) -> None:
        """Feed the batches in [offset, end) to the producer state, as a follower append would."""
        while offset < end:
            data = self.read(offset, REPLAY_CHUNK)
            last = offset
            for batch in codec.iter_batches(data.records, source=self.dir):
                if batch.next_offset <= offset:
                    continue
                if batch.producer_id >= 0:
                    self.producer_state.update(batch, batch.base_offset, batch.max_timestamp)
                last = batch.next_offset
            if last == offset:
                break  # nothing readable past this point (cannot happen after recovery)
            offset = last

    def _after_truncation(self) -> None:
        if self.producer_state is not None:
            self._rebuild_producer_state(False)

    def _after_roll(self, new_base: int) -> None:
        self.producer_state.map_end_offset = new_base
        self.producer_state.take_snapshot()

    def _after_segments_deleted(self, bases: list[int]) -> None:
        for base in bases:
            self.producer_state.delete_snapshot(base)

    # --- appends ------------------------------------------------------------------------------
    def append_as_leader(self, data, *, leader_epoch: int = 0, allow_control: bool = False) -> AppendInfo:
        """Append a client's batches (see Log.append_as_leader) after the producer-state checks."""
        every = list(codec.iter_batches(data, source=self.dir))
        batches = [b for b in every if b.producer_id >= 0]
        with self._lock:
            if batches:
                if len(every) > 1:
                    raise InvalidRecordError("an idempotent producer's append must hold exactly one batch",
                                             file=self.dir)
                batch = batches[0]
                if not batch.is_control:
                    dup = self.producer_state.find_duplicate(batch)
                    if dup is not None:
                        return AppendInfo(dup.first_offset, dup.last_offset, -1, dup.last_offset, -1, 0, 0,
                                          duplicate=True)
                    self.producer_state.validate(batch, self.dir)
            info = super().append_as_leader(data, leader_epoch=leader_epoch, allow_control=allow_control)
            if batches:
                ts = info.log_append_time if info.log_append_time >= 0 else batches[0].max_timestamp
                self.producer_state.update(batches[0], info.first_offset, ts)
            self.producer_state.map_end_offset = self.log_end_offset
            return info

    def append_as_follower(self, data) -> AppendInfo:
        """Append a replica's batches as they are, keeping producer state in step."""
        with self._lock:
            info = super().append_as_follower(data)
            for batch in codec.iter_batches(data, source=self.dir):
                if batch.producer_id >= 0:
                    self.producer_state.update(batch, batch.base_offset, batch.max_timestamp)
            self.producer_state.map_end_offset = self.log_end_offset
            return info

    def remove_expired_producers(self) -> int:
        with self._lock:
            return self.producer_state.remove_expired(self.clock.time_ms())

    def close(self) -> None:
        """Snapshot the producer state at the log end, then close (a clean shutdown of this log)."""
        with self._lock:
            self.producer_state.map_end_offset = self.log_end_offset
            self.producer_state.take_snapshot()
            super().close()
