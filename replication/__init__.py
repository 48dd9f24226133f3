"""Partitions (the one path for appends and fetches, the high watermark, what readers may see), the log
directory and its checkpoints, and in-process replication: brokers, replica fetchers, the ISR, leader epochs
and the controller (see docs/architecture.md).

Imports txn, segments, the codec and engine.common; never the engine facade.
"""
