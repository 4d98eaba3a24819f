"""What the throwaway servers share: a free loopback port, waiting until a started server is ready,
stopping a process, and the `python -m sandbox.<server>` foreground commands."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import click


class SandboxError(RuntimeError):
    """The throwaway server could not be set up; the message carries the server's own output."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port: int, timeout_s: float = 1, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on `host`:`port`."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def wait_until_ready(proc: subprocess.Popen, ready: Callable[[], bool], what: str, timeout_s: float,
                     output: Callable[[], str], interval_s: float = 0.1,
                     stop: Callable[[], None] | None = None) -> None:
    """Poll `ready()` until it is true. SandboxError, with the server's `output()`, when `proc` exits
    first or `timeout_s` pass; `ready` may raise SandboxError itself for a failure that will not go
    away. On any failure (Ctrl-C included) `stop()`, if given, runs first: never leave a server
    nobody will stop."""
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise SandboxError(f"{what} exited with {proc.returncode}:\n{output()}")
            if time.monotonic() > deadline:
                raise SandboxError(f"{what} was not ready within {timeout_s} s:\n{output()}")
            time.sleep(interval_s)
    except BaseException:
        if stop is not None:
            stop()
        raise


def log_tail(path, chars: int = 4000) -> str:
    """The end of a server's log file, for an error message ('' while there is none)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def end_process(proc: subprocess.Popen | None, grace_s: float | None = None) -> None:
    """SIGTERM and up to `grace_s` for the process to finish its shutdown, then SIGKILL; SIGKILL at
    once without `grace_s`. Returns once it has exited."""
    if proc is None:
        return
    if proc.poll() is None and grace_s is not None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def foreground_command(start: Callable[..., object], doc: str,
                       port_help: str = "port on 127.0.0.1  [default: a free one]") -> click.Command:
    """A `python -m sandbox.<server>` command: BASE and --port, then `start(base, port=port)` in the
    foreground until Ctrl-C (run_in_foreground)."""
    @click.command(help=doc)
    @click.argument("base", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--port", type=int, help=port_help)
    def main(base: Path, port: int | None) -> None:
        run_in_foreground(lambda: start(base, port=port))
    return main


def run_in_foreground(start) -> None:
    """The `python -m sandbox.<server>` commands: start a server (`start()`), say how to reach it
    (`server.describe()`), and stop it on Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the server like Ctrl-C
    try:
        server = start()
    except SandboxError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{server.describe()}\nCtrl-C stops it.")
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
