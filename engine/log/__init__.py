"""The log layer: one partition's log as Kafka's UnifiedLog keeps it (the segments with the producer state and the
leader epochs, kept in step under one lock), its reads and appends (each with a native twin), the producer-state
snapshots, the read_committed filter, and the log directory that holds many logs: the log manager (checkpoints,
lazy loading, the background thread) and the cleaner's thread (see docs/architecture.md).

Imports segments, the codec and engine.common; never txn, replication or the engine facade.
"""
