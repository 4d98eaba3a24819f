"""Canal's ZooKeeper high availability (`canal.zkServers`): two `binlake canal run` servers on one conf directory
(each its own `canal.port`, given in the environment as Canal reads it), a real ZooKeeper, broker and MariaDB.

One server runs the destination and is registered where Canal's cluster clients look; the other stands by: its
connector does not run, and Canal's Java client subscribing to it is told `should start first`. Canal's cluster
client (`CanalConnectors.newClusterConnector` with ZooKeeper) follows the destination when the running server is
SIGKILLed and the standby takes over: replaying what it received gives MariaDB's tables, and only batches never
acked (or whose ack was on the wire at the kill) come twice. In kafka mode, the FlatMessages of a destination whose
running server is SIGKILLed hold every row once."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from canal import ha
from canal_harness import check_received, drain, java_client, more_batches, start_server, tcp_conf, workload_running
from common.zk_client import stop_client
from e2e_harness import read_committed, wait_for_log, wait_until
from mysql_workload import committed_offset
from sandbox.process import free_port

SESSION_TIMEOUT_MS = 4000


@pytest.fixture
def zk(zookeeper):
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start()
    yield client
    stop_client(client)


async def running(zk: KazooClient) -> str | None:
    """The address in the destination's running node (None: no server runs it)."""
    def read() -> str | None:
        try:
            return json.loads(zk.get(ha.running_path("example"))[0])["address"]
        except NoNodeError:
            return None
    return await asyncio.to_thread(read)


async def runs(zk: KazooClient, address: str) -> bool:
    return await running(zk) == address


def ha_conf(tmp_path, zookeeper, broker, server, db):
    return tcp_conf(tmp_path, broker, server, db, 5405, **{
        "canal.zkServers": zookeeper.connect_string, "canal.register.ip": "127.0.0.1",
        "binlake.zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})


async def start_both(conf, tmp_path, zk):
    """Two servers on `conf`, the first started first (so it runs the destination); {address: process}."""
    servers = {}
    for n in range(2):
        port = free_port()
        servers[f"127.0.0.1:{port}"] = start_server(conf, tmp_path, n, {"canal.port": str(port)})
        if n == 0:
            await wait_until(lambda: running(zk), 120, "a server to run the destination")

    async def registered() -> bool:
        return len(await asyncio.to_thread(zk.get_children, "/otter/canal/destinations/example/cluster")) == 2
    await wait_until(registered, 120, "both servers to register")
    return servers


@pytest.mark.timeout(600)
async def test_a_standby_does_not_serve_and_takes_over_from_a_stopped_server(zookeeper, zk, broker, mariadb,
                                                                            tmp_path):
    db = mariadb.new_database()
    servers = await start_both(ha_conf(tmp_path, zookeeper, broker, mariadb, db), tmp_path, zk)
    try:
        first, second = servers
        assert zk.get(ha.running_path("example"))[0] == b'{"active":true,"address":"%s"}' % first.encode()
        assert sorted(zk.get_children("/otter/canal/cluster")) == sorted(servers)
        await wait_for_log(servers[first], "example-0 started", timeout=180)

        out, stop_file = tmp_path / "standby.jsonl", tmp_path / "stop"
        client = java_client(tuple(second.split(":")), out, stop_file, tmp_path / "client.log", tmp_path)
        try:
            async def refused() -> bool:
                return out.exists() and "should start first" in out.read_text()
            await wait_until(refused, 120, "the standby to refuse the client")
        finally:
            client.kill()
            client.wait()
        assert "destination:example should start first" in out.read_text()
        assert "example-0 started" not in servers[second].log()        # (its connector does not run)

        assert servers[first].terminate() == 0
        await wait_until(lambda: runs(zk, second), ha.TAKEOVER_DELAY_S + 60, "the standby to take over")
        await wait_for_log(servers[second], "example-0 started", timeout=180)
    finally:
        for process in servers.values():
            process.kill()


@pytest.mark.slow                       # (about a minute: a session expiry, Canal's 5 s delay, the client's retries)
@pytest.mark.timeout(900)
async def test_canal_cluster_client_through_a_sigkill_of_the_running_server(zookeeper, zk, broker, mariadb,
                                                                          tmp_path):
    server = mariadb
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = server.new_database()
    servers = await start_both(ha_conf(tmp_path, zookeeper, broker, server, db), tmp_path, zk)
    out, stop_file = tmp_path / "received.jsonl", tmp_path / "stop"
    client = None
    try:
        first, second = servers
        await wait_for_log(servers[first], "example-0 started", timeout=180)
        await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
        client = java_client(("zk", zookeeper.connect_string), out, stop_file, tmp_path / "client.log", tmp_path)
        async with workload_running(server, db, seed) as workload:
            await more_batches(out, broker.address, server)
            servers[first].proc.send_signal(signal.SIGKILL)
            servers[first].proc.wait()
            await wait_until(lambda: runs(zk, second), SESSION_TIMEOUT_MS / 1000 + ha.TAKEOVER_DELAY_S + 60,
                             "the standby to take over")
            await more_batches(out, broker.address, server)
        await drain(broker.address, server, client, stop_file, tmp_path / "client.log")
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        for process in servers.values():
            process.kill()

    lines = check_received(out, server, db, workload.tables)
    assert any("reconnect" in line for line in lines)
    assert "example-0 started" in servers[second].log()


@pytest.mark.slow                       # (a session expiry, Canal's 5 s delay, two connector starts)
@pytest.mark.timeout(900)
async def test_kafka_mode_moves_to_the_standby_exactly_once(zookeeper, zk, broker, mariadb, tmp_path):
    db = mariadb.new_database()
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY)", db=db)
    conf = tcp_conf(tmp_path, broker, mariadb, db, 5406, **{
        "canal.serverMode": "kafka", "canal.zkServers": zookeeper.connect_string, "canal.register.ip": "127.0.0.1",
        "binlake.zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    servers = await start_both(conf, tmp_path, zk)
    try:
        first, second = servers
        await wait_for_log(servers[first], "example-0 started", timeout=180)
        await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
        async def written(end) -> bool:
            offset = await committed_offset(broker.address, "example")
            return offset is not None and (offset["file"], offset["pos"]) >= end

        def insert(first_id: int, last_id: int) -> None:
            for n in range(first_id, last_id, 10):
                mariadb.sql(f"INSERT INTO t VALUES {', '.join(f'({i})' for i in range(n, n + 10))}", db=db)
        insert(0, 50)
        end = mariadb.binlog_end()
        await wait_until(lambda: written(end), 240, "the running server to write the first rows")
        assert "example-0 started" not in servers[second].log()
        insert(50, 70)                          # (some written, or being written, when the kill comes)
        servers[first].proc.send_signal(signal.SIGKILL)
        servers[first].proc.wait()
        insert(70, 100)
        await wait_until(lambda: runs(zk, second), SESSION_TIMEOUT_MS / 1000 + ha.TAKEOVER_DELAY_S + 60,
                         "the standby to take over")
        end = mariadb.binlog_end()
        await wait_until(lambda: written(end), 240, "the standby's connector to write the rest")
    finally:
        for process in servers.values():
            process.kill()
    ids = [int(row["id"]) for message in await read_committed(broker.address, ["example"])
           for row in json.loads(message.value)["data"] or []]
    assert sorted(ids) == list(range(100))
