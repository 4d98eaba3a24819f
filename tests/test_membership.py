"""Brokers' membership of a ZooKeeper cluster (logcore/cluster/membership.py) on a real ZooKeeper:
registrations in Kafka's layout, the live brokers, one controller per epoch, and a new controller
when the old one's process dies (SIGKILL: its session expires, as a dead broker's does)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
from kazoo.client import KazooClient

from logcore.cluster.membership import BrokerIdTaken, ZooKeeperMembership
from logcore.cluster.view import Node
from common.zk_client import stop_client
from waiting import wait_for

SESSION_TIMEOUT_S = 4.0  # a killed broker's session ends this long after its last heartbeat


def client(zookeeper) -> KazooClient:
    zk = KazooClient(hosts=zookeeper.connect_string, timeout=SESSION_TIMEOUT_S)
    zk.start(timeout=30)
    return zk


def member(zookeeper, broker_id: int, rack: str | None = None) -> ZooKeeperMembership:
    membership = ZooKeeperMembership(client(zookeeper), Node(broker_id, "127.0.0.1", 9090 + broker_id, rack))
    membership.start()
    return membership


def member_process(zookeeper, broker_id: int) -> subprocess.Popen:
    """A broker's membership in a process of its own, which can die or stall for real."""
    script = textwrap.dedent(f"""
        import time
        from kazoo.client import KazooClient
        from logcore.cluster.membership import ZooKeeperMembership
        from logcore.cluster.view import Node
        zk = KazooClient(hosts={zookeeper.connect_string!r}, timeout={SESSION_TIMEOUT_S})
        zk.start(timeout=30)
        ZooKeeperMembership(zk, Node({broker_id}, "127.0.0.1", {9090 + broker_id})).start()
        print("started", flush=True)
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "started"
    return process


def test_brokers_register_in_kafkas_layout_and_see_each_other(zookeeper):
    one, two = member(zookeeper, 1, rack="r1"), member(zookeeper, 2)
    try:
        wait_for(lambda: [n.node_id for n in one.live_nodes()] == [1, 2] == [n.node_id for n in two.live_nodes()],
                 "both brokers to see both")
        assert one.live_nodes()[0] == Node(1, "127.0.0.1", 9091, "r1", (("PLAINTEXT", "127.0.0.1", 9091),))
        registration = json.loads(one.zk.get("/brokers/ids/1")[0])  # what zkCli shows a Kafka operator
        assert registration["endpoints"] == ["PLAINTEXT://127.0.0.1:9091"] and registration["rack"] == "r1"
        assert registration["version"] == 5 and registration["port"] == 9091
        with pytest.raises(BrokerIdTaken, match="broker id 2 is already registered .* 127.0.0.1:9092"):
            member(zookeeper, 2)

        stop_client(two.zk)  # a clean shutdown ends the session at once: the others see the broker go
        wait_for(lambda: [n.node_id for n in one.live_nodes()] == [1], "broker 2 to leave")
    finally:
        stop_client(one.zk)


def test_one_controller_and_a_new_one_with_a_higher_epoch_when_it_dies(zookeeper, tmp_path):
    first = member_process(zookeeper, 1)  # (its process can die for real: its session then expires)
    observer = client(zookeeper)
    try:
        wait_for(lambda: observer.exists("/controller"), "a controller")
        assert json.loads(observer.get("/controller")[0])["brokerid"] == 1
        assert observer.get("/controller_epoch")[0] == b"1"

        second, third = member(zookeeper, 2), member(zookeeper, 3)
        wait_for(lambda: second.controller_id == 1 == third.controller_id, "brokers 2 and 3 to know the controller")
        assert not second.is_controller and not third.is_controller

        first.kill()  # SIGKILL: no goodbye; ZooKeeper ends the session when it times out
        first.wait()
        wait_for(lambda: second.is_controller or third.is_controller, "a new controller")
        winner, loser = (second, third) if second.is_controller else (third, second)
        assert winner.controller_epoch == 2 and observer.get("/controller_epoch")[0] == b"2"
        wait_for(lambda: loser.controller_id == winner.node.node_id, "the other broker to follow the new controller")
        # (the controller's znode and the broker list are separate watches: either may tell first)
        wait_for(lambda: [n.node_id for n in winner.live_nodes()] == [2, 3], "the new controller to see broker 1 gone")

        stop_client(winner.zk)  # and once more: the last broker takes over with the next epoch
        wait_for(lambda: loser.is_controller, "the last broker to become controller")
        assert loser.controller_epoch == 3
        stop_client(loser.zk)
    finally:
        first.kill()
        stop_client(observer)


def test_a_broker_whose_session_expired_registers_again_and_follows_the_new_controller(zookeeper):
    stalled = member_process(zookeeper, 1)
    observer = client(zookeeper)
    try:
        wait_for(lambda: observer.exists("/controller"), "a controller")
        second = member(zookeeper, 2)
        first_session = observer.exists("/brokers/ids/1").ephemeralOwner

        stalled.send_signal(signal.SIGSTOP)  # a broker paused past its session timeout (a long GC, a VM stall)
        wait_for(lambda: observer.exists("/brokers/ids/1") is None, "broker 1's session to expire")
        wait_for(lambda: second.is_controller, "broker 2 to take over as controller")
        stalled.send_signal(signal.SIGCONT)

        wait_for(lambda: observer.exists("/brokers/ids/1") is not None, "broker 1 to register again")
        assert observer.exists("/brokers/ids/1").ephemeralOwner != first_session, "registered in a new session"
        wait_for(lambda: [n.node_id for n in second.live_nodes()] == [1, 2], "broker 2 to see broker 1 back")
        assert json.loads(observer.get("/controller")[0])["brokerid"] == 2, "the new controller stays"
        stop_client(second.zk)
    finally:
        stalled.kill()
        stop_client(observer)


def test_a_registration_that_is_not_kafkas_json_is_skipped_with_a_warning(zookeeper, caplog):
    observer = client(zookeeper)
    observer.create("/brokers/ids/7", b"not json", makepath=True)  # (written by some other tool)
    one = member(zookeeper, 1)
    try:
        wait_for(lambda: [n.node_id for n in one.live_nodes()] == [1], "broker 1 to see itself")
        assert "ignoring /brokers/ids/7: /brokers/ids/7 does not hold JSON" in caplog.text
    finally:
        stop_client(one.zk)
        stop_client(observer)


def test_a_broker_restarted_right_after_a_kill_waits_out_its_old_registration(zookeeper):
    """The killed process's session holds /brokers/ids/N until it expires: the restarted broker waits
    for that instead of calling the id taken."""
    killed = member_process(zookeeper, 4)
    killed.kill()
    killed.wait()
    probe = client(zookeeper)
    try:
        assert probe.exists("/brokers/ids/4"), "the killed broker's registration outlives it for a while"
        restarted = ZooKeeperMembership(client(zookeeper), Node(4, "127.0.0.1", 9094))
        restarted.start(stale_wait_s=3 * SESSION_TIMEOUT_S)
        data, stat = probe.get("/brokers/ids/4")
        assert stat.ephemeralOwner == restarted.zk.client_id[0]
        stop_client(restarted.zk)
    finally:
        stop_client(probe)
