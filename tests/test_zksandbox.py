"""The throwaway ZooKeeper (sandbox.zookeeper) that the cluster's tests, the demo and bench start:
a real server on its own port and data directory, which keeps its data across a SIGKILL and
ends sessions the way the cluster will rely on (a broker's ephemeral znode goes with its session)."""

from __future__ import annotations

from kazoo.client import KazooClient

from sandbox.zookeeper import start_zookeeper


def client(server) -> KazooClient:
    zk = KazooClient(hosts=server.connect_string, timeout=10)
    zk.start(timeout=30)
    return zk


def test_znodes_survive_a_kill_and_an_ephemeral_one_ends_with_its_session(zookeeper):
    assert zookeeper.port != 2181 and zookeeper.ok()
    broker = client(zookeeper)
    broker.create("/brokers/ids/1", b'{"host": "127.0.0.1"}', ephemeral=True, makepath=True)
    broker.create("/brokers/topics/orders", b'{"partitions": {"0": [1]}}', makepath=True)
    observer = client(zookeeper)
    assert observer.get_children("/brokers/ids") == ["1"]
    broker.stop()  # a broker whose session ends: its registration goes, its topic stays
    assert observer.get_children("/brokers/ids") == []
    observer.stop()

    zookeeper.kill()
    assert not zookeeper.ok()
    restarted = start_zookeeper(zookeeper.base, port=zookeeper.port)
    try:
        after = client(restarted)
        assert after.get("/brokers/topics/orders")[0] == b'{"partitions": {"0": [1]}}'
        after.stop()
    finally:
        restarted.stop()
    assert not restarted.data_dir.exists()
