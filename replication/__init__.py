"""Partitions (the one path for appends and fetches, the high watermark, what readers may see) and in-process
replication: brokers, replica fetchers, the ISR, leader epochs and the controller (see docs/architecture.md).

Imports the log layer (engine.log), segments, the codec and engine.common; never the engine facade.
"""
