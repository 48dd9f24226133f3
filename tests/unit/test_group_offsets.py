"""Committed offsets of consumer groups: commits, auto-commit and auto.offset.reset, commits in a rebalance listener,
generations, `__consumer_offsets` records read with Kafka's schemas, expiry, restarts, group deletion, the
`kafkalog groups` CLI, and offsets sent to a transaction."""
from __future__ import annotations

import os

import pytest

import engine
from engine.clients.consumer_coordinator import ConsumerRebalanceListener
from engine.common.clock import ManualClock
from engine.common.errors import (
    CommitFailedError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidConfigurationError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    TransactionAbortableError,
    UnknownMemberIdError,
)
from engine.common.structs import OffsetAndMetadata
from engine.common.structs import TopicPartition as TP
from engine.groups import group_metadata, offsets
from engine.groups.group_metadata import EMPTY, STABLE
# (`coordinator` is a fixture)
from tests.group_helpers import (
    FAST,
    Member,
    Recorder,
    coordinator,
    poll_until,
    produce,
    settle,
    independent_subscription,
    independent_assignment,
    offsets_records,
)


# --- offsets --------------------------------------------------------------------------------------------
def test_commits_auto_commit_and_auto_offset_reset(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=1)
        produce(e, "t", 10)
        tp = TP("t", 0)
        with e.consumer("t", group_id="late", auto_offset_reset="latest") as c:
            assert c.poll(0) == {} and c.position(tp) == 10  # nothing committed: auto_offset_reset
        c = e.consumer("t", group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=1000,
                       max_poll_records=4)
        assert len(c.poll(0)[tp]) == 4 and c.committed(tp) is None
        clock.advance(1000)
        c.poll(0)  # the interval passed: this poll commits the position it started from
        assert c.committed(tp) == 4 and c.position(tp) == 8
        calls = []
        fut = c.commit_async({tp: OffsetAndMetadata(6, "half")}, callback=lambda o, exc: calls.append((o, exc)))
        assert fut.result() and calls[0][1] is None and c.committed(tp, metadata=True) == OffsetAndMetadata(6, "half")
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tp: OffsetAndMetadata(1, "m" * 4097)})
        with pytest.raises(InvalidConfigurationError):
            c.commit({tp: -1})
        assert c.committed(tp) == 6  # a refused commit changes nothing
        c.close()  # close commits the position
        assert e.committed("g", tp).offset == 8
        with e.consumer("t", group_id="g", auto_offset_reset="latest") as again:
            assert [r.offset for r in again.poll(0)[tp]] == [8, 9]


def test_a_commit_in_on_partitions_revoked_commits_the_revoked_partitions_positions(tmp_path):
    """As the Java consumer: the listener is told while the partitions are still assigned, so commit() there commits
    their positions (the next owner starts after what this member read)."""
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 20)
        seen_in_callback = []

        class CommitOnRevoke(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                seen_in_callback.append((set(revoked), a.assignment(), {tp: a.position(tp) for tp in revoked}))
                if revoked:
                    a.commit()

        a = e.consumer(group_id="r", auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=3,
                       partition_assignment_strategy="range")
        a.subscribe(["t"], listener=CommitOnRevoke())
        assert sum(len(v) for v in a.poll(5000).values()) == 3
        b = e.consumer("t", group_id="r", auto_offset_reset="earliest", enable_auto_commit=False,
                       partition_assignment_strategy="range")
        poll_until([a, b], lambda: a.assignment() and b.assignment())
        revoked, assigned_then, positions = seen_in_callback[-1]
        assert revoked == assigned_then == {TP("t", 0), TP("t", 1)} and sum(positions.values()) >= 3
        assert {tp: e.committed("r", tp).offset for tp in positions} == positions
        a.close()
        b.close()


def test_a_member_of_an_older_generation_cannot_commit(coordinator):
    c, clock, e = coordinator
    a = Member(c, "a")
    settle([a], {"t": 6})
    b = Member(c, "b")
    b.join()
    settle([a, b], {"t": 6})
    with pytest.raises(IllegalGenerationError):
        c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(1)}, a.member_id, 1)
    with pytest.raises(UnknownMemberIdError):  # a standalone commit while the group has members
        c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(1)})
    with pytest.raises(NonEmptyGroupError):
        c.reset_offsets("g", {TP("t", 0): OffsetAndMetadata(0)})
    c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(3)}, a.member_id, 2)
    consumer = e.consumer(group_id="g", enable_auto_commit=False)
    consumer.group.member_id, consumer.group.generation = a.member_id, 1
    consumer._subscription = {"t"}
    with pytest.raises(CommitFailedError):
        consumer.commit({TP("t", 0): 5})
    assert c.fetch_offsets("g") == {TP("t", 0): OffsetAndMetadata(3)}


