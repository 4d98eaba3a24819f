"""The fault machinery itself: namespaces and cuts, the reaper, and the checkers on histories
made up to hold each anomaly."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from testkit.faults import checkers
from testkit.faults.logs import Entry
from testkit.faults.netns import Net, namespaces, reap
from testkit.faults.workloads import Poll, Send, Txn

ROOT = Path(__file__).resolve().parents[2]
LISTEN = "import socket; s = socket.socket(); s.bind(('0.0.0.0', 7777)); s.listen(64)\nwhile True: s.accept()"


def connects(node, address: str) -> bool:
    code = f"import socket; socket.create_connection(({address!r}, 7777), timeout=1)"
    return subprocess.run(["ip", "netns", "exec", node.ns, sys.executable, "-c", code],
                          capture_output=True).returncode == 0


def test_a_cut_drops_one_link_both_ways_and_a_heal_restores_it():
    with Net() as net:
        a, b = net.add("a"), net.add("b")
        server = b.popen([sys.executable, "-c", LISTEN])
        deadline = time.monotonic() + 10
        while not connects(a, b.address):
            assert time.monotonic() < deadline, "b's listener never answered"
        b.cut(a.address)
        assert not connects(a, b.address)
        socket.create_connection((b.address, 7777), timeout=2).close()  # the test process is never cut off
        b.heal()
        assert connects(a, b.address)
        server.kill()
        names = [a.ns, b.ns, net.hub]
    assert not set(names) & set(namespaces())


def test_a_net_after_another_in_one_process_has_other_addresses():
    """A client of the first (a producer still closing when it was torn down) must not find the
    second's nodes where the first's were: it auto-created topics there, once."""
    with Net() as first:
        old = first.add("a").address
    with Net() as second:
        assert second.add("a").address != old


def test_the_namespaces_of_a_sigkilled_test_are_reaped():
    script = ("import sys, time; sys.path.insert(0, sys.argv[1]); from testkit.faults.netns import Net\n"
              "net = Net().start(); node = net.add('x'); node.popen(['sleep', '600'])\n"
              "print(net.tag, flush=True); time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", script, str(ROOT)], stdout=subprocess.PIPE, text=True)
    tag = owner.stdout.readline().strip()
    assert [ns for ns in namespaces() if ns.startswith(tag + "-")]
    owner.kill()
    owner.wait()
    removed = reap()
    assert sorted(removed) == sorted([f"{tag}-hub", f"{tag}-x"])
    assert not [ns for ns in namespaces() if ns.startswith(tag + "-")]
    assert tag.replace("-", "") not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def sent(value: str, partition: int, offset: int | None, acked: float | None = 1.0) -> Send:
    return Send(value.encode(), partition, 0.0, acked, offset)


def test_the_queue_checker_finds_each_anomaly():
    sends = [sent("a", 0, 0), sent("b", 0, 1), sent("c", 0, 2), sent("d", 0, 5), sent("e", 1, 0, None)]
    polls = [Poll(0, 0, b"a", 2.0, 0), Poll(0, 1, b"b", 2.0, 0), Poll(0, 1, b"x", 2.1, 0), Poll(0, 0, b"a", 2.2, 0)]
    final = {0: [(0, b"a"), (1, b"b"), (3, b"b"), (4, b"d")], 1: [(0, b"e")]}
    found = checkers.check_queue(sends, polls, final)
    assert set(found) == {"lost", "duplicated", "inconsistent-offsets", "nonmonotonic-poll", "unseen"}
    assert found["lost"] == ["b'c' acknowledged at 0/2, not in the log"]
    writers = checkers.writers({0: [Entry(1, b"b", 1, False, 7, 0, 1), Entry(3, b"b", 2, False, 7, 1, 0)]})
    assert checkers.check_queue(sends, polls, final, writers)["duplicated"] == [
        "b'b' at [(0, 1), (0, 3)], written by ['producer 7 epoch 0 seq 1', 'producer 7 epoch 1 seq 0']"]
    assert checkers.check_queue(sends[:2], polls[:2], {0: [(0, b"a"), (1, b"b")]}) == {}


def test_the_transaction_checker_finds_each_anomaly():
    txns = [Txn(0, {b"t0-0": 0, b"t0-1": 1}, 0.0, 1.0, "committed"),
            Txn(1, {b"t1-0": 0, b"t1-1": 1}, 0.0, None, "aborted"),
            Txn(2, {b"t2-0": 0, b"t2-1": 1}, 0.0, 5.0, "committed"),
            Txn(3, {b"t3-0": 0, b"t3-1": 1}, 0.0, 6.0, "committed")]
    polls = [Poll(0, 0, b"t0-0", 2.0, 0), Poll(0, 3, b"t1-0", 2.0, 0), Poll(1, 2, b"t2-1", 4.0, 0)]
    final = {0: [(0, b"t0-0"), (3, b"t1-0")], 1: [(0, b"t0-1"), (2, b"t2-1")]}
    found = checkers.check_txns(txns, polls, final)
    assert set(found) == {"aborted-read", "uncommitted-read", "torn-transaction", "lost"}


def test_the_ack_checker_counts_the_brokers_that_held_each_acknowledged_write():
    sends = [sent("a", 0, 0, acked=1.0), sent("b", 0, 1, acked=2.0), sent("c", 0, 2, acked=9.0)]
    snapshot = ("the heal", 5.0, {0: {b"a", b"b", b"c"}, 1: {b"a"}, 2: {b"a"}})
    found = checkers.check_acks(sends, [snapshot], min_isr=2)
    assert found == {"held-by-too-few": ["b'b' acknowledged at 0/1 3.0 s before the heal: on broker(s) [0] only"]}


def test_the_replica_checker_compares_records():
    same = [Entry(0, b"a", 1, False, -1), Entry(1, b"b", 1, False, -1)]
    assert checkers.check_replicas({0: same, 1: list(same)}) == {}
    other = [Entry(0, b"a", 1, False, -1), Entry(1, b"z", 2, False, -1)]
    assert checkers.check_replicas({0: same, 1: other}) == {"diverged": [
        "brokers 0 and 1 differ from record 1 (2 and 2 records)"]}
