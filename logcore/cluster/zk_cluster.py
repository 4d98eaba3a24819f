"""A broker's place in a ZooKeeper cluster (docs/cluster.md): the session, its registration and the
controller election (membership.py), the controller it may be (controller.py), and what it learns
of topics and partitions (zk_state.py). It is also this broker's view of the cluster, the one that
Metadata, DescribeCluster and FindCoordinator answer from, as `SingleBrokerView` is for a broker alone.

kazoo calls are blocking; `start` and `stop` run on a worker thread, and the few writes made from
the event loop (an ISR change, a topic's creation, a producer-id block) are single round trips.
"""

from __future__ import annotations

import asyncio
import json
import logging

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from common.zk_client import stop_client

from ..config import BrokerConfig

from . import zk_layout as layout
from .controller import Controller
from .election import NO_LEADER
from .local import new_cluster_id
from .membership import ZooKeeperMembership
from .view import Node, PartitionView
from .zk_state import ClusterState

log = logging.getLogger(__name__)

CLUSTER_ID = "/cluster/id"


class ZooKeeperCluster:
    def __init__(self, connect: str, broker_id: int, config: BrokerConfig) -> None:
        self.connect = connect
        self.config = config
        self.zk = KazooClient(hosts=connect, timeout=config.get("zookeeper.session.timeout.ms") / 1000)
        # (its address is known once the broker listens: `start` gives it)
        self.membership = ZooKeeperMembership(self.zk, Node(broker_id, "", 0, config.get("broker.rack")))
        self.controller = Controller(
            self.zk, self.membership, config.get("unclean.leader.election.enable"),
            config.get("leader.imbalance.check.interval.seconds") if config.get("auto.leader.rebalance.enable") else None,
            config.get("leader.imbalance.per.broker.percentage"))
        self.state = ClusterState(self.zk)
        self.cluster_id = ""

    # -- lifecycle (blocking: call on a worker thread) -----------------------------------------

    def start(self, node: Node) -> None:
        """Connect and learn the topics, as `node` (registered by `register`)."""
        self.membership.node = node
        timeout_s = self.config.get("zookeeper.connection.timeout.ms") / 1000
        self._ensure_chroot(timeout_s)
        self.zk.start(timeout=timeout_s)
        self.cluster_id = self._cluster_id()
        self.state.start()

    def register(self) -> None:
        """Register this broker among the live ones and stand for controller: once its logs are open,
        as Kafka registers only after its logs load (the controller would otherwise elect it leader of
        partitions it cannot serve yet)."""
        # (a session of a killed broker ends within its timeout, plus the server's tick)
        self.membership.start(stale_wait_s=1.5 * self.config.get("zookeeper.session.timeout.ms") / 1000)
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        stop_client(self.zk)

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool) -> dict:
        """ElectLeaders, carried out by the controller (NotController on any other broker)."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self.controller.elect_leaders, partitions, unclean)

    async def reassign(self, changes: dict[tuple[str, int], list[int] | None]) -> dict:
        """AlterPartitionReassignments, carried out by the controller (NotController elsewhere)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.controller.reassign, changes)

    async def reassignments(self) -> dict:
        """ListPartitionReassignments, from ZooKeeper."""
        return await asyncio.get_running_loop().run_in_executor(None, self.controller.reassignments)

    def _ensure_chroot(self, timeout_s: float) -> None:
        """Kafka creates its chroot (`host:port/binlake`) on first start; kazoo needs it to exist."""
        hosts, slash, chroot = self.connect.partition("/")
        if not slash or not chroot.strip("/"):
            return
        client = KazooClient(hosts=hosts)
        client.start(timeout=timeout_s)
        try:
            client.ensure_path("/" + chroot.strip("/"))
        finally:
            client.stop()
            client.close()

    def _cluster_id(self) -> str:
        """The cluster's id, from `/cluster/id` (the first broker to start writes it, as Kafka's do)."""
        try:
            self.zk.create(CLUSTER_ID, json.dumps({"version": "1", "id": new_cluster_id()}).encode(), makepath=True)
        except NodeExistsError:
            pass
        return json.loads(self.zk.get(CLUSTER_ID)[0])["id"]

    # -- the cluster view ----------------------------------------------------------------------

    @property
    def this_node(self) -> Node:
        return self.membership.node

    @property
    def controller_id(self) -> int:
        return self.membership.controller_id

    def live_nodes(self) -> list[Node]:
        return self.membership.live_nodes()

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        node = next((n for n in self.live_nodes() if n.node_id == broker_id), None)
        return (node.host, node.port) if node else None

    def coordinator(self, topic: str, partition: int) -> Node | None:
        view = self.partition(topic, partition)
        return next((n for n in self.live_nodes() if view and n.node_id == view.leader), None)

    def partition(self, topic: str, index: int) -> PartitionView | None:
        state = self.state.state(topic, index)
        if state is None:
            return None
        replicas = self.state.replicas(topic, index)
        live = {node.node_id for node in self.live_nodes()}
        return PartitionView(state.leader if state.leader != NO_LEADER else -1, state.leader_epoch, replicas,
                             list(state.isr), [b for b in replicas if b not in live])

    # -- a leader's ISR changes (replication/isr.py) -------------------------------------------

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        return await asyncio.get_running_loop().run_in_executor(
            None, self._write_isr, topic, index, leader_epoch, isr)

    def _write_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        """Conditional on the state znode's version: a controller's decision in between wins."""
        path = layout.partition_state_path(topic, index)
        try:
            data, stat = self.zk.get(path)
            state = layout.decode_partition_state(path, data)
            if state.leader != self.membership.node.node_id or state.leader_epoch != leader_epoch:
                return False
            changed = layout.PartitionState(state.leader, leader_epoch, tuple(isr), state.controller_epoch)
            self.zk.set(path, layout.encode_partition_state(changed), version=stat.version)
            return True
        except (NoNodeError, BadVersionError, layout.LayoutError) as exc:
            log.info("%s-%d: ISR %s not written (%s): the partition's state changed", topic, index, isr,
                     type(exc).__name__)
            return False
