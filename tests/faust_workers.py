"""`binlake streams worker` processes that a test can SIGKILL and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from binlake.brokerproc import ROOT


class Worker:
    def __init__(self, cwd: Path, n: int, reference: str, env: dict[str, str] | None = None) -> None:
        self.cwd, self.n, self.reference = cwd, n, reference
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)]), **(env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.cwd / f"worker{self.n}.log"

    def start(self) -> "Worker":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "streams", "worker", self.reference,
                                          "-l", os.environ.get("BINLAKE_TEST_WORKER_LOG", "info"), "--without-web"], cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
