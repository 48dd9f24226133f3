"""Bounded resources, each measured in a child process with its own limits: a directory of 10,000
partitions opens, takes a record in every partition and reads them back under `ulimit -n 1024`, holding
no more descriptors than the engine's fd budget; a decompression bomb (about 4 MB of gzip inflating to
4 GiB) is refused with a typed error and a small peak RSS, and the limit is a setting; consuming a 1 GiB
log keeps anonymous memory flat. KAFKALOG_MANY_PARTITIONS and KAFKALOG_BIG_LOG_BYTES set the sizes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = int(os.environ.get("KAFKALOG_MANY_PARTITIONS", "10000"))


# the child's own peak RSS: ru_maxrss would carry the parent's over fork and exec
PEAK = """
def peak_rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
"""


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PEAK + textwrap.dedent(code), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


MANY = """
import json, os, resource, sys
import engine
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
path, n = sys.argv[1], int(sys.argv[2])
peak_fds = 0
def fds():
    global peak_fds
    peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")))
with engine.open(path, background=False) as e:
    budget = e.fs.fd_budget
    e.create_topic("many", partitions=n)
    fds()
    with e.producer(linger_ms=0) as p:
        for i in range(n):
            p.send("many", b"%d" % i, partition=i)
            if i % 997 == 0:
                fds()
    fds()
with engine.open(path, background=False) as e:
    c = e.consumer("many", auto_offset_reset="earliest")
    seen = {}
    while got := c.poll(max_records=5000):
        fds()
        for tp, recs in got.items():
            seen[tp.partition] = [r.value for r in recs]
    fds()
print(json.dumps({"budget": budget, "peak_fds": peak_fds, "partitions": len(seen),
                  "right": sum(v == [b"%d" % p] for p, v in seen.items()),
                  "rss_mib": peak_rss_mib()}))
"""


def test_ten_thousand_partitions_within_the_fd_budget_under_ulimit_1024(tmp_path):
    got = _child(MANY, str(tmp_path / "many"), str(PARTITIONS))
    assert got["partitions"] == got["right"] == PARTITIONS
    # the budget, plus what any Python process holds (stdio, the directory lock, a transient open)
    assert got["peak_fds"] <= got["budget"] + 12, got
    assert got["rss_mib"] < 600, got


def _gzip_bomb(inflated: int) -> bytes:
    """A gzip member of `inflated` zero bytes, built from one full-flushed 1 MiB block repeated (each block
    stands alone, so the repeat is a valid stream) and never inflated here."""
    block = 1 << 20
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = z.compress(bytes(block)) + z.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + piece * (inflated // block) + tail + b"\x00" * 8  # the trailer is never reached


BOMB = """
import json, resource, sys
import engine
from engine.common.errors import KafkaError
from engine.record import batch_format as bf
data = open(sys.argv[1], "rb").read()
errors = []
for b in engine.iter_batches(data):
    try:
        b.records()
    except KafkaError as exc:
        errors.append(type(exc).__name__)
with engine.open(sys.argv[2], background=False) as e:
    e.create_topic("bomb", config={"max.message.bytes": 8 << 20})
    lg = e.log("bomb", 0)
    lg.append_as_follower(data)
    lg.update_high_watermark(lg.log_end_offset)
    c = e.consumer(auto_offset_reset="earliest")
    c.assign([engine.TopicPartition("bomb", 0)])
    try:
        c.poll()
    except KafkaError as exc:
        errors.append(type(exc).__name__)
print(json.dumps({"errors": errors, "rss_mib": peak_rss_mib(),
                  "bytes": len(data)}))
