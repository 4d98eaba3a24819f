"""canal/ha.py on a real ZooKeeper: one server runs a destination, registered in Canal's nodes; the standby takes
over when it goes; a server whose session expires stops running its destinations, and takes them back first."""

from __future__ import annotations

import asyncio
import json

from kazoo.client import KazooClient

from canal import ha
from common.zk_client import stop_client


class Server:
    """A RunningMonitor and the changes it reported."""

    def __init__(self, zookeeper, address: str, destinations=("example",)) -> None:
        self.changes: list[tuple[str, bool]] = []
        self.monitor = ha.RunningMonitor(zookeeper.connect_string, address, list(destinations), self._changed, 4.0)

    async def _changed(self, destination: str, running: bool) -> None:
        self.changes.append((destination, running))


async def until(predicate, what: str, timeout: float = 30) -> None:
    """Poll `predicate` on the event loop (where the monitors change) until it holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(0.05)


async def test_one_runs_the_other_stands_by_then_takes_over(zookeeper):
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start()
    a, b = Server(zookeeper, "127.0.0.1:11111", ("example", "other")), Server(zookeeper, "127.0.0.1:11112",
                                                                              ("example", "other"))
    try:
        await a.monitor.start()
        await until(lambda: a.monitor.running == {"example", "other"}, "a to run both")
        await b.monitor.start()
        await until(lambda: b.monitor.holders == {"example": "127.0.0.1:11111", "other": "127.0.0.1:11111"},
                    "b to see a run both")
        data, stat = zk.get("/otter/canal/destinations/example/running")
        assert data == b'{"active":true,"address":"127.0.0.1:11111"}'
        assert stat.ephemeralOwner != 0
        assert sorted(zk.get_children("/otter/canal/cluster")) == ["127.0.0.1:11111", "127.0.0.1:11112"]
        assert sorted(zk.get_children("/otter/canal/destinations/other/cluster")) == ["127.0.0.1:11111",
                                                                                      "127.0.0.1:11112"]
        assert b.monitor.running == set() and b.changes == []

        await a.monitor.close()                 # (its session closes: its nodes go at once)
        await until(lambda: b.monitor.running == {"example", "other"}, "b to take over", ha.TAKEOVER_DELAY_S + 30)
        assert json.loads(zk.get("/otter/canal/destinations/other/running")[0])["address"] == "127.0.0.1:11112"
        assert zk.get_children("/otter/canal/cluster") == ["127.0.0.1:11112"]
        assert sorted(b.changes) == [("example", True), ("other", True)]
    finally:
        for server in (a, b):
            await server.monitor.close()
        stop_client(zk)


async def test_an_expired_session_stops_running_and_comes_back_first(zookeeper):
    a, b = Server(zookeeper, "127.0.0.1:11111"), Server(zookeeper, "127.0.0.1:11112")
    try:
        await a.monitor.start()
        await until(lambda: a.monitor.running == {"example"}, "a to run")
        await b.monitor.start()
        await until(lambda: b.monitor.holders == {"example": "127.0.0.1:11111"}, "b to see a run it")
        # Expire a's session as ZooKeeper does for a server gone silent: another client takes the session over and
        # closes it.
        session_id, password = a.monitor._zk.client_id
        thief = KazooClient(hosts=zookeeper.connect_string, client_id=(session_id, password))
        thief.start()
        thief.stop()
        thief.close()
        await until(lambda: a.changes[1:] == [("example", False), ("example", True)], "a to stop and run again")
        assert a.monitor.running == {"example"}
        assert b.changes == []                  # (b waits TAKEOVER_DELAY_S for the holder to come back)
    finally:
        for server in (a, b):
            await server.monitor.close()


async def test_unreachable_zookeeper_is_named(monkeypatch):
    monkeypatch.setattr(ha, "CONNECT_TIMEOUT_S", 1.0)
    monitor = ha.RunningMonitor("127.0.0.1:1", "127.0.0.1:11111", ["example"], None, 4.0)
    try:
        await monitor.start()
    except ha.ZooKeeperUnreachable as exc:
        assert "canal.zkServers: ZooKeeper at 127.0.0.1:1 did not answer" in str(exc)
    else:
        raise AssertionError("started without ZooKeeper")
