"""The log layer: segments, indexes, rolling, flush, retention, recovery (see DESIGN.md §2).

Imports only the leaves (engine._native, engine.record.records, engine.common.errors) below it.
"""