"""


def test_a_decompression_bomb_is_refused_with_a_typed_error_and_little_memory(tmp_path):
    import engine

    template = engine.encode_batch([(None, b"v", None, 1)], compression="gzip")
    bomb = _gzip_bomb(4 << 30)
    batch = bytearray(template[:61]) + bomb
    # the length and CRC of the batch as it now is (the records' count stays 1: they are never reached)
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[17:21] = engine.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    path = tmp_path / "bomb.bin"
    path.write_bytes(bytes(batch))
    got = _child(BOMB, str(path), str(tmp_path / "dir"))
    assert 3 << 20 < got["bytes"] < 6 << 20
    assert got["errors"] == ["RecordTooLargeError", "RecordTooLargeError"], got
    assert got["rss_mib"] < 300, got


def test_the_decompression_limit_is_a_consumer_setting(tmp_path):
    import pytest

    import engine
    from engine.common.errors import InvalidConfigurationError, RecordTooLargeError

    values = [bytes([i]) * 10_000 for i in range(20)]  # about 200 kB inflated, far less compressed
    with engine.open(str(tmp_path), clock=engine.ManualClock(), background=False) as e:
        e.create_topic("t")
        e.append("t", 0, engine.encode_batch([(None, v, None, 1) for v in values], compression="gzip"))
        tp = engine.TopicPartition("t", 0)
        for limit, expect in ((64 << 10, None), (1 << 20, values)):
            c = e.consumer(auto_offset_reset="earliest", max_decompressed_bytes=limit)
            c.assign([tp])
            if expect is None:
                with pytest.raises(RecordTooLargeError):
                    c.poll()
                assert c.position(tp) == 0  # nothing skipped
            else:
                assert [r.value for r in c.poll()[tp]] == expect
        for bad in (0, -1, "1MB", 1.5):
            with pytest.raises(InvalidConfigurationError):
                e.consumer(max_decompressed_bytes=bad)


BIG_LOG = int(os.environ.get("KAFKALOG_BIG_LOG_BYTES", str(1 << 30)))

CONSUME = """
import json, sys
import engine
from engine.record import codec
from engine.segments.partition_reader import PartitionReader

def anon_mib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024

path, size = sys.argv[1], int(sys.argv[2])
value = bytes(range(256)) * 1024                         # 256 KiB records, four to a 1 MiB batch
batch = engine.encode_batch([(None, value, None, 1)] * 4)
with engine.open(path, background=False) as e:
    e.create_topic("big", config={"segment.bytes": 128 << 20, "max.message.bytes": 2 << 20})
    written = 4 * (size // len(batch))
    for _ in range(size // len(batch)):
        e.append("big", 0, batch)
    end = e.describe_topic("big").partitions[0].log_end_offset
    c = e.consumer(auto_offset_reset="earliest")
    c.assign([engine.TopicPartition("big", 0)])
    seen, peak = 0, 0.0
    while got := c.poll(max_records=16):
        if seen == 0:
            base = anon_mib()                             # after the first fetch: imports and pools are warm
        for recs in got.values():
            seen += sum(r.value == value for r in recs)
        peak = max(peak, anon_mib())
consumer = {"records": seen, "written": written, "end": end, "growth_mib": peak - base}
reader = PartitionReader(path + "/big-0")
rows, peak, base = 0, 0.0, None
for chunk in reader.chunks(0, end, 8 << 20):
    cols = codec.decode_columnar(chunk.data, start_offset=0, position=chunk.position, source=reader.dir)
    rows += len(cols)
    del cols
    base = anon_mib() if base is None else base
    peak = max(peak, anon_mib())
reader.close()
print(json.dumps({"consumer": consumer, "reader": {"records": rows, "growth_mib": peak - base}}))
"""


def test_memory_stays_flat_while_consuming_a_large_log(tmp_path):
    """Anonymous memory (heap, not the page cache the mappings share with the kernel) grows by less than
    64 MiB over a 1 GiB log (`make soak`: 10 GiB), through the consumer and through the Spark reader's path."""
    got = _child(CONSUME, str(tmp_path / "big"), str(BIG_LOG))
    expected = got["consumer"]["written"]
    assert expected >= BIG_LOG // (256 << 10) - 8 and got["consumer"]["end"] == expected, got
    for path in ("consumer", "reader"):
        assert got[path]["records"] == expected, got
        assert got[path]["growth_mib"] < 64, got
