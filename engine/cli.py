"""The `kafkalog` command (also `python -m engine`)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

import engine

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _demo(args: argparse.Namespace) -> int:
    """Show the build, then encode and decode `--records` records with every codec and verify them."""
    from engine import codec as selector

    native = selector.load("cython") if engine.IMPL == "cython" else None
    hw = native.crc32c_hardware_available() if native else False
    print(f"kafkalog {engine.__version__}: codec core = {engine.IMPL}"
          f" (CRC-32C {'SSE4.2 hardware' if hw else 'table-driven'})")
    os.makedirs(args.data, exist_ok=True)
    print(f"log directory: {os.path.abspath(args.data)}")
    n, per_batch = args.records, 1000
    records = [(b"key-%08d" % (i % 100_000), b"value-%08d-" % i + b"x" * 84, None, 1_700_000_000_000 + i)
               for i in range(n)]
    raw = sum(len(k) + len(v) for k, v, _, _ in records)
    print(f"{n:,} records, {raw / 1e6:.1f} MB of keys+values, {per_batch} records per batch")
    for codec in CODECS:
        t0 = time.perf_counter()
        batches = [engine.encode_batch(records[i:i + per_batch], base_offset=i, compression=codec,
                                       partition_leader_epoch=0) for i in range(0, n, per_batch)]
        t1 = time.perf_counter()
        log = b"".join(batches)
        decoded = sum(len(b.records()) for b in engine.iter_batches(log))
        t2 = time.perf_counter()
        cols = engine.decode_columnar(log)
        t3 = time.perf_counter()
        if decoded != n or len(cols) != n or memoryview(cols.offsets)[-1] != n - 1:
            print(f"  {codec}: MISMATCH after decode", file=sys.stderr)
            return 1
        print(f"  {codec:>6}: {len(log) / 1e6:6.1f} MB on disk | encode {n / (t1 - t0) / 1e6:5.2f} M rec/s"
              f" | decode {n / (t2 - t1) / 1e6:5.2f} M rec/s | columnar {n / (t3 - t2) / 1e6:6.2f} M rec/s")
    print("every record decoded back intact (objects and columns)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkalog", description=engine.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kafkalog {engine.__version__} ({engine.IMPL})")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="show the build and exercise the codec on an embedded default")
    demo.add_argument("--data", default="./data", help="log directory (default ./data)")
    demo.add_argument("--records", type=int, default=200_000, help="records to encode and decode")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return args.func(args)
