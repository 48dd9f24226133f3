"""Share groups' starting points and their state's bytes: share.auto.offset.reset=by_duration (its ISO-8601
durations judged by Java's own Duration.parse, and where a share-partition starts with it), and the
`__share_group_state` values in Kafka 4.1+'s layout (written by hand from Kafka's published schema) beside Kafka
4.0's early-access one, which is still read."""
from __future__ import annotations

import pytest

import engine
from engine.common.clock import ManualClock
from engine.groups import share_state_records as records
from engine.groups.share_partition import StateBatch
from tests.unit.test_share_groups import _keyed


# Java's Duration.parse, the judge of share.auto.offset.reset=by_duration's durations (Kafka parses them with it)
_JAVA_DURATIONS = """
import java.io.*;
import java.time.Duration;

public class Durations {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            try {
                Duration d = Duration.parse(line);
                System.out.println(d.isNegative() ? "negative" : Long.toString(d.toMillis()));
            } catch (Exception e) {
                System.out.println("refused");
            }
        }
    }
}
"""


def test_by_duration_reads_iso_8601_durations_as_javas_duration_parse_does(tmp_path):
    """Every duration text of a corpus (Java's documented forms, signs, fractions, case, and malformed ones) gets
    the milliseconds Java's Duration.parse gives it, or is refused where Java refuses it or the duration is
    negative (Kafka's rule)."""
    import shutil
    import subprocess

    from engine.groups.share_group_coordinator import by_duration_ms

    java = shutil.which("java")
    assert java, "the JDK's java is needed (make setup's Spark source needs it too)"
    texts = ["PT20.345S", "PT15M", "PT10H", "P2D", "P2DT3H4M", "PT-6H3M", "-PT6H3M", "-PT-6H+3M", "PT0S", "P0D",
             "pt1h", "PT1.5S", "PT1,5S", "PT.5S", "PT1.S", "PT0.000000001S", "PT1.1234567891S", "P", "PT", "P1DT",
             "P1W", "P1Y", "PT1H1H", "1H", "", " PT1H", "PT+1M", "P-1DT25H", "P+1D", "PT36H", "PT-0.5S", "PT-1.5S",
             "-PT0.5S", "P1DT-1H", "PT9999999999S", "P106751991167DT0S", "PTS", "PT1M30.5S", "P0DT0H0M0S", "PT1e3S"]
    src = tmp_path / "Durations.java"
    src.write_text(_JAVA_DURATIONS)
    done = subprocess.run([java, str(src)], input="\n".join(texts) + "\n", capture_output=True, text=True,
                          check=True, timeout=120)
    javas = done.stdout.split()
    assert len(javas) == len(texts), done.stderr
    for text, verdict in zip(texts, javas):
        want = int(verdict) if verdict not in ("refused", "negative") else None
        assert by_duration_ms("by_duration:" + text) == want, (text, verdict)


def test_by_duration_starts_a_share_partition_at_the_first_record_that_recent(tmp_path):
    """share.auto.offset.reset=by_duration:PT10S on an injected clock: the share-partition starts at the first
    record at most ten seconds old; while no record is that recent it is not started (nothing is delivered), and
    it starts at the first record produced after that."""
    clock = ManualClock(1_000_000)
    with engine.open(tmp_path / "d", clock=clock) as e:
        e.create_topic("jobs", partitions=1)
        _keyed(e, "jobs", 3)  # timestamps 1,000,000
        clock.advance(20_000)
        _keyed(e, "jobs", 3, start=3)  # 1,020,000
        clock.advance(5_000)
        e.alter_group_configs("recent", {"share.auto.offset.reset": "by_duration:PT10S"})
        with e.share_consumer("recent", ["jobs"]) as member:
            assert sorted(int(r.key) for r in member.poll(0)) == [3, 4, 5]
        e.alter_group_configs("fresh", {"share.auto.offset.reset": "by_duration:PT1S"})
        with e.share_consumer("fresh", ["jobs"]) as member:
            assert member.poll(0) == [] and e.share_groups.start_offsets("fresh") == {}
            _keyed(e, "jobs", 1, start=6)
            # (a heartbeat initializes the share-partition, the next assigns it, as for any share-partition)
            assert [int(r.key) for r in member.poll(0) + member.poll(0)] == [6]


def _kafka_value(fields: list[tuple[str, object]], batches: list[tuple[int, int, int, int]]) -> bytes:
    """A share coordinator value written by hand from Kafka's published JSON schema (struct, not engine.protocol):
    int16 version 0, the fields, a compact array of batches (each with its empty tagged-field section), and the
    value's own empty tagged-field section."""
    import struct

    out = struct.pack(">h", 0) + b"".join(struct.pack(">" + fmt, v) for fmt, v in fields)
    out += bytes([len(batches) + 1])  # (a compact array's length + 1, one byte below 128)
    out += b"".join(struct.pack(">qqbh", *b) + b"\x00" for b in batches)
    return out + b"\x00"


def test_share_state_values_are_kafka_4_1s_and_kafka_4_0s_early_access_ones_are_still_read():
    """ShareSnapshotValue as Kafka 4.1+ defines it (SnapshotEpoch int32, StateEpoch, LeaderEpoch, StartOffset,
    CreateTimestamp, WriteTimestamp, StateBatches) is what encode() writes, byte for byte; Kafka 4.0's early-access
    layout (SnapshotEpoch uint16, no timestamps), which Kafka 4.1 cannot read, is still read, as is its ShareUpdate."""
    tid = "AAAAAAAAAAAAAAAAAAAAAQ"
    batches = [(3, 4, 0, 1), (5, 5, 4, 2)]
    state = records.ShareState(records.SNAPSHOT, "g", tid, 7, 70_000, 0, 3, tuple(StateBatch(*b) for b in batches),
                               create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_000_500)
    key, value = records.encode(state)
    assert value == _kafka_value([("i", 70_000), ("i", 0), ("i", 0), ("q", 3), ("q", 1_700_000_000_000),
                                  ("q", 1_700_000_000_500)], batches)
    early = _kafka_value([("H", 9), ("i", 2), ("i", 0), ("q", 3)], batches)
    assert records.decode(key, early) == state._replace(snapshot_epoch=9, state_epoch=2, create_timestamp=-1,
                                                        write_timestamp=-1)
    update_key = key[:1] + b"\x01" + key[2:]
    early_update = _kafka_value([("H", 10), ("i", 0), ("q", 4)], batches[1:])
    assert records.decode(update_key, early_update) == records.ShareState(
        records.UPDATE, "g", tid, 7, 10, 0, 4, (StateBatch(5, 5, 4, 2),))
    with pytest.raises(Exception, match="does not parse"):
        records.decode(key, early + b"\x00")  # (neither layout leaves a byte over)
