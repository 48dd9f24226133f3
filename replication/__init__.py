"""Partitions (the one path for appends and fetches, the high watermark, what readers may see), the log
directory and its checkpoints; later in-process followers, ISR and leader epochs (see docs/architecture.md).

Imports txn, segments, the codec and engine.common; never the engine facade.
"""
