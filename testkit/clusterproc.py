"""A replicated cluster on one machine: a throwaway ZooKeeper (sandbox.zookeeper) and brokers in
processes of their own (testkit.brokerproc), each with its data directory under one base. For
tests and benchmarks, which kill, stall and restart brokers for real."""

from __future__ import annotations

import signal
from pathlib import Path

from sandbox.zookeeper import ZooKeeper, start_zookeeper

from .brokerproc import BrokerProcess


class LocalCluster:
    def __init__(self, base: Path, brokers: int = 3, config: dict[str, str] | None = None,
                 racks: list[str] | None = None) -> None:
        self.base = base
        self.zookeeper: ZooKeeper | None = None
        self.size = brokers
        self.config = dict(config or {})
        self.racks = racks
        self.brokers: list[BrokerProcess] = []

    def start(self) -> "LocalCluster":
        self.zookeeper = start_zookeeper(self.base / "zookeeper")
        try:
            for broker_id in range(self.size):
                config = {**self.config, "zookeeper.connect": self.zookeeper.connect_string}
                if self.racks:
                    config["broker.rack"] = self.racks[broker_id % len(self.racks)]
                self.brokers.append(BrokerProcess(self.base / f"broker-{broker_id}", config=config,
                                                  broker_id=broker_id).start())
        except Exception:
            self.stop()
            raise
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.address for broker in self.brokers)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker stays connected and answers nothing (a stalled or partitioned broker)."""
        self.brokers[broker_id].proc.send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.proc and broker.proc.poll() is None:
                broker.proc.send_signal(signal.SIGCONT)  # (a paused broker cannot act on SIGTERM)
            broker.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()
