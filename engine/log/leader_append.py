"""A leader's append of one client batch in one call (the common case of UnifiedLog.append_as_leader): a lone
batch with no producer id, or its producer's next batch (engine.log.producer_state.next_batch), on a topic that is not
compacted, with no roll due. Everything that case changes is changed here, under the log's lock: the segment
write (segments.segment_appender.append_batch), the LEO and the flush that `flush.messages` asks for
(segments.local_log), the leader-epoch cache, the producer state. Anything else returns None with nothing done,
and the log's general path appends.

This module is the pure-Python twin; the native one (engine._native._segment_appender.LeaderAppender) keeps
the same state and answers with no Python frame between the call and the segment's write. They are the twin
"leader_append" of engine.record.twins; a log uses the side of its segment appenders' implementation.
Byte layout: none of its own (the segment's `.log` and indexes, the leader-epoch checkpoint when an epoch starts).
Crash policy: the segment appender's: a failed write is cut back; an OSError becomes KafkaStorageError naming the
log, as the general path's does.
Thread-safety: the log's lock is held from the LEO read to the producer-state update.
"""
from __future__ import annotations

from engine.record import batch_format as bf
from engine.record import twins


class LeaderAppender:
    """The one-call leader append of one UnifiedLog."""

    def __init__(self, log, info_type: type) -> None:
        self.log = log
        self.info = info_type

    def append(self, data, leader_epoch: int, client: bool):
        """The append's AppendInfo, or None with nothing done when the general path must append `data`
        (`client`: a client's append, whose producer state is checked; otherwise only batches without a producer
        id come here)."""
        log = self.log
        local = log.local
        config = local.config
        view = memoryview(data).cast("B")
        size = view.nbytes
        if config.compact or size > config.segment_bytes or config.leader_checks and not _stored_as_sent(config, view):
            return None
        with log.lock:
            append_time = log.clock.time_ms() if config.message_timestamp_type == "LogAppendTime" else -1
            first = local.log_end_offset
            ps = log.producer_state
            producer = ps.next_batch(data) if client else None
            try:
                done = local.append_batch(data, first, leader_epoch, append_time, config.max_message_bytes, log.dir,
                                          producer)
            except OSError as exc:
                raise log.storage_error("append", exc) from exc
            if done is None:
                return None
            end, max_ts, offset_of_max = done
            log.leader_epochs.assign(leader_epoch, first)
            if producer is not None:
                ps.append_next(producer, first, end - 1, max_ts)
            ps.map_end_offset = end
            return tuple.__new__(self.info, (first, end - 1, max_ts, offset_of_max, append_time, 1, size, False,
                                             leader_epoch))


def _stored_as_sent(config, view: memoryview) -> bool:
    """Whether the leader stores this batch as sent although the topic checks batches: no timestamp bounds, and the
    batch already in the topic's codec (a batch too short to say goes to the general path, which refuses it)."""
    return (config.timestamp_bounds is None and view.nbytes >= bf.HEADER_SIZE
            and not bf.reencoded(view[bf.ATTRIBUTES_OFFSET + 1], config.target_compression[0]))


def _native() -> type:
    from engine._native import _segment_appender
    return _segment_appender.LeaderAppender


# (the side to use is the segment appender's: engine.log.unified_log asks for the same implementation)
twins.register("leader_append", python=lambda: LeaderAppender, native=_native)

