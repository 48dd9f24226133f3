"""In-process leader and follower replicas, high watermark, leader epochs (see DESIGN.md §2).

Imports txn, segments and the leaves; never the engine facade.
"""
