"""What a broker alone says about the cluster (Metadata, DescribeCluster): a cluster of one, its rack
included (a ZooKeeper cluster's answers: tests/test_replication.py)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from testkit.brokerproc import BrokerProcess


def test_the_broker_is_the_whole_cluster_with_its_rack(broker_factory):
    broker = broker_factory(config={"broker.rack": "rack-a"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    cluster = admin.describe_cluster().result(30)
    assert [(n.id, n.host, n.port, n.rack) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port, "rack-a")]
    assert cluster.controller.id == 0
    brokers = admin.list_topics(timeout=30).brokers
    assert [(b.id, b.host, b.port) for b in brokers.values()] == [(0, "127.0.0.1", broker.port)]


def test_broker_id_comes_from_the_config_unless_the_command_line_names_one(tmp_path):
    for flag, expected in (None, 3), (5, 5):
        broker = BrokerProcess(tmp_path / f"data-{expected}", config={"broker.id": "3"}, broker_id=flag).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.address})
            nodes = admin.describe_cluster().result(30).nodes
            assert [n.id for n in nodes] == [expected]
        finally:
            broker.kill()

