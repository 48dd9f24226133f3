"""A child for tests/crash/test_replicated_kill.py: three in-process brokers with their fetcher threads, one
RF=3 topic (min.insync.replicas=2), a producer with acks='all' printing `ACK <partition> <offset> <value>` for
each acknowledged record, while a thread fails and restarts random brokers (unless `steady`: then the followers
stay linked to the native replica fetcher), until it is killed."""
from __future__ import annotations

import contextlib
import random
import sys
import threading

import engine
from engine.common.errors import KafkaError


def main(directory: str, seed: int, steady: bool) -> None:
    rng = random.Random(seed)
    e = engine.open(directory, brokers=3)
    e.create_topic("r", partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    stop = threading.Event()

    def chaos():
        chaos_rng = random.Random(seed + 1)
        while not stop.wait(chaos_rng.uniform(0.01, 0.08)):
            with contextlib.suppress(KafkaError):  # a broker changed state meanwhile: the next tick decides
                down = [b for b in range(3) if not e._brokers[b].alive]
                if down and chaos_rng.random() < 0.6:
                    e.restart_broker(chaos_rng.choice(down))
                elif len(down) < 2:
                    e.fail_broker(chaos_rng.choice([b for b in range(3) if e._brokers[b].alive]))

    if not steady:
        threading.Thread(target=chaos, daemon=True).start()
    producer = e.producer(acks="all", linger_ms=0, request_timeout_ms=200, delivery_timeout_ms=2_000)
    for i in range(10**9):
        value = b"%d-%d" % (seed, i)
        try:
            md = producer.send("r", value, partition=rng.randrange(2)).get(timeout=5)
        except KafkaError:
            continue
        sys.stdout.write(f"ACK {md.partition} {md.offset} {value.decode()}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["steady"])
