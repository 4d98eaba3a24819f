"""A real `binlake broker` in its own process, on a free loopback port: for tests, the fuzzer and
benchmarks, which SIGKILL it, restart it on the same data and watch its memory and CPU."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from sandbox.process import free_port, port_answers, wait_until_ready

ROOT = Path(__file__).resolve().parent.parent
BINLAKE = [sys.executable, "-m", "binlake.cli"]


class BrokerProcess:
    """A real broker in its own process, so tests can SIGKILL it and start it again on the same data."""

    def __init__(self, data_dir: Path, port: int | None = None, config: dict[str, str] | None = None,
                 open_files: int | None = None, broker_id: int | None = None) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id  # --broker-id, if set
        self.port = port or free_port()
        self.config = dict(config or {})
        self.open_files = open_files  # RLIMIT_NOFILE (soft and hard) for the process, if set
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> "BrokerProcess":   # (a Python start on two loaded cores)
        args = [*BINLAKE, "broker", "--data-dir", str(self.data_dir), "--listen", self.address]
        if self.broker_id is not None:
            args += ["--broker-id", str(self.broker_id)]
        for key, value in self.config.items():
            args += ["--override", f"{key}={value}"]
        log = open(self.log_path, "ab")
        limit = self.open_files
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=(
            (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))) if limit else None))
        wait_until_ready(self.proc, lambda: port_answers(self.port, 0.2), "broker", timeout, self.log,
                         interval_s=0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_bytes(self) -> int:
        """Resident memory of the broker process now."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb * 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process has used."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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
