"""The in-process controller (what Kafka's KRaft controller decides for partitions): replica assignment, leader
election from the ISR, ISR changes (AlterPartition) and reactions to a broker failing or coming back.

Assignment: broker 0's log directory is the directory the user opened, so it holds a replica of every partition
(the directory stays a complete copy for dump-log, Spark and Kafka's tools); partition p's replicas are the
brokers in turn from p % N (its preferred leader, so leadership spreads), broker 0 replacing the last one when the
turn leaves it out. Election picks the first live replica in assignment order that is in the ISR; with
`unclean.leader.election.enable` and no such replica, the first live replica, whose log then defines the partition.
Each new leader gets the next leader epoch. A broker that fails leaves every ISR at once (as a broker whose session
expired), except an ISR's last member, which stays so that only it can be elected cleanly when it returns.
The controller epoch increases each time the engine opens (a new controller); a LeaderAndIsr from an older one is
refused by the partitions (StaleControllerEpochError).
On-disk: the states are kept in the engine's catalogue (engine.metadata) by the facade; this module holds them.
Thread-safety: the engine calls it under its lock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NO_LEADER = -1


@dataclass
class PartitionState:
    replicas: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"replicas": self.replicas, "leader": self.leader, "leader_epoch": self.leader_epoch, "isr": self.isr}

    @classmethod
    def from_dict(cls, doc: dict) -> PartitionState:
        return cls([int(b) for b in doc["replicas"]], int(doc["leader"]), int(doc["leader_epoch"]),
                   [int(b) for b in doc["isr"]])


def assign(partition: int, replication_factor: int, brokers: int) -> list[int]:
    """The replicas of `partition`: RF brokers in turn from broker `partition % brokers` (its preferred
    leader), with broker 0 taking the last place when the turn leaves it out."""
    replicas = [(partition + i) % brokers for i in range(replication_factor)]
    if 0 not in replicas:
        replicas[-1] = 0
    return replicas


class Controller:
    def __init__(self, brokers: int, epoch: int) -> None:
        self.brokers = brokers
        self.epoch = epoch
        self.alive: set[int] = set(range(brokers))

    def new_partition(self, partition: int, replication_factor: int) -> PartitionState:
        replicas = assign(partition, replication_factor, self.brokers)
        return PartitionState(replicas, replicas[0], 0, list(replicas))

    def elect(self, state: PartitionState, unclean: bool) -> bool:
        """Choose a leader for a partition whose leader is gone (or was never live); True if the state changed."""
        if state.leader in self.alive:
            return False
        clean = [b for b in state.replicas if b in self.alive and b in state.isr]
        if clean:
            state.leader, state.isr = clean[0], [b for b in state.isr if b in self.alive]
        elif unclean and any(b in self.alive for b in state.replicas):
            state.leader = next(b for b in state.replicas if b in self.alive)
            state.isr = [state.leader]
        else:
            changed = state.leader != NO_LEADER
            state.leader = NO_LEADER
            return changed
        state.leader_epoch += 1
        return True

    def broker_failed(self, broker: int, state: PartitionState, unclean: bool) -> None:
        """`broker` died (and left `alive`): it leaves the ISR (unless it is the last member) and its
        leaderships move."""
        if broker in state.isr and len(state.isr) > 1:
            state.isr = [b for b in state.isr if b != broker]
        if state.leader == broker:
            self.elect(state, unclean)

    def broker_started(self, broker: int, state: PartitionState, unclean: bool) -> bool:
        """`broker` is back (in `alive` again): an offline partition it can lead gets it as leader; otherwise it
        follows."""
        if state.leader == NO_LEADER and broker in state.replicas:
            return self.elect(state, unclean)
        return False

    def alter_isr(self, state: PartitionState, leader: int, leader_epoch: int, isr) -> bool:
        """AlterPartition from a leader: accepted only from the current leader in the current epoch."""
        if leader != state.leader or leader_epoch != state.leader_epoch:
            return False
        state.isr = sorted(isr, key=state.replicas.index)
        return True
