"""A Spark standalone cluster on loopback: a master and n workers, each its own JVM started with pyspark's
`spark-class` (the same Spark the sink runs), one core and a small heap a worker (the machine is shared).

    cluster = SparkStandalone(base, workers=2).start()
    cluster.master_url                      # "spark://127.0.0.1:P", for `binlake sink run --master`
    cluster.workers[0].kill()               # SIGKILL the worker and its executors, as a lost machine
    cluster.workers[0].start()              # back, registered again with the master
    cluster.stop()

A worker runs its executors as children in its own process group, so `kill` ends them together: the
driver sees the executor lost and Spark reruns its tasks on the other worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pyspark

from common.lifetime import die_with_parent
from sandbox.process import end_process, free_port, log_tail, port_answers, wait_until_ready

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 120   # a JVM's start on two shared cores


class SparkDaemon:
    """One master or worker JVM; its output in `base/NAME.log`."""

    def __init__(self, base: Path, name: str, args: list[str], ready_line: str) -> None:
        self.base, self.name, self.args, self.ready_line = base, name, args, ready_line
        self.log_path = base / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "SparkDaemon":
        """Start the JVM; returns once its log says `ready_line` (since this start)."""
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_MEMORY": "512m", "SPARK_LOG_DIR": str(self.base)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *self.args], env=env,
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=partial(die_with_parent, os.getpid()))
        wait_until_ready(self.proc, lambda: self._logged_since(seen), f"Spark {self.name}", START_TIMEOUT_S,
                         lambda: log_tail(self.log_path), interval_s=0.2, stop=self.kill)
        return self

    def _logged_since(self, offset: int) -> bool:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return self.ready_line.encode() in log.read()

    def kill(self) -> None:
        """SIGKILL the daemon and every process it started (a worker's executors)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        end_process(self.proc)


class SparkStandalone:
    def __init__(self, base: Path, workers: int = 2, worker_memory: str = "1g") -> None:
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.master = SparkDaemon(self.base, "master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(free_port())], "I have been elected leader")
        self.workers = [SparkDaemon(self.base, f"worker-{n}", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
            "--memory", worker_memory, "--webui-port", str(free_port()),
            "--work-dir", str(self.base / f"work-{n}"), self.master_url], "Successfully registered with master")
            for n in range(workers)]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> "SparkStandalone":
        try:
            self.master.start()
            assert port_answers(self.port), f"the Spark master does not listen on {self.port}"
            with ThreadPoolExecutor(len(self.workers)) as pool:   # (JVM starts overlap)
                list(pool.map(SparkDaemon.start, self.workers))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for daemon in [*self.workers, self.master]:
            daemon.kill()
