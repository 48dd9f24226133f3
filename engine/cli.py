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
    _demo_log(args.data, records)
    return 0


def _demo_log(directory: str, records: list) -> None:
    """Append the records to a 3-partition topic in `directory` (a Kafka-format log directory)."""
    from segments.log_config import LogConfig
    from segments.log_manager import LogManager

    config = LogConfig.from_dict({"segment.bytes": 8 << 20})
    with LogManager(directory, configs=lambda topic: config) as manager:
        logs = [manager.create_log("demo", p) for p in range(3)]
        start = [lg.log_end_offset for lg in logs]
        t0 = time.perf_counter()
        for i in range(0, len(records), 1000):
            logs[(i // 1000) % 3].append_as_leader(engine.encode_batch(records[i:i + 1000], compression="lz4"))
        elapsed = time.perf_counter() - t0
        for lg in logs:
            lg.update_high_watermark(lg.log_end_offset)
        print(f"appended {len(records):,} records to topic 'demo' in {elapsed:.2f}s "
              f"({len(records) / elapsed / 1e6:.2f} M rec/s, lz4, 1000 records per batch)")
        for p, lg in enumerate(logs):
            print(f"  demo-{p}: offsets {start[p]}..{lg.log_end_offset - 1}, {len(lg.segments)} segment(s), "
                  f"{lg.size_in_bytes() / 1e6:.1f} MB")
    print(f"closed cleanly: {directory} is a Kafka log directory "
          f"(try: kafkalog dump-log --files {directory}/demo-0/00000000000000000000.index --verify-index-only)")


def _dump_log(args: argparse.Namespace) -> int:
    from engine import dump_log

    return dump_log.dump([f for f in args.files.split(",") if f], as_json=args.json, deep=args.deep_iteration,
                         print_data=args.print_data_log, verify_index_only=args.verify_index_only,
                         index_sanity_check=args.index_sanity_check, base_offset=args.base_offset)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkalog", description=engine.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kafkalog {engine.__version__} ({engine.IMPL})")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="exercise the codec, then write a topic into a log directory")
    demo.add_argument("--data", default="./data", help="log directory (default ./data)")
    demo.add_argument("--records", type=int, default=200_000, help="records to encode and decode")
    demo.set_defaults(func=_demo)
    dump = sub.add_parser("dump-log", help="print segment, index and snapshot files as kafka-dump-log does")
    dump.add_argument("--files", required=True, help="comma-separated files (.log, .index, .timeindex, ...)")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record")
    dump.add_argument("--print-data-log", action="store_true", help="print keys and payloads (implies deep)")
    dump.add_argument("--verify-index-only", action="store_true", help="check index entries against the log")
    dump.add_argument("--index-sanity-check", action="store_true", help="run Kafka's index sanity checks")
    dump.add_argument("--json", action="store_true", help="JSON lines (the vectors' expected.jsonl fields)")
    dump.add_argument("--base-offset", type=int, help="base offset for a file not named by its offset")
    dump.set_defaults(func=_dump_log)
    args = parser.parse_args(argv)
    return args.func(args)