def test_consumer_offsets_records_decode_with_kafkas_schemas_and_expire(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 6)
        c = e.consumer("t", group_id="billing", group_instance_id="i-1", enable_auto_commit=False,
                       auto_offset_reset="earliest")
        c.poll(0)
        c.commit()
        kinds = offsets_records(e, "billing")
        group = [r for r in kinds if r[0] == "group"][-1][2]
        member = group["members"][0]
        assert group["version"] == 3 and group["protocolType"] == "consumer" and group["generation"] == 1
        assert group["protocol"] == "range" and group["leader"] == member["memberId"]
        assert member["groupInstanceId"] == "i-1" and member["clientHost"] == "/127.0.0.1"
        assert member["sessionTimeout"] == 10_000 and member["rebalanceTimeout"] == 300_000
        subscription = independent_subscription(member["subscription"])
        assert subscription["topics"] == ["t"] and subscription["version"] == 3
        assert independent_assignment(member["assignment"])["assignedPartitions"] == [("t", [0, 1])]
        commits = {r[1]: r[2] for r in kinds if r[0] == "offset"}
        assert {k: v["offset"] for k, v in commits.items()} == {("billing", "t", 0): 3, ("billing", "t", 1): 3}
        assert all(v["version"] == 3 and v["commitTimestamp"] == clock.time_ms() for v in commits.values())
        c.close()
        e.groups.leave_group("billing", "", "i-1")  # an admin removes the static member: the group empties
        assert e.groups.describe_group("billing").state == EMPTY
        clock.advance(7 * 24 * 3600 * 1000 - 1)
        assert e.coordinators.expire_group_offsets() == 0
        clock.advance(1)
        assert e.coordinators.expire_group_offsets() == 2
        tail = offsets_records(e, "billing")[-3:]
        assert tail[:2] == [("offset", ("billing", "t", 0), None), ("offset", ("billing", "t", 1), None)]
        assert tail[2] == ("group", "billing", None)  # the empty group's record goes too
        assert e.committed("billing", TP("t", 0)) is None
    from engine.tools.dump_log import dump
    part = os.path.join(tmp_path, f"{offsets.TOPIC}-{offsets.partition('billing')}")
    files = sorted(os.path.join(part, f) for f in os.listdir(part) if f.endswith((".log", ".index", ".timeindex")))
    with open(os.devnull, "w") as sink:
        assert dump(files, deep=True, index_sanity_check=True, out=sink) == 0


def test_groups_and_offsets_survive_a_restart(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=3)
        produce(e, "t", 9)
        c = e.consumer("t", group_id="g", group_instance_id="s", auto_offset_reset="earliest",
                       session_timeout_ms=60_000, heartbeat_interval_ms=1000, enable_auto_commit=False)
        poll_until([c], lambda: len(c.assignment()) == 3)
        c.commit({TP("t", p): p + 1 for p in range(3)})
        described = e.groups.describe_group("g")
        c.close()
    with engine.open(tmp_path, group_config=FAST) as e:
        again = e.groups.describe_group("g")
        assert (again.state, again.generation, again.protocol) == (STABLE, described.generation, "range")
        assert [m["assignment"] for m in again.members] == [m["assignment"] for m in described.members]
        assert {p: e.committed("g", TP("t", p)).offset for p in range(3)} == {0: 1, 1: 2, 2: 3}
        assert group_metadata.decode_value(group_metadata.encode_value(e.groups.groups["g"].record())).generation \
            == described.generation


def test_deleting_a_group_tombstones_its_offsets_and_record_and_refuses_a_live_one(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 6)
        with e.consumer("t", group_id="live", session_timeout_ms=6000, heartbeat_interval_ms=100,
                        enable_auto_commit=False, auto_offset_reset="earliest") as member:
            poll_until([member], lambda: member.assignment())
            member.commit({TP("t", 0): 2})
            with pytest.raises(NonEmptyGroupError):  # not while it has a member; nothing is written
                e.groups.delete_group("live")
            assert e.committed("live", TP("t", 0)).offset == 2
        e.groups.commit_offsets("offsets-only", {TP("t", 1): OffsetAndMetadata(4)})
        with pytest.raises(GroupIdNotFoundError):
            e.groups.delete_group("never")
        e.groups.delete_group("live")
        e.groups.delete_group("offsets-only")
        assert e.committed("live", TP("t", 0)) is None and e.committed("offsets-only", TP("t", 1)) is None
        assert [g for g, _, _ in e.groups.list_groups()] == []
        tail = offsets_records(e, "live")[-2:]  # decoded by independent code from Kafka's schemas
        assert tail == [("offset", ("live", "t", 0), None), ("group", "live", None)]
        with pytest.raises(GroupIdNotFoundError):  # a deleted group is gone
            e.groups.delete_group("live")
    with engine.open(tmp_path, group_config=FAST) as e:  # and stays gone after a restart
        assert e.groups.list_groups() == [] and e.committed("live", TP("t", 0)) is None


