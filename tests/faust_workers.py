"""`binlake streams worker` processes that a test can SIGKILL and restart, and waiting for their output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from common.lifetime import die_with_parent
from testkit.brokerproc import ROOT
from brokerproc import read_to_end


class Worker:
    def __init__(self, cwd: Path, n: int, reference: str, env: dict[str, str] | None = None,
                 options: tuple[str, ...] = (), verbose: bool = True) -> None:
        # (verbose: faust's whole output in the log, for whoever reads it after a failure)
        self.cwd, self.n, self.reference, self.options = cwd, n, reference, (*options, *(["-v"] if verbose else []))
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)]), **(env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.cwd / f"worker{self.n}.log"

    def start(self) -> "Worker":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "streams", "worker", self.reference,
                                          *self.options, "-l", os.environ.get("BINLAKE_TEST_WORKER_LOG", "info"), "--without-web"], cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         preexec_fn=partial(die_with_parent, os.getpid()))   # (never outlives a test)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_outputs(address: str, topic: str, count: int, timeout: float = 90) -> list[bytes]:
    """The committed values of single-partition `topic` once it holds at least `count`."""
    deadline = time.monotonic() + timeout
    while len(got := read_to_end(address, {topic: 1}, "read_committed")) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} outputs in {topic}"
        time.sleep(0.3)
    return got


def faust_broker(broker_factory, *topics: str):
    """A broker sized for one faust app (small internal topics, no initial rebalance delay) with these
    single-partition topics created."""
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = broker_factory(config={"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
                                    "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)
    return broker
