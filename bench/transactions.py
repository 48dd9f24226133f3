"""Transactions: transactional produce at 100 and at 10,000 records per transaction beside the same idempotent
producer without transactions (each commit costs a PrepareCommit and a CompleteCommit in __transaction_state and
a marker per partition), and consuming the result with read_committed beside read_uncommitted (the consumer
filters aborted transactions with the fetch's aborted list; half of the transactions here are aborted, so
read_committed returns half the records while reading the same batches)."""
from __future__ import annotations

import tempfile

import engine
from bench.clients import VALUE, _values
from bench.runner import Contender, Workload


def workloads(quick: bool, scratch: str) -> list[Workload]:
    n = 20_000 if quick else 200_000
    values = _values(n)
    keys = [b"key-%05d" % i for i in range(1000)]
    e = engine.open(tempfile.mkdtemp(dir=scratch))
    e.create_topic("t", partitions=3)

    plain = e.producer(linger_ms=5)  # made once, as the transactional ones are: neither call pays a producer's start

    def idempotent():
        for i in range(n):
            plain.send("t", values[i % 1000], keys[i % 1000])
        plain.flush()  # as a commit does

    def transactional(per_txn: int):
        producer = e.producer(transactional_id=f"bench-{per_txn}", linger_ms=5)
        producer.init_transactions()

        def call():
            for start in range(0, n, per_txn):
                producer.begin_transaction()
                for i in range(start, min(n, start + per_txn)):
                    producer.send("t", values[i % 1000], keys[i % 1000])
                producer.commit_transaction()
        return call

    rows = [Workload("transactions", f"per-record send() of {n // 1000}k x {VALUE} B records, {per} records per "
                                     f"transaction (3 partitions)", n, n * VALUE,
                     [Contender("kafkalog", transactional(per)),
                      Contender("kafkalog, idempotent producer without transactions", idempotent)])
            for per in (100, 10_000)]
    rows[-1].close = e.close
    return rows + [_consume(n, values, scratch)]


def _consume(n: int, values: list[bytes], scratch: str) -> Workload:
    """A log of 1,000-record transactions, every other one aborted, read from the start."""
    e = engine.open(tempfile.mkdtemp(dir=scratch))
    e.create_topic("r", partitions=1)
    p = e.producer(transactional_id="bench-read", linger_ms=5)
    p.init_transactions()
    for start in range(0, n, 1000):
        p.begin_transaction()
        for i in range(start, min(n, start + 1000)):
            p.send("r", values[i % 1000])
        p.commit_transaction() if (start // 1000) % 2 == 0 else p.abort_transaction()
    p.close()

    def read(isolation: str, expected: int):
        def call():
            c = e.consumer("r", auto_offset_reset="earliest", consumer_timeout_ms=0, isolation_level=isolation,
                           max_poll_records=10_000)
            got = 0
            for record in c:
                got += len(record.value)
            assert got == expected * VALUE
        return call

    committed = sum(min(1000, n - s) for s in range(0, n, 2000))
    return Workload("transactions", f"iterate a {n // 1000}k-record log of 1,000-record transactions (half aborted), "
                                    f"reading each value", n, n * VALUE,
                    [Contender("kafkalog, read_committed", read("read_committed", committed)),
                     Contender("kafkalog, read_uncommitted", read("read_uncommitted", n))], close=e.close)
