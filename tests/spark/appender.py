"""A writer in another process, for tests/spark/test_spark_stream.py: appends numbered records to topic `t` of a
log directory for a bounded time (or count), with a short high-watermark checkpoint interval so readers in other
processes see them soon, then closes cleanly and prints how many it wrote."""
from __future__ import annotations

import sys
import time

import engine


def append(path: str, first: int, count: int, seconds: float) -> int:
    with engine.open(path, hw_checkpoint_interval_ms=100) as e:
        p = e.producer(linger_ms=5)
        deadline = time.monotonic() + seconds
        n = first
        while n < first + count and time.monotonic() < deadline:
            p.send("t", key=b"%d" % (n % 7), value=b"%d" % n)
            n += 1
            if n % 50 == 0:
                p.flush()
                time.sleep(0.01)
        p.flush()
    return n


if __name__ == "__main__":
    print(append(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
