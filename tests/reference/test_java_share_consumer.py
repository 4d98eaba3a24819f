"""Kafka 4.1's Java KafkaShareConsumer (KIP-932) against logcore: Kafka's own verifiable share
consumers sharing one partition with one SIGKILLed mid-way, its console share consumer, and its
kafka-share-groups tool (--list, --describe, --delete; 4.1.1's --reset-offsets says "not yet
implemented")."""

from __future__ import annotations

import re
import signal

import pytest

from java_tools import KafkaTools, json_lines
from test_replication import cluster  # noqa: F401  (the fixture)
from waiting import wait_for

pytestmark = pytest.mark.java

LOCK_MS = 3000
CONFIG = {"group.share.min.session.timeout.ms": "2000", "group.share.session.timeout.ms": "6000",
          "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "500",
          "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": str(LOCK_MS)}


@pytest.fixture
def tools(reference_jars, broker_factory) -> KafkaTools:
    return KafkaTools(broker_factory(CONFIG).address)


class VerifiableShareConsumer:
    def __init__(self, tools: KafkaTools, log, topic: str, group: str) -> None:
        self.log = log
        self.proc = tools.start("kafka-verifiable-share-consumer", "--bootstrap-server", tools.address, "--topic", topic,
                                "--group-id", group, "--acknowledgement-mode", "sync",
                                "--offset-reset-strategy", "earliest", out=open(log, "w"))

    def offsets(self, event: str) -> list[int]:
        """The offsets of its `event`s; of offsets_acknowledged, only those the broker took (an
        acknowledgement of a record whose lock ran out meanwhile is refused: "success": false)."""
        return [o for e in json_lines(self.log.read_text()) if e["name"] == event and e.get("success", True)
                for p in e["partitions"] for o in p["offsets"]]


def start_offset(t: KafkaTools, group: str) -> int | None:
    found = re.search(rf"^{group}\s+shared\s+0\s+(\d+)", t.admin("kafka-share-groups", "--describe", "--group", group), re.M)
    return int(found[1]) if found else None


