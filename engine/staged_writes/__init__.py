"""Writes staged by processes that cannot open the engine, applied by the process that owns the directory.

Spark's tasks, and the Python worker where Spark runs a sink's commit, are other processes than the application's:
they cannot take the directory's lock. They stage rows as files of Kafka batches (staged_batches), and ask the
owner to append them (engine.tools.staged_commit, the requester's side, above the engine it may open): a small
protocol in which every change of a request's state is one rename by the side that owns it, a request is answered
within its timeout whatever happens to the owner, and a job lands once (apply: in one transaction that also records
the job).
Modules: layout (files, request checks, errors across the process boundary), staged_batches (a task's file of
batches), queue (the owner's `StagedWrites`, one per open engine), apply (one job in one transaction). Nothing here
imports the engine: the owner is seen through `apply.Owner`.
"""
