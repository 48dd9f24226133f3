"""One simulated broker of an engine (what Kafka's ReplicaManager is to a broker): its log directory (a
engine.log.log_manager.LogManager), the partitions it hosts as leader or follower, and its replica fetcher
thread. `crash()` stops it as a dying process would (no flush, no checkpoint, no clean-shutdown marker) and
`restart()` recovers its directory; the controller decides what each hosted partition does afterwards.
On-disk: the broker's Kafka log directory; broker 0's is the directory the user opened, broker b's is
`<that>/brokers/<b>`.
Thread-safety: the engine changes a broker under its lock; the fetcher thread only reads `followers()`.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

from engine.common.closing import Steps
from engine.common.errors import NotLeaderOrFollowerError
from engine.log.log_manager import LogManager
from engine.replication.partition import LazyPartition, Partition, only_replica_loaded
from engine.replication.replica_fetcher import ReplicaFetcher, ReplicaFetcherThread

BROKERS_DIR = "brokers"
_MAKING = threading.Lock()  # (a leaf lock: held while a LazyPartition's Partition is made, in every broker)


def broker_dir(root: str, broker_id: int) -> str:
    return root if broker_id == 0 else os.path.join(root, BROKERS_DIR, str(broker_id))


class Broker:
    def __init__(self, broker_id: int, logs: LogManager, partition_factory: Callable[..., Partition]) -> None:
        self.id, self.logs = broker_id, logs
        self.alive = True
        self.partitions: dict[tuple[str, int], Partition | LazyPartition] = {}
        self._new_partition = partition_factory
        self.wake = threading.Event()
        self.fetcher: ReplicaFetcher | None = None  # the fetch logic its thread runs (a waiter may run it too)
        logs.on_loaded = self._log_loaded
        self._fetcher: ReplicaFetcherThread | None = None

    def host(self, topic: str, index: int, topic_id: str | None = None) -> Partition:
        """This broker's replica of `topic`-`index`, made (its log created if the directory lacks it, and loaded)."""
        key = (topic, index)
        part = self.partitions.get(key)
        if type(part) is LazyPartition:
            return self.made(part)
        if part is None:
            slot = self.logs.slot(key) or self.logs.create_slot(topic, index, topic_id)
            part = self.partitions[key] = self._new_partition(topic, index, slot.load(), self.id)
        return part

    def lead_alone(self, keys: list[tuple[str, int]], topic_id: str | None = None) -> dict:
        """This broker's replicas of `keys` as their only replicas, leading them (make_leader() without arguments),
        by key: a LazyPartition for each whose log is not loaded (`made()` makes its Partition)."""
        out, hosted, logs = {}, self.partitions, self.logs
        for key in keys:
            part = hosted.get(key)
            if part is None:
                slot = logs.slot(key) or logs.create_slot(key[0], key[1], topic_id)
                log = slot.loaded_log
                if log is None:  # (loading the log alone settles its HW: `_log_loaded`)
                    out[key] = hosted[key] = LazyPartition(key[0], key[1], slot, self.id)
                    continue
                part = hosted[key] = self._new_partition(key[0], key[1], log, self.id)
            elif type(part) is LazyPartition:
                out[key] = part  # (leading alone already)
                continue
            part.make_leader()
            out[key] = part
        return out

    def made(self, lazy: LazyPartition) -> Partition:
        """The Partition in `lazy`'s place: made now (its log loaded, leading as the only replica) and put in the map
        instead of `lazy`, or the one made before. NotLeaderOrFollowerError if the broker hosts neither any more."""
        key = (lazy.topic, lazy.index)
        part = self.partitions.get(key)
        if part is lazy:
            log = lazy.slot.load()  # (before the lock: other partitions are made meanwhile)
            with _MAKING:
                part = self.partitions.get(key)
                if part is lazy:
                    part = self._new_partition(lazy.topic, lazy.index, log, self.id)
                    part.make_leader()
                    self.partitions[key] = part
        if part is None or type(part) is LazyPartition:
            raise NotLeaderOrFollowerError(f"{lazy.topic}-{lazy.index} is no longer hosted by broker {self.id}",
                                           file=lazy.slot.dir)
        return part

    def _log_loaded(self, tp: tuple[str, int], log) -> None:
        """As a log of this broker loads: the only replica of a partition not made yet has its HW at its log end."""
        if type(self.partitions.get(tp)) is LazyPartition:
            only_replica_loaded(log)

    def stop_hosting(self, topic: str, index: int) -> None:
        """Stop hosting `topic`-`index`, its log kept (until `drop`)."""
        part = self.partitions.pop((topic, index), None)
        if part is not None and type(part) is not LazyPartition:  # (a placeholder has nothing to stop)
            with part.fetch_lock:  # a fetch for it in progress (a waiter's) ends first; none starts after
                part.make_offline(discard=True)

    def drop(self, topic: str, index: int) -> None:
        """Stop hosting `topic`-`index` and delete its log (the topic or its replica went away)."""
        self.stop_hosting(topic, index)
        if self.logs.slot((topic, index)) is not None:
            self.logs.delete_log(topic, index)

    def followers(self) -> list[Partition]:
        return [p for p in list(self.partitions.values()) if not p.is_leader and p.leader_id is not None]

    def start_fetcher(self, leader_of: Callable[[Partition], Partition | None], native=None) -> None:
        """Start the fetcher thread; `native`: the engine's native replica fetcher, which steady-state followers
        are linked to (replication.replica_fetcher)."""
        if self._fetcher is None:
            self.fetcher = ReplicaFetcher(self.id, leader_of, native=native)
            self._fetcher = ReplicaFetcherThread(self.fetcher, self.followers, self.wake)

    def stop_fetcher(self, discard: bool = False) -> None:
        """Stop the fetcher thread and unlink every follower (its log brought up to what its link wrote, unless
        `discard`: the broker is dying)."""
        if self._fetcher is not None:
            self._fetcher.stop()
            self._fetcher = self.fetcher = None
        for part in list(self.partitions.values()):
            if part.link is not None:  # (never a LazyPartition's: it has no link)
                with part.fetch_lock:
                    part.unlink(discard)

    def crash(self) -> None:
        """Die: the fetcher stops, every hosted partition goes (its log closed as a killed process leaves it)."""
        self.stop_fetcher(discard=True)
        self.alive = False
        for part in self.partitions.values():
            if type(part) is LazyPartition:
                continue  # (a placeholder has nothing to stop)
            with part.fetch_lock:  # a fetch for it in progress (a waiter's) ends first; none starts after
                part.make_offline(discard=True)
        self.partitions = {}
        self.logs.crash()

    def restart(self) -> None:
        """Come back: the directory is recovered; the controller then says which partitions to host and how."""
        self.logs.restart()
        self.alive = True

    def close(self) -> None:
        """Shut down cleanly; a broker that is down stays as it died (its directory is recovered next time). The
        directory is closed whatever stopping the fetcher raised; the first error is raised."""
        steps = Steps()
        steps.run(self.stop_fetcher)
        steps.run(self.logs.close if self.alive else self.logs.release)
        steps.raise_first()