def test_kafkalog_groups_cli(tmp_path, capsys):
    from engine.tools.cli import main
    with engine.open(tmp_path) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 10)
        with e.consumer(group_id="billing", enable_auto_commit=False) as c:
            c.assign([TP("t", 0), TP("t", 1)])
            c.commit({TP("t", 0): 2, TP("t", 1): 1})
    data = ["--data", str(tmp_path)]
    assert main(["groups", "--list", *data]) == 0
    assert capsys.readouterr().out.split() == ["billing"]
    assert main(["groups", "--describe", "--group", "billing", *data]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("billing")]
    highs = [int(row[4]) for row in rows]
    assert [row[:6] for row in rows] == [["billing", "t", "0", "2", str(highs[0]), str(highs[0] - 2)],
                                         ["billing", "t", "1", "1", str(highs[1]), str(highs[1] - 1)]]
    assert sum(highs) == 10 and all(row[6:] == ["-", "-", "-"] for row in rows)  # no members
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-earliest", *data]) == 0
    assert "dry run" in capsys.readouterr().out
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-latest", "--execute", *data]) == 0
    capsys.readouterr()
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-offset", "1", "--topic", "t:0",
                 "--execute", "--json", *data]) == 0
    capsys.readouterr()
    with engine.open(tmp_path) as e:
        assert e.committed("billing", TP("t", 0)).offset == 1
        assert e.committed("billing", TP("t", 1)).offset == e.partition("t", 1).high_watermark
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-datetime", "2001-01-01T00:00:00.000Z",
                 "--execute", *data]) == 0  # every record is newer: back to the first offsets
    capsys.readouterr()
    with engine.open(tmp_path) as e:
        assert [e.committed("billing", TP("t", p)).offset for p in range(2)] == [0, 0]
        with e.consumer("t", group_id="billing", session_timeout_ms=6000, heartbeat_interval_ms=100) as member:
            poll_until([member], lambda: member.assignment())
            with pytest.raises(NonEmptyGroupError):  # not while the group has a member
                e.groups.reset_offsets("billing", {TP("t", 0): OffsetAndMetadata(3)})
    assert main(["groups", "--delete", "--group", "billing", *data]) == 0
    assert "successful" in capsys.readouterr().out
    assert main(["groups", "--list", *data]) == 0
    assert capsys.readouterr().out.split() == []
    assert main(["groups", "--delete", "--group", "billing", *data]) != 0  # no such group any more
    assert main(["groups", "--describe", *data]) == 2  # --group is required


def test_an_evicted_member_loses_its_partitions_without_committing(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 4)
        seen = Recorder()
        c = e.consumer(group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=1000, auto_offset_reset="earliest")
        c.subscribe(["t"], listener=seen)
        assert sum(len(v) for v in c.poll(0).values()) == 4
        c.group._stop.set()  # its heartbeats stop (a long GC pause, say)
        clock.advance(6000)
        e.groups.tick()
        assert e.groups.describe_group("g").state == EMPTY
        c.group.heartbeat()  # the answer: unknown member
        c.poll(0)  # rejoins as a new member; what it owned was lost, not revoked, and nothing was committed
        assert seen.events[-2:] == [("lost", {TP("t", 0), TP("t", 1)}), ("assigned", {TP("t", 0), TP("t", 1)})]
        assert ("revoked", {TP("t", 0), TP("t", 1)}) not in seen.events
        assert e.committed("g", TP("t", 0)) is None
        c.close(autocommit=False)


def test_send_offsets_to_transaction_checks_the_members_generation(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=1)
        produce(e, "t", 5)
        c = e.consumer("t", group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=100,
                       enable_auto_commit=False, auto_offset_reset="earliest")
        poll_until([c], lambda: c.assignment())
        member = c.group_metadata()
        producer = e.producer(transactional_id="tx")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TP("t", 0): 2}, member)  # the current generation: accepted
        producer.commit_transaction()
        assert e.committed("g", TP("t", 0)).offset == 2
        zombie = member._replace(generation_id=member.generation_id - 1)
        producer.begin_transaction()
        with pytest.raises(CommitFailedError):
            producer.send_offsets_to_transaction({TP("t", 0): 4}, zombie)
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()
        assert e.committed("g", TP("t", 0)).offset == 2  # the zombie's offsets never landed
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TP("t", 0): 3}, "g")  # a group id alone is not checked (old clients)
        producer.commit_transaction()
        assert e.committed("g", TP("t", 0)).offset == 3
        producer.close()
        c.close()
