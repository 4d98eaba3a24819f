"""A throwaway ZooKeeper server, for the cluster's tests, the demo and the benchmarks.

Like `sandbox.sql` for MariaDB: its own data directory, a free loopback port (never the
machine's own server on 2181), no admin web server. Debian's `zookeeper` package provides the jar
(its manifest names the libraries it needs); the server runs standalone, the way a test wants it.

    server = start_zookeeper(Path("/tmp/zk"))
    server.connect_string                           # "127.0.0.1:PORT", for --zookeeper and kazoo
    server.stop()

By hand: `python -m sandbox.zookeeper DIR [--port N]` runs one in the foreground until Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from common.lifetime import die_with_parent

from .process import SandboxError, end_process, foreground_command, free_port, log_tail, wait_until_ready

JAVA = "/usr/bin/java"
CLASSPATH = ["/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"]
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 500  # sessions time out in 2-20 ticks: short sessions let tests see a dead broker quickly
START_TIMEOUT_S = 60
LOG4J = """log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
"""


def installed() -> bool:
    return all(Path(p).exists() for p in [JAVA, *CLASSPATH])


@dataclass
class ZooKeeper:
    base: Path
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def ok(self) -> bool:
        """The server answers ZooKeeper's `ruok` with `imok`."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def describe(self) -> str:
        return (f"ZooKeeper on {self.connect_string}; log {self.log_path}\n"
                f"  /usr/share/zookeeper/bin/zkCli.sh -server {self.connect_string}")

    def kill(self) -> None:
        """SIGKILL, keeping the data: `start_zookeeper` on the same base and port brings it back."""
        end_process(self.proc)

    def stop(self, remove: bool = True) -> None:
        """SIGTERM, or SIGKILL after 30 s; then remove the data directory unless told not to."""
        end_process(self.proc, 30)
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_zookeeper(base: Path, port: int | None = None, tied: bool = False) -> ZooKeeper:
    """Start a standalone server with its data in `base`/data (kept if it is there: a restart),
    on `port` (default: a free one); its log is `base`/zookeeper.log. `tied`: it dies with the
    calling process even when that is SIGKILLed (common.lifetime)."""
    if not installed():
        raise SandboxError("ZooKeeper is not installed; run `make setup` (it installs the Debian package zookeeper)")
    base.mkdir(parents=True, exist_ok=True)
    (base / "data").mkdir(exist_ok=True)
    port = port or free_port()
    (base / "log4j.properties").write_text(LOG4J)
    config = base / "zoo.cfg"
    config.write_text(f"tickTime={TICK_MS}\ndataDir={base / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
                      "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat\nmaxClientCnxns=0\n")
    log_path = base / "zookeeper.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([JAVA, "-Xmx256m", "-cp", ":".join([str(base), *CLASSPATH]), MAIN, str(config)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=partial(die_with_parent, os.getpid()) if tied else None)
    server = ZooKeeper(base, port, proc, log_path)
    wait_until_ready(proc, server.ok, f"ZooKeeper on 127.0.0.1:{port}", START_TIMEOUT_S, lambda: log_tail(log_path),
                     stop=lambda: server.stop(remove=False))
    return server


main = foreground_command(start_zookeeper, "Run a throwaway ZooKeeper (its data and log in BASE) until Ctrl-C, then stop "
                                           "it and remove its data.")


if __name__ == "__main__":
    main()
