"""Who is in the cluster, as the APIs that name brokers see it (Metadata, DescribeCluster,
FindCoordinator): the live brokers with their addresses, the controller, each partition's leader,
replicas and ISR, and the broker that coordinates a key. A broker with no ZooKeeper is a cluster
of one; a ZooKeeper cluster (zk_cluster.py) gives the same answers from ZooKeeper (docs/cluster.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from ..protocol.errors import (BrokerError, ElectionNotNeeded, InvalidReplicaAssignment, NoReassignmentInProgress,
                               UnknownTopicOrPartition)


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str   # on the listener brokers replicate over
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()  # (listener name, host, port) of every listener

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where clients of `listener` reach this broker (Kafka answers each listener with its own
        addresses); None if the broker has no such listener."""
        if not self.endpoints:
            return self.host, self.port
        return next(((host, port) for name, host, port in self.endpoints if name == listener), None)


@dataclass(frozen=True)
class PartitionView:
    leader: int  # -1: none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class ClusterView(Protocol):
    """What the APIs ask of the cluster; `SingleBrokerView` and `ZooKeeperCluster` answer it."""

    @property
    def controller_id(self) -> int: ...

    def live_nodes(self) -> list[Node]: ...

    def coordinator(self, topic: str, partition: int) -> Node | None: ...

    def partition(self, topic: str, index: int) -> PartitionView | None: ...

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None,
                            unclean: bool) -> dict[tuple[str, int], BrokerError | None]: ...

    async def reassign(self, changes: dict[tuple[str, int], list[int] | None]
                       ) -> dict[tuple[str, int], BrokerError | None]: ...

    async def reassignments(self) -> dict: ...


class SingleBrokerView:
    """The cluster of one broker: it is every live broker, the controller and every coordinator."""

    def __init__(self, broker_id: int, replicas, this_node: Callable[[], Node]) -> None:
        self.broker_id = broker_id
        self._replicas = replicas  # (the replica manager's queries: find, hosts, hosted_partitions)
        self._this_node = this_node  # (its addresses are known once its listeners are bound)

    @property
    def this_node(self) -> Node:
        return self._this_node()

    @property
    def controller_id(self) -> int:
        return self.broker_id

    def live_nodes(self) -> list[Node]:
        return [self.this_node]

    def coordinator(self, topic: str, partition: int) -> Node | None:
        """The broker that coordinates the keys of `topic`'s `partition`: its leader."""
        return self.this_node

    def partition(self, topic: str, index: int) -> PartitionView | None:
        partition = self._replicas.find(topic, index)
        if partition is None:
            return None
        # (the broker leads every partition it hosts, one whose log is offline included)
        return PartitionView(self.broker_id, partition.leader_epoch, partition.replicas, partition.isr, [])

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None,
                            unclean: bool) -> dict[tuple[str, int], BrokerError | None]:
        """ElectLeaders: a broker alone already leads every partition."""
        hosts = self._replicas.hosts
        return {tp: ElectionNotNeeded("a broker alone leads every partition") if hosts(*tp)
                else UnknownTopicOrPartition(f"no partition {tp[0]}-{tp[1]}")
                for tp in (self._replicas.hosted_partitions() if partitions is None else partitions)}

    async def reassign(self, changes: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], BrokerError | None]:
        """AlterPartitionReassignments: a broker alone holds every replica, and can move none."""
        me = self.broker_id

        def refusal(tp: tuple[str, int], target: list[int] | None) -> BrokerError | None:
            if not self._replicas.hosts(*tp):
                return UnknownTopicOrPartition(f"no partition {tp[0]}-{tp[1]}")
            if target is None:
                return NoReassignmentInProgress(f"{tp[0]}-{tp[1]} is not being reassigned")
            return None if target == [me] else InvalidReplicaAssignment(
                f"{target}: a broker alone (id {me}) is the only replica there can be")
        return {tp: refusal(tp, target) for tp, target in changes.items()}

    async def reassignments(self) -> dict:
        return {}