@pytest.mark.parametrize("total", [20000, pytest.param(100000, marks=pytest.mark.slow)])  # (the 100,000: 1 min)
def test_three_java_share_consumers_one_killed_accept_every_record_once(tools, tmp_path, total):
    t = tools
    t.admin("kafka-topics", "--create", "--topic", "shared", "--partitions", "1")
    consumers = [VerifiableShareConsumer(t, tmp_path / f"c{i}.jsonl", "shared", "jsg") for i in range(3)]
    wait_for(lambda: t.admin("kafka-share-groups", "--describe", "--group", "jsg", "--members").count("shared:0") == 3,
             "three Java members, all on partition 0", 120)
    producer = t.start("kafka-verifiable-producer", "--bootstrap-server", t.address, "--topic", "shared",
                       "--max-messages", str(total), "--throughput", str(total // 10), "--acks", "-1",
                       out=open(tmp_path / "producer.jsonl", "w"))
    wait_for(lambda: all(c.offsets("offsets_acknowledged") for c in consumers), "every member to accept records", 120)
    victim = consumers[0]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    assert producer.wait(120) == 0

    wait_for(lambda: start_offset(t, "jsg") == total, "the share group's start offset to reach the end", 120)
    accepted = [o for c in consumers for o in c.offsets("offsets_acknowledged")]
    assert len(accepted) == len(set(accepted)), "a record was accepted twice"
    delivered_to_victim = set(victim.offsets("records_consumed"))
    # (the victim may have been killed after its acknowledgement reached the broker, before it printed it)
    assert set(range(total)) - set(accepted) <= delivered_to_victim
    assert set(consumers[1].offsets("offsets_acknowledged")) and set(consumers[2].offsets("offsets_acknowledged"))
    for c in consumers[1:]:
        c.proc.send_signal(signal.SIGTERM)
        c.proc.wait(60)


def test_the_console_share_consumer_and_the_share_groups_tool(tools):
    t = tools
    t.admin("kafka-topics", "--create", "--topic", "shared", "--partitions", "1")
    t.admin("kafka-console-producer", "--topic", "shared", input="".join(f"m{i}\n" for i in range(5)))
    t.admin("kafka-configs", "--alter", "--entity-type", "groups", "--entity-name", "console",
            "--add-config", "share.auto.offset.reset=earliest")
    out = t.admin("kafka-console-share-consumer", "--topic", "shared", "--group", "console", "--max-messages", "5",
                  "--timeout-ms", "30000")
    assert sorted(out.split()) == [f"m{i}" for i in range(5)]
    assert "console" in t.admin("kafka-share-groups", "--list").split()
    assert start_offset(t, "console") == 5  # (Kafka 4.1.1's tool has no --reset-offsets yet: binlake share-groups has)
    t.admin("kafka-share-groups", "--delete", "--group", "console")
    assert "console" not in t.admin("kafka-share-groups", "--list").split()


@pytest.mark.slow
def test_java_share_consumers_in_a_cluster_through_a_partition_leaders_sigkill(reference_jars, cluster, tmp_path):
    """Three brokers on ZooKeeper, a topic of two partitions with three replicas, three Java share
    consumers; the leader of partition 0 is SIGKILLed mid-run: every record accepted, none twice."""
    nodes = cluster(3, {**CONFIG, "offsets.topic.num.partitions": "3", "group.share.state.topic.num.partitions": "3"})
    t = KafkaTools(nodes.bootstrap)
    t.admin("kafka-topics", "--create", "--topic", "shared", "--partitions", "2", "--replication-factor", "3")
    consumers = [VerifiableShareConsumer(t, tmp_path / f"c{i}.jsonl", "shared", "jsg") for i in range(3)]
    wait_for(lambda: t.admin("kafka-share-groups", "--describe", "--group", "jsg", "--members").count("shared:") == 3,
             "three Java members", 120)
    total = 20000
    producer = t.start("kafka-verifiable-producer", "--bootstrap-server", t.address, "--topic", "shared",
                       "--max-messages", str(total), "--throughput", str(total // 10), "--acks", "-1",
                       out=open(tmp_path / "producer.jsonl", "w"))
    wait_for(lambda: sum(len(c.offsets("offsets_acknowledged")) for c in consumers) > total // 5,
             "the members accepting records", 120)
    leader = re.search(r"Partition: 0\s+Leader: (\d+)", t.admin("kafka-topics", "--describe", "--topic", "shared"))
    nodes.brokers[int(leader[1])].kill()
    assert producer.wait(180) == 0
    sent = {(e["partition"], e["offset"]) for e in json_lines((tmp_path / "producer.jsonl").read_text())
            if e["name"] == "producer_send_success"}  # (a send cut by the kill may fail, and may still be in the log)
    assert len(sent) > total * 0.9

    def events(name: str) -> list[tuple[int, int]]:
        """(partition, offset) of each such event that succeeded (an acknowledgement cut by the kill fails)."""
        return [(p["partition"], o) for c in consumers for e in json_lines(c.log.read_text())
                if e["name"] == name and e.get("success", True) for p in e["partitions"] for o in p["offsets"]]

    ends = dict(re.findall(r"^shared:(\d):(\d+)$", t.admin("kafka-get-offsets", "--topic", "shared"), re.M))
    described = {}

    def at_the_end() -> bool:
        described["out"] = t.admin("kafka-share-groups", "--describe", "--group", "jsg")
        return dict(re.findall(r"^jsg\s+shared\s+(\d)\s+(\d+)", described["out"], re.M)) == ends

    try:
        wait_for(at_the_end, "the share group's start offsets at the end", 180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: log ends {ends}, last described:\n{described.get('out')}") from None
    accepted = events("offsets_acknowledged")
    assert len(accepted) == len(set(accepted)), "a record was accepted twice"
    # (an acknowledgement that reached the killed leader's state but not its member is not printed)
    assert sent - set(accepted) <= set(events("records_consumed"))
    for c in consumers:
        c.proc.send_signal(signal.SIGTERM)
        c.proc.wait(60)
