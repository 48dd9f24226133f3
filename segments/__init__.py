"""The storage layer: segments, indexes, the segment set, loading and recovery, a partition's local log,
the checkpoint files (see docs/architecture.md).

Imports only engine.common and the codec (engine.record, engine._native) below it.
"""
