"""The composition root of an open engine: every manager and coordinator is made here, in order, and each is handed
what it uses (a narrow interface, named in its constructor), not the engine. engine.engine.Engine, the facade, holds
the result (`Parts`) and delegates to it.

The order: the options checked; the directory made and its catalogue read (a new controller epoch for this open);
the replica manager (the brokers, the controller, the leader map), the admin manager (topics, the catalogue's
saves), the coordinators' side of the engine (engine.internal_topics), broker 0's log manager (with the engine's
periodic tasks on its background thread) and the other brokers'; then the catalogue reconciled with the directory,
every partition given its role, the replica fetchers started, the producer ids' next block found, the coordinators
whose internal topics exist loaded, and only then each broker's log recovery started (no log loads before its
partition knows its role).
Crash policy: a failure anywhere closes every broker made so far and the native fetcher, whatever the close raised,
and the error is raised: a failed open holds no thread, lock or descriptor.
Thread-safety: runs on the opening thread, before anyone else sees the engine.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Callable

from engine import limits, metadata
from engine.admin_manager import AdminManager
from engine.client_registry import ClientRegistry
from engine.clients.heartbeat_thread import HeartbeatThread
from engine.common.changes import BumpingDict
from engine.common.closing import Steps
from engine.common.clock import Clock, SystemClock
from engine.common.errors import InvalidConfigurationError, InvalidLogDirectoryError, not_supported_yet
from engine.coordinators import Coordinators
from engine.groups.group_coordinator import OFFSETS_RETENTION_CHECK_INTERVAL_MS
from engine.groups.group_coordinator_config import GroupConfig
from engine.internal_topics import InternalTopics
from engine.log.log_cleaner import CleanerConfig
from engine.log.log_manager import LogManager
from engine.log.unified_log import DEFAULT_EXPIRATION_MS
from engine.metadata import Catalogue
from engine.producer_id_manager import ProducerIdManager
from engine.replica_manager import ReplicaManager
from engine.replication.broker import Broker, broker_dir
from engine.replication.partition import REPLICA_LAG_TIME_MAX_MS, Partition
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.staged_writes.apply import Owner
from engine.staged_writes.queue import StagedWrites
from engine.txn.transaction_coordinator import EXPIRE_CHECK_INTERVAL_MS, TransactionConfig

PRODUCER_EXPIRATION_CHECK_MS = 600_000
MAX_BROKERS = 64
GROUP_TICK_MS = 500  # how often the background thread applies group deadlines nobody is waiting on
STAGED_WRITES_CHECK_MS = 200  # how often the background thread looks for staged writes to commit (a Spark sink's)


@dataclass
class Parts:
    """What an open engine is made of (see the module docstring)."""

    path: str
    clock: Clock
    fs: FileSystem
    defaults: LogConfig             # the topics' default config
    max_partitions: int
    admin_lock: threading.RLock     # topic and broker changes, close()
    registry: ClientRegistry
    heartbeats: HeartbeatThread     # every group member's heartbeats (a thread from the first)
    leaders: BumpingDict            # each partition's leader; a change bumps changes.LOGS
    catalogue: Catalogue
    replicas: ReplicaManager
    admin: AdminManager
    logs: LogManager                # broker 0's: the directory opened
    internal: InternalTopics
    producer_ids: ProducerIdManager
    coordinators: Coordinators
    staged: StagedWrites


def assemble(facade: Owner, path, *, clock: Clock | None = None, fs: FileSystem | None = None,
             background: bool = True, topic_defaults: dict | None = None,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, fd_budget: int | None = None,
             brokers: int | None = None, replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
             group_config: dict | None = None, transaction_config: dict | None = None,
             cleaner_config: dict | None = None, hw_checkpoint_interval_ms: int = LogManager.HW_CHECKPOINT_MS,
             max_partitions: int = limits.DEFAULT_MAX_PARTITIONS, **unknown) -> Parts:
    """The parts of an engine open on `path` with these options (engine.engine.Engine documents them); `facade` is
    the engine that will hold them, which applies staged writes through its public API."""
    if unknown:
        raise InvalidConfigurationError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
    path = _log_dir_path(path)
    max_partitions = limits.check_max_partitions(max_partitions)
    clock = clock or SystemClock()
    if fd_budget is not None and (not isinstance(fd_budget, int) or isinstance(fd_budget, bool) or fd_budget < 4):
        raise InvalidConfigurationError(f"fd_budget={fd_budget!r} must be an int >= 4")
    if fs is not None and fd_budget is not None:
        fs.fd_budget = fd_budget
    fs = fs or FileSystem(fd_budget)
    defaults = LogConfig.from_dict(topic_defaults)
    if not isinstance(producer_id_expiration_ms, int) or producer_id_expiration_ms < 1:
        raise InvalidConfigurationError(f"producer.id.expiration.ms={producer_id_expiration_ms!r} must be >= 1")
    if type(replica_lag_time_max_ms) is not int or replica_lag_time_max_ms < 1:
        raise InvalidConfigurationError(f"replica_lag_time_max_ms={replica_lag_time_max_ms!r} must be an int >= 1")
    txn_config, groups_config = TransactionConfig.of(transaction_config), GroupConfig.of(group_config)
    cleaner = CleanerConfig.of(cleaner_config)
    if type(hw_checkpoint_interval_ms) is not int or hw_checkpoint_interval_ms < 1:
        raise InvalidConfigurationError(f"hw_checkpoint_interval_ms={hw_checkpoint_interval_ms!r} must be an int >= 1")
    try:
        fs.makedirs(path)
    except OSError as exc:
        raise InvalidLogDirectoryError(f"cannot use {path} as a log directory: {exc.strerror}", file=path) from None
    found = metadata.read(fs, path)
    catalogue = found or Catalogue()
    catalogue.brokers = _broker_count(brokers, found)
    catalogue.controller_epoch += 1  # a new controller for this open

    admin_lock = threading.RLock()
    clients = ClientRegistry(path)
    leaders: dict[tuple[str, int], Partition] = BumpingDict()
    replicas = ReplicaManager(path, fs, clock, catalogue, leaders, admin_lock, clients.check_open, defaults,
                              background=background, lag_ms=replica_lag_time_max_ms)
    admin = AdminManager(path, fs, clock, catalogue, defaults, max_partitions, replicas, admin_lock,
                         clients.check_open, clients.registered)
    internal = InternalTopics(path, catalogue, leaders, admin, replicas, clients.check_open, clients.appended)
    producer_ids = ProducerIdManager(catalogue, admin.save, clients.check_open)  # (started once the logs are known)
    coordinators = Coordinators(internal, clock, lambda: clients.closed, groups_config, txn_config,
                                allocate_producer_id=producer_ids.allocate,
                                transaction_partitions=replicas.transaction_partitions, topics=admin.topic_shapes,
                                share_reads={"topic_named": admin.topic_named, "partition": facade.partition,
                                             "dynamic": admin.group_configs, "available": clients.appended})
    staged = StagedWrites(fs, path, facade)  # writes other processes staged: applied on a thread of its own
    log_options = {"producer_id_expiration_ms": producer_id_expiration_ms}

    def while_open(task: Callable[[], object]) -> Callable[[], object]:
        """`task` for the background thread: nothing once close() has begun (a closing engine is not a failure)."""
        return lambda: None if clients.closed else task()

    logs = LogManager(
        path, fs=fs, clock=clock, configs=admin.log_config, background=background, log_options=log_options,
        topic_ids=admin.topic_id_of, cleaner_config=cleaner, hw_checkpoint_interval_ms=hw_checkpoint_interval_ms,
        start_recovery=False,
        tasks={name: (every, while_open(task)) for name, (every, task) in {
            "producer-expiration": (PRODUCER_EXPIRATION_CHECK_MS, lambda: logs.expire_producers()),
            "isr-expiration": (max(1, replica_lag_time_max_ms // 2), replicas.shrink_isrs),
            "transaction-abort": (txn_config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                  coordinators.abort_timed_out_transactions),
            "transactional-id-expiration": (EXPIRE_CHECK_INTERVAL_MS, coordinators.expire_transactional_ids),
            "group-timeouts": (GROUP_TICK_MS, coordinators.tick_groups),
            "delete-expired-group-metadata": (OFFSETS_RETENTION_CHECK_INTERVAL_MS, coordinators.expire_group_offsets),
            "staged-writes": (STAGED_WRITES_CHECK_MS, staged.poll)}.items()})
    replicas.brokers[0] = Broker(0, logs, replicas.new_partition)
    try:
        for b in range(1, catalogue.brokers):
            replicas.brokers[b] = Broker(b, LogManager(
                broker_dir(path, b), fs=fs, clock=clock, configs=admin.log_config, background=background,
                log_options=log_options, node_id=b, cleaner_config=cleaner,
                hw_checkpoint_interval_ms=hw_checkpoint_interval_ms, start_recovery=False), replicas.new_partition)
        admin.reconcile(adopt=found is None)
        for name, rec in sorted(catalogue.topics.items()):
            replicas.add_partitions(name, range(rec.partitions))
        replicas.start_fetchers()
        # a catalogue's block end is past every id handed out; a directory adopted without one says in its logs
        highest = -1 if found is not None else max(
            (slot.load().producer_state.max_producer_id() for slot in logs.slots().values()), default=-1)
        producer_ids.start(max(catalogue.producer_id_block_end, highest + 1))
        admin.save()
        coordinators.load_existing()
        for broker in replicas.brokers.values():  # (every partition has its role: no log loads before it knows)
            if broker.alive:
                broker.logs.start_recovery()
    except BaseException:
        steps = Steps()  # each broker closed, then the native fetcher (its links unlinked by then), whatever raised
        for broker in replicas.brokers.values():
            steps.run(broker.close)
        if replicas.native_fetcher is not None:
            steps.run(replicas.native_fetcher.close)
        raise
    return Parts(path, clock, fs, defaults, max_partitions, admin_lock, clients, HeartbeatThread(clock), leaders,
                 catalogue, replicas, admin, logs, internal, producer_ids, coordinators, staged)


def _broker_count(brokers, found: Catalogue | None) -> int:
    """The directory's broker count: as stored, or `brokers` for a new one (a typed error otherwise)."""
    stored = found.brokers if found is not None else None
    if brokers is None:
        return stored or 1
    if type(brokers) is not int or not 1 <= brokers <= MAX_BROKERS:
        raise InvalidConfigurationError(f"brokers={brokers!r} must be an int in [1, {MAX_BROKERS}]")
    if stored is not None and brokers != stored:
        raise not_supported_yet(f"changing the broker count of a log directory (it has {stored}, got {brokers})")
    return brokers


def _log_dir_path(path) -> str:
    """`path` as an absolute log directory path, or a typed error for what cannot name one."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise InvalidConfigurationError(f"the log directory path must be a str or os.PathLike, got "
                                        f"{type(path).__name__}")
    if not path or "\0" in path:
        raise InvalidConfigurationError(f"{path!r} is not a log directory path (empty, or holds a NUL)")
    return os.path.abspath(path)
