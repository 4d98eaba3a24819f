"""Fixtures for the connect tests: `binlake connect run` subprocesses and config files.

Loaded with `pytest_plugins = ["connect_fixtures"]`, not as a conftest.py: other test modules
import the top-level conftest by name, which a second conftest module would shadow."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from connect_testlib import CONNECT, ROOT

HERE = Path(__file__).resolve().parent


class ConnectProcess:
    """`binlake connect ARGS` (run, worker) in its own process, so tests can SIGTERM or SIGKILL it."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        args = [*CONNECT, *args]
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"connect did not exit within {timeout}s:\n{self.log()}") from None

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged (exit code {self.proc.poll()}):\n{self.log()}")
            time.sleep(0.05)


@pytest.fixture
def connect_run(tmp_path):
    """connect_run(config_path, ..., rest=None, metrics=None) starts a runtime (REST API and metrics endpoint
    at those HOST:PORTs); every one is killed at teardown."""
    started: list[ConnectProcess] = []

    def start(*configs: Path, rest: str | None = None, metrics: str | None = None) -> ConnectProcess:
        process = ConnectProcess(["run", *map(str, configs)] + (["--rest", rest] if rest else [])
                                 + (["--prometheus-listener", metrics] if metrics else []),
                                 tmp_path / f"connect-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


class WorkerProcess(ConnectProcess):
    """`binlake connect worker --config FILE`; `url` is its REST address once it serves."""

    def __init__(self, config: Path, log_path: Path) -> None:
        super().__init__(["worker", "--config", str(config)], log_path)

    def serving(self, timeout: float = 60) -> "WorkerProcess":
        self.wait_for_log("REST API on", timeout)
        return self

    @property
    def url(self) -> str:
        return re.search(r"REST API on (http://\S+)", self.log()).group(1)


@pytest.fixture
def connect_worker(tmp_path):
    """connect_worker(bootstrap, **keys) starts a distributed worker (group "workers", REST on a free port)
    and returns it once it serves; every one is killed at teardown."""
    started: list[WorkerProcess] = []

    def start(bootstrap: str, wait: bool = True, **keys) -> WorkerProcess:
        config = tmp_path / f"worker-{len(started)}.yaml"
        config.write_text(yaml.safe_dump({"group_id": "workers", "bootstrap_servers": bootstrap, "rest": "127.0.0.1:0",
                                          "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **keys}))
        process = WorkerProcess(config, tmp_path / f"worker-{len(started)}.log")
        started.append(process)
        return process.serving() if wait else process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def write_config(tmp_path):
    """write_config(name, **keys) writes a connector YAML file and returns its path."""

    def write(filename: str = "connector.yaml", **keys) -> Path:
        path = tmp_path / filename
        path.write_text(yaml.safe_dump(keys, sort_keys=False))
        return path

    return write
