"""The engine's brokers and what moves records between them (Kafka's ReplicaManager with the controller's side of
LeaderAndIsr and AlterPartition): each partition's replicas get their roles from the controller's state, a leader's
acks='all' append waits for its ISR, followers fetch on their brokers' threads (or the native fetcher's), and a
broker fails and comes back as a process would.

State: the brokers (broker 0's log manager is the engine's own), the controller (replication.controller) and the
highest HW each partition's leader had before a failover (a new leader starts there). The topic catalogue and the
map of each partition's leader are the engine's, shared: this module gives partitions their roles and writes the
leader map and the catalogue's partition states.
On disk: nothing of its own; the controller's state is written to the engine's catalogue (engine.metadata) before a
role change holds.
Threads: each live broker of several runs a replica fetcher thread, and one native thread runs the linked
followers' steady-state rounds (replication.replica_fetcher); a thread waiting for acks='all' runs followers' rounds
itself. Locks: a broker's failure and restart take the engine's admin lock, then the controller lock (a leaf: the
catalogue's partition states and its file); an ISR change from a leader takes only the controller lock.
"""
from __future__ import annotations

import threading
from typing import Callable

from engine import metadata
from engine.common.changes import BumpingDict
from engine.common.clock import Clock
from engine.common.errors import IllegalStateError, InvalidConfigurationError, NotLeaderOrFollowerError
from engine.common.health import TaskFailure
from engine.common.structs import TopicPartition, topic_partitions
from engine.metadata import Catalogue
from engine.replication.broker import Broker
from engine.replication.controller import Controller
from engine.replication.partition import LazyPartition, Partition
from engine.replication.replica_fetcher import ReplicaFetcher, native_fetcher
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.log.unified_log import AppendInfo, UnifiedLog

STRAY = "stray partition"  # health()'s task name for a partition directory set aside


