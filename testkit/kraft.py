"""A replicated Apache Kafka cluster on one machine, in KRaft mode: n nodes, each a broker and a
controller (a voter of the metadata quorum) in one JVM, from the jars `make reference` fetched. It
is what logcore's three brokers on ZooKeeper (testkit/clusterproc.py, testkit/faults/cluster.py)
are held against: the same replication factor, min.insync.replicas and clients.

    cluster = KraftCluster(base, loopback(3)).start()   # free ports on 127.0.0.1
    cluster.bootstrap                                     # "127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2"
    cluster.leader("t", 0)                                # (leader, -1, isr), as the brokers answer
    cluster.controller()                                  # the quorum's leader, from the nodes' disks
    cluster.nodes[1].kill(); cluster.nodes[1].start()     # SIGKILL, then the same data again
    cluster.stop()

A `Placement` says where a node listens and what its command runs under: testkit/faults/kraft.py
puts each node in a network namespace of its own (`ip netns exec NS`). Node ids are 0..n-1, as
logcore's broker ids. The heap is small (the machine is shared): 512 MiB a node unless told.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sandbox.process import free_port

from .reference import ApacheKafka, format_storage, new_cluster_id, server_properties

# Replicated as the cluster under test: internal topics with three replicas and two in sync, unclean
# election off (Kafka's default, said aloud), fewer internal partitions than Kafka's 50 (as logcore's
# fault cluster: the machine has 2 cores), and no initial rebalance delay (as in the tests).
REPLICATED = {
    "default.replication.factor": "3", "min.insync.replicas": "2", "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "3", "share.coordinator.state.topic.min.isr": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass(frozen=True)
class Placement:
    """Where one node listens (broker port, controller port) and the command prefix it runs under."""

    host: str
    port: int
    controller_port: int
    prefix: tuple[str, ...] = ()


def loopback(nodes: int) -> list[Placement]:
    return [Placement("127.0.0.1", free_port(), free_port()) for _ in range(nodes)]


class KraftCluster:
    def __init__(self, base: Path, placements: list[Placement], config: dict[str, str] | None = None,
                 heap: str = "512m") -> None:
        self.base = Path(base)
        self.placements = placements
        self.config = {**REPLICATED, **(config or {})}
        self.heap = heap
        self.nodes: list[ApacheKafka] = []
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    @property
    def voters(self) -> str:
        return ",".join(f"{i}@{p.host}:{p.controller_port}" for i, p in enumerate(self.placements))

    def start(self) -> "KraftCluster":
        """Format every node's log directory for one cluster id, start them all, return once each
        has joined the quorum, registered its broker and listens."""
        cluster_id = new_cluster_id()
        for node_id, place in enumerate(self.placements):
            base = self.base / f"kafka-{node_id}"
            base.mkdir(parents=True, exist_ok=True)
            (base / "server.properties").write_text(server_properties(
                base, place.port, place.controller_port, host=place.host,
                extra={"node.id": str(node_id), "controller.quorum.voters": self.voters, **self.config}))
            self.nodes.append(ApacheKafka(base, place.port, place.controller_port, self.heap, host=place.host,
                                          prefix=place.prefix))
        try:
            with ThreadPoolExecutor(len(self.nodes)) as pool:  # (a JVM each: in parallel)
                list(pool.map(lambda node: format_storage(node.base / "server.properties", cluster_id), self.nodes))
            seen = [node.launch() for node in self.nodes]
            for node, offset in zip(self.nodes, seen):
                node.wait_until(offset)
        except BaseException:
            self.stop()
            raise
        return self

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def leader(self, topic: str, partition: int) -> tuple[int, int, list[int]]:
        """(leader, -1, ISR) as a broker answers Metadata now (-1 for a partition with no leader).
        The leader epoch is not in what the clients' Metadata exposes: -1 there too."""
        metadata = self.admin().list_topics(topic, timeout=10)
        found = metadata.topics[topic].partitions.get(partition)
        if found is None:
            return -1, -1, []
        return found.leader, -1, sorted(found.isrs)

    def controller(self) -> int:
        """The metadata quorum's leader: the newest epoch's leader among the nodes' quorum-state files
        (each voter writes it on every change of epoch, leader or vote). -1 while none is known."""
        best = (-1, -1)
        for node in self.nodes:
            try:
                state = json.loads((node.base / "logs" / "__cluster_metadata-0" / "quorum-state").read_text())
            except (FileNotFoundError, ValueError):  # (not written yet, or being rewritten)
                continue
            if state.get("leaderId", -1) >= 0:
                best = max(best, (state["leaderEpoch"], state["leaderId"]))
        return best[1]

    def data_dir(self, node_id: int) -> Path:
        """Where node `node_id` keeps its partitions (`topic-partition/` segment directories)."""
        return self.nodes[node_id].base / "logs"

    def stop(self, remove: bool = False) -> None:
        """SIGKILL every node (a test cluster has nothing to shut down cleanly for)."""
        for node in self.nodes:
            node.kill()
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)
