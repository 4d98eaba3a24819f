"""A real `binlake broker` in its own process, for tests and their fixtures (tests/conftest.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
BINLAKE = [sys.executable, "-m", "binlake.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """A real broker in its own process, so tests can SIGKILL it and start it again on the same data."""

    def __init__(self, data_dir: Path, port: int | None = None, config: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.config = dict(config or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> "BrokerProcess":
        args = [*BINLAKE, "broker", "--data-dir", str(self.data_dir), "--listen", self.address]
        for key, value in self.config.items():
            args += ["--override", f"{key}={value}"]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, no clean-shutdown marker."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout)
        return self.proc.returncode if self.proc else 0

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()


def read_to_end(address: str, topics: dict[str, int], isolation: str = "read_uncommitted",
                timeout: float = 30) -> list[bytes]:
    """Every value of every partition of `topics` ({name: partition count}) up to its end (the LSO
    for read_committed), partition by partition, read with a real confluent-kafka consumer."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader", "enable.auto.commit": False,
                        "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    got: dict[tuple[str, int], list[bytes]] = {}
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    while len(ended) < sum(topics.values()):
        assert time.monotonic() < deadline, f"{isolation} reader never reached the end: {ended}"
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            ended.add((msg.topic(), msg.partition()))
            continue
        got.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
    consumer.close()
    return [v for tp in sorted(got) for v in got[tp]]
