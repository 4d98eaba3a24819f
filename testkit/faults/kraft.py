"""Apache Kafka (KRaft) under the same faults as logcore's cluster: a three-node `testkit.kraft`
cluster, each node (broker and controller voter in one JVM) in a network namespace of its own, with
the interface of `cluster.FaultCluster`, so `nemesis.run` drives either on the same seeded schedule.

    with KraftFaultCluster(tmp_path) as c:
        c.isolate(1, "brokers")      # node 1's broker port cut from the others (the quorum reachable)
        c.isolate(1, "zookeeper")    # ZooKeeper's role is the controller quorum's: node 1 cut off from
                                     # the other controllers (its broker from the active one too)
        c.isolate(1, "all")          # from every other node
        c.split([0], [1, 2])         # the quorum always sits with the majority: zk_side means nothing
        c.pause(1); c.kill(1); c.restart(1)

A node serves clients and replication on port 9092 and the quorum on 9093, on one address: "from
the brokers" and "from the controllers" are cuts of one port each (a table of this module's own in
the node's namespace, beside netns.py's address cuts). The test process (root namespace) is every
client and is never cut off. Timings as logcore's fault cluster: a broker that stops heartbeating
is fenced after 6 s (`broker.session.timeout.ms`, ZooKeeper's session there), a follower leaves
the ISR after 4 s.
"""

from __future__ import annotations

import signal
from pathlib import Path

from testkit.kraft import KraftCluster, Placement

from .netns import Net, Node
from .process_faults import ProcessFaults

BROKER_PORT = 9092
CONTROLLER_PORT = 9093
DEFAULTS = {"broker.session.timeout.ms": "6000", "replica.lag.time.max.ms": "4000"}
PORT_RULESET = """
table inet kraftfault {
    set cut { type ipv4_addr . inet_service; }
    chain input { type filter hook input priority -10; policy accept;
                  ip saddr . tcp sport @cut drop; ip saddr . tcp dport @cut drop; }
    chain output { type filter hook output priority -10; policy accept;
                   ip daddr . tcp dport @cut drop; ip daddr . tcp sport @cut drop; }
}
"""


class KafkaBroker:
    """One node as the nemesis sees a broker: id, namespace, data directory, process."""

    def __init__(self, cluster: "KraftFaultCluster", broker_id: int, node: Node) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.node = node
        self.paused = False
        self.port_cuts: set[tuple[str, int]] = set()

    @property
    def kafka(self):
        return self.cluster.kraft.nodes[self.broker_id]

    @property
    def address(self) -> str:
        return self.kafka.address

    @property
    def data_dir(self) -> Path:
        return self.cluster.kraft.data_dir(self.broker_id)

    @property
    def log_path(self) -> Path:
        return self.kafka.log_path

    def start(self) -> None:
        """Start it again on its data; returns once it logs "Kafka Server started" (registered with
        the quorum, metadata caught up) and its port answers."""
        self.kafka.wait_until(self.kafka.launch())
        self.paused = False

    def alive(self) -> bool:
        return self.kafka.proc is not None and self.kafka.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.kafka.proc.send_signal(sig)

    def kill(self) -> None:
        self.kafka.kill()
        self.paused = False

    def cut_ports(self, port: int, peers: list[str]) -> None:
        """Drop every TCP packet between this node and `peers` on `port` (theirs or its own), both ways."""
        new = [(peer, port) for peer in peers if (peer, port) not in self.port_cuts]
        if new:
            self.node.run("nft", "add", "element", "inet", "kraftfault", "cut",
                          "{ " + ", ".join(f"{peer} . {p}" for peer, p in new) + " }")
            self.port_cuts.update(new)

    def heal(self) -> None:
        self.node.heal()
        if self.port_cuts:
            self.node.run("nft", "flush", "set", "inet", "kraftfault", "cut")
            self.port_cuts.clear()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class KraftFaultCluster(ProcessFaults):
    def __init__(self, base: Path, brokers: int = 3, config: dict[str, str] | None = None) -> None:
        self.base = Path(base)
        self.size = brokers
        self.config = {**DEFAULTS, **(config or {})}
        self.net = Net()
        self.kraft: KraftCluster | None = None
        self.brokers: list[KafkaBroker] = []

    @property
    def bootstrap(self) -> str:
        return self.kraft.bootstrap

    def start(self) -> "KraftFaultCluster":
        self.base.mkdir(parents=True, exist_ok=True)
        self.net.start()
        try:
            for broker_id in range(self.size):
                node = self.net.add(f"k{broker_id}")
                node.run("nft", "-f", "-", input=PORT_RULESET)
                self.brokers.append(KafkaBroker(self, broker_id, node))
            placements = [Placement(b.node.address, BROKER_PORT, CONTROLLER_PORT, ("ip", "netns", "exec", b.node.ns))
                          for b in self.brokers]
            self.kraft = KraftCluster(self.base, placements, self.config)
            self.kraft.start()
        except BaseException:
            self.stop()
            raise
        return self

    # -- faults (as FaultCluster's) --------------------------------------------------------------

    def _others(self, broker_id: int) -> list[str]:
        return [b.node.address for b in self.brokers if b.broker_id != broker_id]

    def isolate(self, broker_id: int, from_: str = "all") -> None:
        """Cut node `broker_id` off from the other brokers ("brokers": their port 9092 and its own,
        replication and coordinators' requests), from the controller quorum ("zookeeper", ZooKeeper's
        role here: port 9093, the quorum's traffic and its broker's heartbeats) or from both ("all")."""
        if from_ not in ("brokers", "zookeeper", "all"):
            raise ValueError(f"isolate from 'brokers', 'zookeeper' or 'all', not {from_!r}")
        broker = self.brokers[broker_id]
        if from_ == "all":
            broker.node.cut(*self._others(broker_id))
        else:
            broker.cut_ports(BROKER_PORT if from_ == "brokers" else CONTROLLER_PORT, self._others(broker_id))

    def split(self, *sides: list[int], zk_side: int = 1) -> None:
        """Nodes in `sides` cannot reach the other sides. `zk_side` is taken and has no effect: the
        quorum lives on the nodes themselves, with whichever side holds a majority of them."""
        self.net.partition(*[[self.brokers[b].node for b in side] for side in sides])

    def heal(self) -> None:
        for broker in self.brokers:
            broker.heal()

    # -- what the cluster says -------------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> tuple[int, int, list[int]]:
        return self.kraft.leader(topic, partition)

    def controller(self) -> int:
        return self.kraft.controller()

    # -- lifetime --------------------------------------------------------------------------------

    def stop(self) -> None:
        if self.net.nodes:
            self.heal()
        for broker in self.brokers:
            broker.signal(signal.SIGCONT)
        if self.kraft is not None:
            self.kraft.stop()
        self.net.close()

    def __enter__(self) -> "KraftFaultCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
