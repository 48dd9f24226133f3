"""A follower's append of a replica's batches in one call (the common case of UnifiedLog.append_as_follower): whole,
CRC-valid data batches (no marker) above the log end, in increasing offset order, that fit the active segment with
no roll due. Everything that case changes is changed in the call, under the log's lock: the segment write with its
index entries (segments.segment_appender), the LEO and the flush that `flush.messages` asks for (segments.local_log),
the leader-epoch cache, the producer state (engine.log.producer_state.ProducerStateManager.update_data). Anything else
returns None with nothing done, and the log's general path appends, raising the precise error where there is one.

The native twin (engine._native._segment_appender.FollowerAppender) does this with no Python frame between the call
and the segment's write, beyond one producer-state call per batch that has a producer id. This pure-Python twin
always leaves the append to the general path, which is that path in Python; they are the twin "follower_append" of
engine.record.twins, and a log uses the side of its segment appenders' implementation.
Byte layout, crash policy and thread-safety: those of engine.log.leader_append, whose segment write this one shares (no
bytes of its own; a failed write cut back, an OSError raised as KafkaStorageError naming the log; the log's lock held
from the LEO read to the producer-state update).
"""
from __future__ import annotations

from engine.record import twins


class FollowerAppender:
    """The one-call follower append of one UnifiedLog (this twin: always the general path)."""

    def __init__(self, log, info_type: type) -> None:
        """Made as the native twin is (the log, its AppendInfo type); this one needs neither."""

    def append(self, data):
        """The append's AppendInfo, or None with nothing done when the general path must append `data`."""
        return None


def _native() -> type:
    from engine._native import _segment_appender
    return _segment_appender.FollowerAppender


# (the side to use is the segment appender's: engine.log.unified_log asks for the same implementation)
twins.register("follower_append", python=lambda: FollowerAppender, native=_native)
