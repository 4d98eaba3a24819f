"""A shell for a doc's commands, as a reader's terminals are, in namespaces of its own.

One bash reads the commands (so `export` and `cd` carry on, as in a terminal); a background command
runs in a job of its own (a terminal of its own: Ctrl-C reaches its process group). The shell and
everything it starts live in a network namespace with only loopback and a mount namespace with a
private /tmp: the docs' commands run as written, on their fixed ports (9092, 3307, ...) and paths
(/tmp/qs/...), beside other tests and whatever else the machine runs. Python output is unbuffered,
as it is on a terminal, so a server's "ready" line shows when it is printed.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from testkit.brokerproc import ROOT

# A checkout under /tmp (a CI clone may live there) is bound back into the private /tmp: its venv and
# its docs' relative paths stay where the commands expect them. (fd 3 holds the directory across the mount;
# mount must not resolve /proc/self/fd/3 to its path, which by then names the new, empty directory.)
SETUP = ("ip link set lo up && exec 3<. && mount -t tmpfs doctest /tmp && mkdir -p \"$DOCTEST_CHECKOUT\" && "
         "{ [ -e \"$DOCTEST_CHECKOUT/.git\" ] "
         "|| mount --no-canonicalize --bind /proc/self/fd/3 \"$DOCTEST_CHECKOUT\"; } "
         "&& exec 3<&- && cd \"$DOCTEST_CHECKOUT\" && unset DOCTEST_CHECKOUT && mkdir /tmp/.doctest "
         "&& exec bash --norc --noprofile")
LOGS = "/tmp/.doctest"  # (inside the namespace) where background jobs write their output
STOP_WAIT_S = 30


class TerminalError(RuntimeError):
    pass


@dataclass
class Job:
    command: str
    pid: int                # its process group, as job control made it
    log: Path               # its output, seen from outside the namespace

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def running(self) -> bool:
        """Whether its process still runs (not ended, nor a zombie its shell has yet to reap)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] != "Z"
        except OSError:
            return False


class Terminal:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               # the venv's commands first, as `make setup` and the docs' `export PATH=...` leave them
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        env["DOCTEST_CHECKOUT"] = str(ROOT)
        env.pop("SPARK_LOCAL_IP", None)  # (what the sink's driver binds is the sink's to choose)
        self.proc = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private", "--fork",
                                      "bash", "-c", SETUP], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_ctrl_c_works)
        self.jobs: list[Job] = []
        self._buffer = b""
        status, output = self.run("set -m; echo $BASHPID", timeout=30)  # job control: a process group per job
        if status != 0:
            raise TerminalError(f"the namespaces could not be set up: {output}")
        self.shell_pid = int(output.split()[-1])
        self.netns = os.readlink(f"/proc/{self.shell_pid}/ns/net")

    def run(self, command: str, typed: str = "", timeout: float = 600) -> tuple[int, str]:
        """Run `command` in the shell; its exit status and output. `typed`: lines typed into it on a
        terminal of its own (`script` gives it one: an interactive shell such as pyspark reads them
        as from a reader's keyboard); they end it themselves."""
        mark = uuid.uuid4().hex
        if typed:
            command = f"script -qefc {shlex.quote(command)} /dev/null"
        self._send(f"{{\n{command}\n}} 2>&1 <<'{mark}'\n{typed}{mark}\nstatus=$?; echo; echo \"{mark} $status\"\n")
        return self._read_until(mark, timeout, command)

    def start(self, command: str) -> Job:
        """Run `command` as a background job of its own; its output goes to a log."""
        name = f"job-{len(self.jobs)}.log"
        status, output = self.run(f"( {command}\n) > {LOGS}/{name} 2>&1 < /dev/null &\necho \"$!\"")
        if status != 0:
            raise TerminalError(f"could not start {command!r}: {output}")
        job = Job(command, int(output.split()[-1]), Path(f"/proc/{self.shell_pid}/root{LOGS}/{name}"))
        self.jobs.append(job)
        return job

    def close(self) -> None:
        """Ctrl-C for each job, the last started first (as a reader stops them), then SIGKILL to whatever
        still runs in the namespace."""
        for job in reversed(self.jobs):
            if job.running():
                with _gone():
                    os.killpg(job.pid, signal.SIGINT)
                deadline = time.monotonic() + STOP_WAIT_S
                while job.running() and time.monotonic() < deadline:
                    time.sleep(0.1)
        for pid in self._in_namespace():
            with _gone():
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def _in_namespace(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.proc.pid:
                try:
                    if os.readlink(f"/proc/{entry}/ns/net") == self.netns:
                        found.append(int(entry))
                except OSError:
                    continue
        return found

    def _send(self, text: str) -> None:
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def _read_until(self, mark: str, timeout: float, command: str) -> tuple[int, str]:
        """The exit status and output of the command whose end `mark` announces."""
        deadline = time.monotonic() + timeout
        end = f"\n{mark} ".encode()
        while end not in self._buffer or b"\n" not in self._buffer.split(end, 1)[1]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TerminalError(f"{command!r} did not finish within {timeout:.0f} s; its output so far:\n"
                                    f"{self._buffer.decode(errors='replace')[-4000:]}")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 1))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise TerminalError(f"the shell ended during {command!r}:\n{self._buffer.decode(errors='replace')}")
                self._buffer += chunk
        output, tail = self._buffer.split(end, 1)
        status, self._buffer = tail.split(b"\n", 1)
        return int(status), output.decode(errors="replace").rstrip("\n")


def _ctrl_c_works() -> None:
    """SIGINT's default action back for the shell and its jobs (pytest-xdist's workers ignore it, and
    a child inherits an ignored signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _gone:
    """Ignore a process that has ended meanwhile."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is ProcessLookupError
