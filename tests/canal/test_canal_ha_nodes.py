"""canal/ha.py on a real ZooKeeper: one server runs a destination, registered in Canal's nodes; the standby takes
over when it goes; a server whose session expires stops running its destinations, and takes them back first. And
the TCP server's side of it on a real broker: a destination is served only while it runs here."""

from __future__ import annotations

import asyncio
import json
import struct

from kazoo.client import KazooClient

from canal import ha
from canal.server import CanalServer, DestinationLog
from cdc.formats.proto import CanalProtocol_pb2 as pb
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


async def test_a_server_restarted_after_a_crash_takes_its_destination_back_at_once(zookeeper):
    # The crashed server's session, still alive: its running node and its registration, under the same address.
    crashed = KazooClient(hosts=zookeeper.connect_string)
    crashed.start()
    crashed.create(ha.running_path("example"), ha.running_data("127.0.0.1:11111"), ephemeral=True, makepath=True)
    crashed.create(ha.cluster_path("127.0.0.1:11111"), ephemeral=True, makepath=True)
    restarted = Server(zookeeper, "127.0.0.1:11111")
    try:
        await restarted.monitor.start()
        await until(lambda: restarted.monitor.holders == {"example": "127.0.0.1:11111"}, "the old node seen")
        assert restarted.monitor.running == set()       # (the node is another session's)
        gone = asyncio.get_running_loop().time()
        stop_client(crashed)                            # (its session ends, as ZooKeeper expires a dead one's)
        await until(lambda: restarted.monitor.running == {"example"}, "the restarted server to run it")
        assert asyncio.get_running_loop().time() - gone < ha.TAKEOVER_DELAY_S    # (its own: no delay)
        zk = restarted.monitor._zk
        await until(lambda: getattr(zk.exists(ha.cluster_path("127.0.0.1:11111")), "ephemeralOwner", None)
                    == zk.client_id[0], "the restarted server registered again")
    finally:
        await restarted.monitor.close()


async def test_a_stop_lets_a_change_under_way_finish(zookeeper):
    entered, release, finished = asyncio.Event(), asyncio.Event(), []

    async def change(destination: str, running: bool) -> None:     # (a connector starting, say)
        entered.set()
        await release.wait()
        finished.append((destination, running))
    monitor = ha.RunningMonitor(zookeeper.connect_string, "127.0.0.1:11111", ["example"], change, 4.0)
    await monitor.start()
    await asyncio.wait_for(entered.wait(), 30)
    closing = asyncio.create_task(monitor.close())
    await asyncio.sleep(0)                      # (the close is under way: it waits for the change)
    release.set()
    await asyncio.wait_for(closing, 30)
    assert finished == [("example", True)]


async def test_unreachable_zookeeper_is_named(monkeypatch):
    monkeypatch.setattr(ha, "CONNECT_TIMEOUT_S", 1.0)
    monitor = ha.RunningMonitor("127.0.0.1:1", "127.0.0.1:11111", ["example"], None, 4.0)
    try:
        await monitor.start()
    except ha.ZooKeeperUnreachable as exc:
        assert "canal.zkServers: ZooKeeper at 127.0.0.1:1 did not answer" in str(exc)
    else:
        raise AssertionError("started without ZooKeeper")


class Client:
    """Canal's client protocol over a socket, as far as a subscription and a get."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> "Client":
        client = cls(*await asyncio.open_connection("127.0.0.1", port))
        assert (await client.packet()).type == pb.HANDSHAKE
        assert await client.ask(pb.CLIENTAUTHENTICATION, pb.ClientAuth(username="")) == (0, "")
        return client

    async def packet(self) -> pb.Packet:
        (size,) = struct.unpack(">I", await self.reader.readexactly(4))
        return pb.Packet.FromString(await self.reader.readexactly(size))

    async def ask(self, packet_type: int, body) -> tuple[int, str] | int:
        """(error code, message) of an Ack; a Messages' batch id."""
        data = pb.Packet(type=packet_type, body=body.SerializeToString()).SerializeToString()
        self.writer.write(struct.pack(">I", len(data)) + data)
        reply = await self.packet()
        if reply.type == pb.MESSAGES:
            return pb.Messages.FromString(reply.body).batch_id
        ack = pb.Ack.FromString(reply.body)
        return ack.error_code, ack.error_message

    async def subscribe(self) -> tuple[int, str]:
        return await self.ask(pb.SUBSCRIPTION, pb.Sub(destination="example", client_id="1001"))


async def test_the_tcp_server_serves_a_destination_only_while_it_runs_here(broker):
    server = CanalServer("127.0.0.1", 0, {"example": DestinationLog("example", "example.canal-entries",
                                                                   broker.address)}, standby=True)
    await server.start()
    try:
        standby = await Client.connect(server.port)
        assert await standby.subscribe() == (400, "destination:example should start first (this server stands "
                                                  "by for it: another runs it)")
        server.serve("example")
        client = await Client.connect(server.port)
        assert await client.subscribe() == (0, "")
        assert await client.ask(pb.GET, pb.Get(destination="example", client_id="1001", fetch_size=10,
                                               timeout=-1)) == -1
        await server.release("example")        # (the node lost: its clients go, to reconnect where it runs now)
        assert await asyncio.wait_for(client.reader.read(), 30) == b""
        assert (await (await Client.connect(server.port)).subscribe())[0] == 400
    finally:
        await server.stop()
