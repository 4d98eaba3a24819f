"""A real `binlake schema-registry` in its own process, on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from common.lifetime import die_with_parent
from sandbox.process import end_process, free_port, log_tail, port_answers, wait_until_ready

from .brokerproc import BINLAKE, ROOT


class RegistryProcess:
    def __init__(self, bootstrap_servers: str, log_path: Path, port: int | None = None, *args: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.log_path = log_path
        self.port = port or free_port()
        self.args = args
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'https' if '--tls-cert' in self.args else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> "RegistryProcess":
        args = [*BINLAKE, "schema-registry", "--bootstrap-servers", self.bootstrap_servers,
                "--listen", f"127.0.0.1:{self.port}", *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         preexec_fn=functools.partial(die_with_parent, os.getpid()))
        # (the REST listener opens last, once _schemas is read and the instance has joined its group)
        wait_until_ready(self.proc, lambda: port_answers(self.port, 0.2), "schema registry", timeout_s, self.log,
                         stop=self.kill)
        return self

    def log(self) -> str:
        return log_tail(self.log_path)

    def stop(self) -> None:
        end_process(self.proc, grace_s=20)

    def kill(self) -> None:
        end_process(self.proc)
