"""`binlake canal run CONF_DIR` in tcp mode (Canal's stock serverMode) with Canal's own clients, the Java
`canal.client` from Maven Central and canal-python from PyPI, looping as Canal's example client does (get without
ack, ack; every fifth batch rolled back) while a MariaDB workload runs and the server is SIGKILLed twice.
Replaying what the client received gives MariaDB's tables; an acked batch never comes again (but the one whose ack
was on the wire at the kill), and every entry comes in some acked batch; with canal.instance.get.ddl.isolation each
DDL comes in a batch of its own."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from canal_harness import check_received, drain, java_client, more_batches, start_server, tcp_conf, workload_running
from e2e_harness import ROOT, wait_for_log, wait_until
from mysql_workload import committed_offset
from sandbox.process import free_port

CANAL_PYTHON = ROOT / ".cache" / "canal-python"
CLIENTS = ROOT / "tests" / "canal_clients"


def python_client(where: tuple[str, str], out: Path, stop: Path, log: Path, tmp_path: Path) -> subprocess.Popen:
    assert (CANAL_PYTHON / "canal" / "client.py").exists(), "canal-python is missing: run `make canal-python`"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(CANAL_PYTHON), PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    with open(log, "ab") as log_file:       # (cwd elsewhere: binlake's own `canal` package must not shadow it)
        return subprocess.Popen([sys.executable, str(CLIENTS / "canal_python_client.py"), *where,
                                 "example", str(out), str(stop)],
                                stdout=log_file, stderr=subprocess.STDOUT, cwd=CANAL_PYTHON, env=env)


@pytest.mark.timeout(900)
# canal-python is `slow` for suite time: the protocol is the same, the Java client is Canal's own
@pytest.mark.parametrize("start_client", [java_client, pytest.param(python_client, marks=pytest.mark.slow)],
                         ids=["java", "python"])
async def test_canal_clients_through_two_sigkills(mariadb, broker, tmp_path, start_client):
    server = mariadb
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = server.new_database()
    port = free_port()
    conf = tcp_conf(tmp_path, broker, server, db, 5404,
                    **{"canal.port": str(port), "canal.instance.get.ddl.isolation": "true"})
    process = start_server(conf, tmp_path, 0)
    await wait_for_log(process, "example-0 started", timeout=180)
    await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
    out, stop_file = tmp_path / "received.jsonl", tmp_path / "stop"
    client = start_client(("127.0.0.1", str(port)), out, stop_file, tmp_path / "client.log", tmp_path)
    try:
        async with workload_running(server, db, seed) as workload:
            for n in (1, 2):
                await more_batches(out, broker.address, server)
                process.proc.send_signal(signal.SIGKILL)
                process.proc.wait()
                process = start_server(conf, tmp_path, n)
        await drain(broker.address, server, client, stop_file, tmp_path / "client.log")
    finally:
        if client.poll() is None:
            client.kill()
        process.kill()

    lines = check_received(out, server, db, workload.tables)
    assert sum(1 for line in lines if "reconnect" in line) >= 2
    ddl_batches = [line for line in lines if "id" in line and any(e.get("ddl") for e in line["entries"])]
    assert ddl_batches and all(len(b["entries"]) == 1 for b in ddl_batches)     # get.ddl.isolation: each alone
