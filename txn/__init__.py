"""A partition's log with its producer state and snapshots (UnifiedLog); later transactions' per-partition
state and the last stable offset (see docs/architecture.md).

Imports segments, the codec and engine.common; never replication or the engine facade.
"""
