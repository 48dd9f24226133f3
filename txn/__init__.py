"""Producer state, snapshots, transactions and the last stable offset (see DESIGN.md §2).

Imports segments and the leaves; never replication or the engine facade.
"""
