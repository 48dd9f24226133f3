"""Writes staged by processes that cannot open the engine, applied by the process that owns the directory.

Spark's tasks, and the Python worker where Spark runs a sink's commit, are other processes than the application's:
they cannot take the directory's lock. They stage rows as files of Kafka batches (staged_batches), and ask the
owner to append them
(requester): a small protocol in which every change of a request's state is one rename by the side that owns it, a
request is answered within its timeout whatever happens to the owner, and a job lands once (apply: in one
transaction that also records the job). `python -m engine.staged_writes <path> <timeout ms>` (the JVM sink's
commit) is `requester.commit` with the request on stdin.
Modules: layout (files, request checks, errors across the process boundary), staged_batches (a task's file of
batches), queue (the owner's `StagedWrites`, one per open engine), requester (`request`, `commit`), apply (one job in
one transaction), __main__ (the entry point).
"""
