"""A ZooKeeper and brokers, each in a network namespace of its own (`netns.Net`), with the faults a
test or the bench inflicts on them:

    with FaultCluster(tmp_path, brokers=3, config={...}) as c:
        c.isolate(1, "brokers")       # broker 1 cut off from the other brokers (ZooKeeper reachable)
        c.isolate(1, "zookeeper")     # ... from ZooKeeper only; "all": from both
        c.split([0], [1, 2])          # brokers on each side; ZooKeeper with the side named zk_side
        c.heal()
        c.pause(1); c.resume(1)       # SIGSTOP / SIGCONT
        c.kill(1); c.restart(1)       # SIGKILL, then the same data directory again
        c.leader("t", 0)              # (leader, epoch, isr) from ZooKeeper's state znode

The test process (root namespace) is every client: it reaches every node and is never cut off.
Brokers listen on their namespace's address, port 9092, and ZooKeeper on 2181. The brokers run this
checkout's code (PYTHONPATH is passed on).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

from sandbox.zookeeper import CLASSPATH, JAVA, LOG4J, MAIN
from testkit.brokerproc import BINLAKE, ROOT

from .netns import Net, Node
from .process_faults import ProcessFaults

BROKER_PORT = 9092
ZK_PORT = 2181
# Fast but realistic: a dead or cut-off broker's session ends after 6 s (Kafka's default is 18 s),
# a follower that stops fetching leaves the ISR after 4 s (Kafka: 30 s).
DEFAULTS = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "4000",
            "unclean.leader.election.enable": "false", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}


def _wait_listening(address: str, port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {address}:{port} within {timeout} s:\n"
                       f"{log.read_text(errors='replace')[-3000:]}")


class Broker:
    def __init__(self, cluster: "FaultCluster", broker_id: int, node: Node) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.node = node
        self.data_dir = cluster.base / f"broker-{broker_id}"
        self.log_path = cluster.base / f"broker-{broker_id}.log"
        self.proc: subprocess.Popen | None = None
        self.paused = False

    @property
    def address(self) -> str:
        return f"{self.node.address}:{BROKER_PORT}"

    def start(self, timeout: float = 180) -> None:  # (a restart took over 60 s at load 50)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = {**self.cluster.config, "zookeeper.connect": self.cluster.zk_connect}
        args = [*BINLAKE, "broker", "--data-dir", str(self.data_dir), "--listen", self.address,
                "--broker-id", str(self.broker_id)]
        for key, value in config.items():
            args += ["--override", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self.proc = self.node.popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.paused = False
        _wait_listening(self.node.address, BROKER_PORT, self.proc, f"broker {self.broker_id}", self.log_path, timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.paused = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class FaultCluster(ProcessFaults):
    def __init__(self, base: Path, brokers: int = 3, config: dict[str, str] | None = None,
                 before_start=None) -> None:
        self.base = Path(base)
        self.size = brokers
        self.config = {**DEFAULTS, **(config or {})}
        self.before_start = before_start  # called with each Broker before its first start (a small disk...)
        self.net = Net()
        self.zk_node: Node | None = None
        self.zk_proc: subprocess.Popen | None = None
        self.brokers: list[Broker] = []

    @property
    def zk_connect(self) -> str:
        return f"{self.zk_node.address}:{ZK_PORT}"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self) -> "FaultCluster":
        self.base.mkdir(parents=True, exist_ok=True)
        self.net.start()
        try:
            self.zk_node = self.net.add("zk")
            self._start_zookeeper()
            for broker_id in range(self.size):
                self.brokers.append(Broker(self, broker_id, self.net.add(f"b{broker_id}")))
            for broker in self.brokers:
                if self.before_start is not None:
                    self.before_start(broker)
                broker.start()
        except Exception:
            self.stop()
            raise
        return self

    def _start_zookeeper(self) -> None:
        base = self.base / "zookeeper"
        (base / "data").mkdir(parents=True, exist_ok=True)
        (base / "log4j.properties").write_text(LOG4J)
        (base / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={base / 'data'}\nclientPort={ZK_PORT}\nclientPortAddress={self.zk_node.address}\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat\nmaxClientCnxns=0\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=60000\n")
        log = base / "zookeeper.log"
        with open(log, "ab") as out:
            self.zk_proc = self.zk_node.popen([JAVA, "-Xmx256m", "-cp", ":".join([str(base), *CLASSPATH]), MAIN,
                                               str(base / "zoo.cfg")], stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL)
        _wait_listening(self.zk_node.address, ZK_PORT, self.zk_proc, "ZooKeeper", log, 180)

    # -- faults --------------------------------------------------------------------------------

    def isolate(self, broker_id: int, from_: str = "all") -> None:
        """Cut broker `broker_id` off from the other brokers ("brokers"), from ZooKeeper
        ("zookeeper") or from both ("all"); clients still reach it."""
        if from_ not in ("brokers", "zookeeper", "all"):
            raise ValueError(f"isolate from 'brokers', 'zookeeper' or 'all', not {from_!r}")
        node = self.brokers[broker_id].node
        if from_ in ("brokers", "all"):
            node.cut(*(b.node.address for b in self.brokers if b.broker_id != broker_id))
        if from_ in ("zookeeper", "all"):
            node.cut(self.zk_node.address)

    def split(self, *sides: list[int], zk_side: int = 1) -> None:
        """Brokers in `sides` cannot reach the other sides; ZooKeeper is on side `zk_side`."""
        groups = [[self.brokers[b].node for b in side] for side in sides]
        groups[zk_side].append(self.zk_node)
        self.net.partition(*groups)

    def heal(self) -> None:
        self.net.heal()

    # -- what ZooKeeper says -------------------------------------------------------------------

    def zk(self):
        from kazoo.client import KazooClient
        client = KazooClient(hosts=self.zk_connect, timeout=10)
        client.start(timeout=10)
        return client

    def leader(self, topic: str, partition: int) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, ISR) in ZooKeeper now."""
        from common.zk_client import stop_client
        client = self.zk()
        try:
            data, _ = client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        finally:
            stop_client(client)
        state = json.loads(data)
        return state["leader"], state["leader_epoch"], state["isr"]

    def controller(self) -> int:
        from common.zk_client import stop_client
        client = self.zk()
        try:
            data, _ = client.get("/controller")
        finally:
            stop_client(client)
        return json.loads(data)["brokerid"]

    # -- lifetime ------------------------------------------------------------------------------

    def stop(self) -> None:
        self.net.heal() if self.net.nodes else None
        for broker in self.brokers:
            broker.signal(signal.SIGCONT)
            broker.kill()
        if self.zk_proc is not None and self.zk_proc.poll() is None:
            self.zk_proc.kill()
            self.zk_proc.wait()
        self.net.close()

    def __enter__(self) -> "FaultCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