class ReplicaManager:
    """The brokers of one engine and their partitions' roles, replication and failover."""

    def __init__(self, path: str, fs: FileSystem, clock: Clock, catalogue: Catalogue, leaders: BumpingDict,
                 admin_lock: threading.RLock, check_open: Callable[[], None], defaults: LogConfig, *,
                 background: bool, lag_ms: int) -> None:
        self.path, self.fs, self.clock, self.catalogue, self.leaders = path, fs, clock, catalogue, leaders
        self._admin_lock, self._check_open, self.defaults = admin_lock, check_open, defaults
        self.background, self.lag_ms = background, lag_ms
        self.brokers: dict[int, Broker] = {}
        self.controller = Controller(catalogue.brokers, catalogue.controller_epoch)
        self.controller_lock = threading.Lock()  # a leaf lock: the catalogue's states and its file
        self.hw_seen: dict[tuple[str, int], int] = {}  # the highest HW a leader had before it failed
        self.native_fetcher = None  # the native replica fetcher's thread (engine._native._replica_fetcher), if any

    # --- roles ----------------------------------------------------------------------------------
    def new_partition(self, topic: str, index: int, log: UnifiedLog, broker_id: int) -> Partition:
        """A broker's replica of `topic`-`index` (what a Broker hosts)."""
        return Partition(topic, index, log, broker_id=broker_id, clock=self.clock,
                         replica_lag_time_max_ms=self.lag_ms, alter_isr=self.alter_isr)

    def add_partition(self, topic: str, index: int) -> None:
        """Host `topic`-`index` on its replicas' brokers and give each its role."""
        self.add_partitions(topic, range(index, index + 1))

    def add_partitions(self, topic: str, indexes: range) -> None:
        """`add_partition` of each of `indexes` (a single replica's partitions in one pass)."""
        rec = self.catalogue.topics[topic]
        keys = topic_partitions(topic, indexes)
        alone = [key for key in keys if key[1] not in rec.states] if rec.states else keys
        # a single replica on broker 0, leading in its log's latest epoch
        self.leaders.update(self.brokers[0].lead_alone(alone, rec.topic_id))
        for key in keys if rec.states else ():
            if key[1] in rec.states:
                self._add_replicated(rec, topic, key[1])

    def _add_replicated(self, rec, topic: str, index: int) -> None:
        state = rec.states[index]
        for b in state.replicas:
            if self.brokers[b].alive:
                self.brokers[b].host(topic, index, rec.topic_id)
        with self.controller_lock:
            self.controller.elect(state, self.unclean(topic))  # a partition left without a leader
        self.apply(topic, index)

    def apply(self, topic: str, index: int) -> None:
        """Give every live replica of `topic`-`index` its role in the controller's state (LeaderAndIsr); a new
        leader's HW starts at the highest HW the partition had in this process (every ISR member holds that much,
        so a reader never sees the HW go down across a failover)."""
        hw_floor = self.hw_seen.get((topic, index), 0)
        state = self.catalogue.topics[topic].states[index]
        epoch = self.controller.epoch
        leader = self.brokers[state.leader].partitions.get((topic, index)) if state.leader >= 0 else None
        if leader is None:
            self.leaders.pop((topic, index), None)
        else:
            leader.make_leader(state.leader_epoch, state.isr, state.replicas, hw_floor, controller_epoch=epoch)
            self.leaders[leader_key(topic, index)] = leader
        for b in state.replicas:
            part = self.brokers[b].partitions.get((topic, index)) if self.brokers[b].alive else None
            if part is None or part is leader:
                continue
            if leader is None:
                part.make_offline()
            else:
                part.make_follower(state.leader, state.leader_epoch, state.replicas, state.isr, controller_epoch=epoch)
        self.wake_followers()

    def alter_isr(self, partition: Partition, isr: frozenset) -> bool:
        """AlterPartition: a leader's ISR change, accepted by the controller and persisted before it holds."""
        with self.controller_lock:
            rec = self.catalogue.topics.get(partition.topic)
            state = rec.states.get(partition.index) if rec is not None else None
            if state is None or not self.controller.alter_isr(state, partition.broker_id, partition.leader_epoch,
                                                              isr):
                return False
            metadata.write(self.fs, self.path, self.catalogue)
            return True

    def unclean(self, topic: str) -> bool:
        return self.catalogue.log_config(topic, self.defaults).unclean_leader_election_enable

    # --- fetching -------------------------------------------------------------------------------
    def start_fetchers(self) -> None:
        if self.background and self.catalogue.brokers > 1:
            for broker in self.brokers.values():
                if broker.alive:
                    broker.start_fetcher(self.leader_of, self.native())

    def native(self):
        """The native replica fetcher, started on first use (None where it cannot run: see native_fetcher)."""
        if self.native_fetcher is None:
            self.native_fetcher = native_fetcher(self.fs, self.clock)
        return self.native_fetcher

    def leader_of(self, follower: Partition) -> Partition | None:
        return self.leaders.get((follower.topic, follower.index))  # (a follower's leader is never a LazyPartition)

    def made(self, part: Partition | LazyPartition) -> Partition:
        """`part` itself, or for a LazyPartition the Partition its broker makes in its place (engine.replication
        .broker: its log loaded), which takes its place in the map of leaders too."""
        if type(part) is not LazyPartition:
            return part
        made = self.brokers[part.broker_id].made(part)
        self.leaders.swap((part.topic, part.index), part, made)
        return made

    def wait_for_replication(self, part: Partition, info: AppendInfo, timeout_ms: int) -> None:
        """acks='all': the HW passes the append within `timeout_ms`, under the leader that appended it
        (NotLeaderOrFollowerError if leadership moved since: the producer resends)."""
        # leadership first: a leader whose broker just died has no followers left (make_offline), which must not
        # read as "nothing to wait for" (an append not yet replicated would be acknowledged, then lost on failover)
        if part.leader_epoch != info.leader_epoch or not part.is_leader:
            raise NotLeaderOrFollowerError(f"{part.topic}-{part.index} changed leader since offset "
                                           f"{info.last_offset} was appended", file=self.path, offset=info.last_offset)
        if not part.remote:
            return
        if not self.background:
            self.replicate()
        else:
            deadline = part.clock.time_ms() + timeout_ms
            while part.high_watermark <= info.last_offset:
                left = deadline - part.clock.time_ms()
                if left <= 0:
                    break  # (the wait below raises the timeout)
                if part.wait_linked(info.last_offset, min(left, 50)):
                    continue  # every follower is linked: the native fetcher moves the HW
                if not self._drive_followers(part, info.last_offset):
                    self.wake_followers()
                    break
        part.wait_for_high_watermark(info.last_offset, timeout_ms)

    def _drive_followers(self, part: Partition, offset: int, rounds: int = 3) -> bool:
        """Run the followers' fetch rounds for `part` in the waiting thread until the HW passes `offset` (in one
        process a fetch is a call: no hand-off to the fetcher threads and back); a fetch that appended sends its
        next request at once, so one round can move the HW. A follower whose own thread is fetching is left to it.
        True if the HW passed."""
        for _ in range(rounds):
            if part.high_watermark > offset:
                return True
            for b in list(part.remote):
                broker = self.brokers[b]
                follower = broker.partitions.get((part.topic, part.index)) if broker.alive else None
                fetcher = broker.fetcher
                if follower is not None and fetcher is not None and not follower.is_leader:
                    if follower.link is not None and follower.link.running:
                        continue  # its rounds are the native fetcher's
                    try:
                        fetcher.fetch_once(follower, blocking=False, send_next=True)
                    except Exception:  # noqa: BLE001 - its fetcher thread meets (and logs) the same error
                        return False  # the wait below decides
        return part.high_watermark > offset

    def wake_followers(self) -> None:
        for broker in self.brokers.values():
            broker.wake.set()

    def closed_cleanly(self) -> bool:
        """Whether the last close of every live broker's directory was clean (no log needs recovering)."""
        return all(b.logs.clean_shutdown for b in self.brokers.values() if b.alive)

    def transaction_partitions(self) -> set[tuple[str, int]] | None:
        """The partitions not loaded yet that may hold a transaction its coordinator already ended: those the last
        clean close noted with an open transaction; None (every partition) after an unclean shutdown."""
        if not self.closed_cleanly():
            return None
        return set(self.catalogue.open_transactions)

    def replicate(self, max_rounds: int = 1000) -> int:
        """Run fetch rounds for every follower until nothing moves; the bytes replicated."""
        total = 0
        fetchers = {b: ReplicaFetcher(b, self.leader_of) for b in self.brokers}
        for _ in range(max_rounds):
            with self._admin_lock:
                followers = [(b, p) for b, broker in self.brokers.items() if broker.alive
                             for p in broker.followers()]
            before = [(p.log.log_end_offset, p.log.high_watermark) for _, p in followers]
            total += sum(fetchers[b].fetch_once(p) for b, p in followers)
            if before == [(p.log.log_end_offset, p.log.high_watermark) for _, p in followers]:
                break
        return total

    def shrink_isrs(self) -> int:
        """Drop followers that have not caught up within replica_lag_time_max_ms from their partitions' ISR;
        the number of partitions whose ISR shrank."""
        return sum(part.maybe_shrink_isr() for part in list(self.leaders.values()) if part.remote)

    # --- failure ----------------------------------------------------------------------------------
    def fail_broker(self, broker_id: int) -> None:
        """Stop broker `broker_id` as if its process died: its replicas stop, it leaves every ISR at once and its
        leaderships move to the next live in-sync replica."""
        with self._admin_lock:
            self._check_open()
            broker = self._broker(broker_id, alive=True)
            for tp, part in self.leaders.items():  # what readers may have seen stays visible after failover
                if type(part) is not LazyPartition:  # (an unmade one is a single replica's: it has no failover)
                    self.hw_seen[tp] = max(self.hw_seen.get(tp, 0), part.high_watermark)
            broker.crash()
            with self.controller_lock:
                self.controller.alive.discard(broker_id)
                before = {(name, p): state.leader for name, rec in self.catalogue.topics.items()
                          for p, state in rec.states.items()}
                for name, rec in self.catalogue.topics.items():
                    for state in rec.states.values():
                        self.controller.broker_failed(broker_id, state, self.unclean(name))
                metadata.write(self.fs, self.path, self.catalogue)
            for name, rec in self.catalogue.topics.items():
                for p in range(rec.partitions):
                    if rec.states.get(p) is None:
                        if broker_id == 0:
                            self.leaders.pop((name, p), None)  # a single replica on the broker that died
                    elif rec.states[p].leader != before[(name, p)]:
                        self.apply(name, p)  # a new leader (or none): every live replica gets its role
                    elif broker_id in rec.states[p].replicas and (name, p) in self.leaders:
                        self.leaders[(name, p)].remove_from_isr(broker_id)  # the leader stays: ISR only

    def restart_broker(self, broker_id: int) -> None:
        """Bring a failed broker back: its log directory is recovered and it rejoins as a follower (or as leader
        of a partition that had none and can take it)."""
        with self._admin_lock:
            self._check_open()
            broker = self._broker(broker_id, alive=False)
            broker.restart()
            with self.controller_lock:
                self.controller.alive.add(broker_id)
                elected = {(name, p) for name, rec in self.catalogue.topics.items()
                           for p, state in rec.states.items()
                           if self.controller.broker_started(broker_id, state, self.unclean(name))}
                metadata.write(self.fs, self.path, self.catalogue)
            for (topic, p) in sorted(broker.logs.slots()):
                rec = self.catalogue.topics.get(topic)
                state = rec.states.get(p) if rec is not None else None
                if (rec is None or p >= rec.partitions or state is None and broker_id
                        or state is not None and broker_id not in state.replicas):
                    broker.logs.set_aside(topic, p, "stray")  # deleted or reassigned while the broker was down
            for name, rec in sorted(self.catalogue.topics.items()):
                for p in range(rec.partitions):
                    state = rec.states.get(p)
                    if state is None and broker_id == 0:
                        self.add_partition(name, p)
                    elif state is not None and broker_id in state.replicas:
                        part = broker.host(name, p, rec.topic_id)
                        if (name, p) in elected or state.leader < 0:
                            self.apply(name, p)
                        else:
                            part.make_follower(state.leader, state.leader_epoch, state.replicas, state.isr,
                                               controller_epoch=self.controller.epoch)
            if self.background:
                broker.start_fetcher(self.leader_of, self.native())
            broker.logs.start_recovery()  # (once every partition of the broker has its role again)

    def _broker(self, broker_id, alive: bool) -> Broker:
        broker = self.brokers.get(broker_id) if type(broker_id) is int else None
        if broker is None:
            raise InvalidConfigurationError(f"broker {broker_id!r} is not one of this engine's brokers "
                                            f"0..{self.catalogue.brokers - 1}")
        if broker.alive != alive:
            raise IllegalStateError(f"broker {broker_id} is {'already down' if alive else 'running'}")
        return broker

    # --- storage ----------------------------------------------------------------------------------
    def health(self) -> list[TaskFailure]:
        """The background tasks failing now (flush, checkpoints, retention, the cleaner, ... of every live broker):
        where, which, since when, how many attempts, the last error; then each partition directory set aside as
        `-stray` (task STRAY: its records kept and not served until it is restored). Empty while all is well."""
        return [f for b in self.live_brokers() for f in b.logs.health.failing() + b.logs.cleaner.health.failing()
                + [self._stray_failure(b, s) for s in b.logs.strays()]]

    @staticmethod
    def _stray_failure(broker: Broker, stray) -> TaskFailure:
        return TaskFailure(broker.logs.dir, STRAY, stray.since_ms, 1,
                           f"{stray.topic}-{stray.partition} set aside as {stray.path} ({stray.why}): its records are "
                           f"not served; check them (kafkalog verify), then restore it with kafkalog recover "
                           f"--restore-stray")

    def check_storage(self) -> list[TaskFailure]:
        """Run every live broker's flush and checkpoint tasks now, as the background thread does (a failure is
        recorded, logged once and retried with backoff there too), and a 1 MiB write probe; `health()`, with a
        failed probe added."""
        self._check_open()
        probes = [f for broker in self.live_brokers() for f in broker.logs.run_storage_tasks()]
        return self.health() + probes

    def live_brokers(self) -> list[Broker]:
        with self._admin_lock:
            return [b for b in self.brokers.values() if b.alive]

    def flush(self) -> None:
        """fsync every partition's unflushed appends; KafkaStorageError if that (or background work) fails."""
        self._check_open()
        for broker in list(self.brokers.values()):
            for lg in broker.logs.loaded_logs():  # (an unloaded log has nothing unflushed)
                lg.flush()
            broker.logs.check_health()


def leader_key(topic: str, index: int) -> TopicPartition:
    """The key of a partition in the engine's map of leaders: the TopicPartition structs.topic_partitions shares, so
    a lookup by a consumer's own (shared) TopicPartitions matches on identity without reading the key."""
    return topic_partitions(topic, [index])[0]
