"""The child process of the SIGKILL crash test: appends batches to a log directory in a loop
with flush.messages=1 and prints `ACK <first> <last> <crc>` after each append returns."""
from __future__ import annotations

import random
import sys

import engine
from engine.log.log_manager import LogManager
from engine.segments.log_config import LogConfig


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    config = LogConfig.from_dict({"flush.messages": 1, "segment.bytes": 64 * 1024, "index.interval.bytes": 512})
    manager = LogManager(directory, configs=lambda topic: config)
    log = manager.create_log("crash", 0)  # (the existing one, loaded, if the directory has it)
    while True:
        n = rng.randint(1, 20)
        batch = engine.encode_batch([(b"k%d" % rng.randrange(100), rng.randbytes(rng.randint(0, 300)), None,
                                      1_700_000_000_000 + i) for i in range(n)],
                                    compression=rng.choice(["none", "lz4", "zstd"]))
        info = log.append_as_leader(batch)
        stored = next(iter(engine.iter_batches(log.read(info.first_offset, max_bytes=1).records)))
        sys.stdout.write(f"ACK {info.first_offset} {info.last_offset} {stored.crc}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
