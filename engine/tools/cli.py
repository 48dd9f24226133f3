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
    from engine.record import codec as selector

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
    _demo_log(args.data, args.produce)
    return 0


def _demo_log(directory: str, count: int) -> None:
    """Produce `count` keyed records into the 3-partition topic 'events' of `directory` with a Producer,
    read them back with a Consumer, and report per partition; the directory stays a Kafka log directory."""
    with engine.open(directory) as eng:
        if "events" not in eng.list_topics():
            eng.create_topic("events", partitions=3, config={"segment.bytes": 16 << 20})
        before = {p.partition: p.log_end_offset for p in eng.describe_topic("events").partitions}
        values = [b"value-%08d-" % i + b"x" * 84 for i in range(1000)]
        keys = [b"car-%05d" % i for i in range(10_000)]
        with eng.producer(linger_ms=5) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for i in range(count):
                send("events", values[i % 1000], keys[i % 10_000])
            producer.flush()
            produced = time.perf_counter() - t0
        print(f"produced {count:,} keyed records with Producer.send() in {produced:.2f}s "
              f"({count / produced / 1e6:.2f} M rec/s, idempotent, acks=all)")
        with eng.consumer("events", auto_offset_reset="earliest", consumer_timeout_ms=0) as consumer:
            t0 = time.perf_counter()
            got = {}
            for rec in consumer:
                got[rec.partition] = got.get(rec.partition, 0) + 1
            consumed = time.perf_counter() - t0
        total = sum(got.values())
        print(f"consumed {total:,} records by iterating a Consumer in {consumed:.2f}s "
              f"({total / consumed / 1e6:.2f} M rec/s)")
        for p in eng.describe_topic("events").partitions:
            print(f"  events-{p.partition}: LEO {p.log_end_offset:,} (+{p.log_end_offset - before[p.partition]:,}), "
                  f"{p.segments} segment(s), {p.size_bytes / 1e6:.1f} MB")
        if total < count:
            raise SystemExit(f"read back {total} records, fewer than the {count} produced")
    print(f"closed cleanly: {directory} is a Kafka log directory "
          f"(try: kafkalog dump-log --files {directory}/events-0/00000000000000000000.index --verify-index-only)")


def _dump_log(args: argparse.Namespace) -> int:
    from engine.tools import dump_log

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
    demo.add_argument("--produce", type=int, default=1_000_000, help="records to produce and consume")
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
