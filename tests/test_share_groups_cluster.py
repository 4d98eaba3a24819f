"""KIP-932 share groups in a ZooKeeper cluster of three brokers, with confluent-kafka's ShareConsumer:
two members share an RF-3 topic's partitions; the leader of one partition is SIGKILLed mid-run and
every record is still accepted, none twice (records locked but unacknowledged at the kill come back
with a higher delivery count); the group's coordinator is SIGKILLed and the group carries on; and
`binlake share-groups --describe` reads the group at its coordinator."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer, TopicCollection
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic, ShareFetchRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from logcore.coordinator.offsets_codec import partition_for
from logcore.protocol.codec import ApiKey, build, request_class
from test_replication import cluster, create, partitions, produce  # noqa: F401  (the fixture too)
from waiting import wait_for
from wire import WireClient

OFFSETS_PARTITIONS = 3
CONFIG = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "group.share.state.topic.num.partitions": "3",
          "group.share.min.session.timeout.ms": "2000", "group.share.session.timeout.ms": "20000",
          "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "500",
          "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "5000"}
TOPIC, GROUP = "jobs", "workers"
BATCH = 20  # records per produced batch


class Members:
    """Share consumers of one group, polled in turn; each batch is acknowledged ACCEPT at once. A
    record is `accepted` when its acknowledgement came back without error, `uncertain` when it came
    back with one (the broker may or may not have it: if it did not, the record comes again)."""

    def __init__(self, bootstrap: str, count: int) -> None:
        self.consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                         "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
                          for _ in range(count)]
        for c in self.consumers:
            c.subscribe([TOPIC])
        self.accepted: list[tuple[int, int]] = []
        self.uncertain: set[tuple[int, int]] = set()
        self.deliveries: dict[tuple[int, int], list[int]] = {}  # each record's delivery counts, as handed out
        self.by_member: list[set[int]] = [set() for _ in range(count)]  # partitions each member got records of

    def poll(self) -> None:
        for i in range(len(self.consumers)):
            self.accept(i, self.fetch(i))

    def fetch(self, i: int) -> list:
        got = [m for m in self.consumers[i].poll(0.2) if m.error() is None]
        for m in got:
            self.deliveries.setdefault((m.partition(), m.offset()), []).append(m.delivery_count())
            self.by_member[i].add(m.partition())
        return got

    def accept(self, i: int, got: list) -> None:
        if not got:
            return
        c = self.consumers[i]
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        try:
            results = c.commit_sync(30)
        except Exception:  # (the whole commit failed: every record of it is uncertain)
            results = {None: "failed"}
        failed = {(tp.partition if tp is not None else None) for tp, error in results.items() if error is not None}
        for m in got:
            key = (m.partition(), m.offset())
            if None in failed or m.partition() in failed:
                self.uncertain.add(key)
            else:
                self.accepted.append(key)

    def hold(self) -> tuple[int, list]:
        """A batch fetched and not yet acknowledged: (the member's index, its records)."""
        return wait_for(lambda: next(((i, got) for i in range(len(self.consumers)) if (got := self.fetch(i))), None),
                        "a batch to hold")

    def settled(self, nodes, expected: set[tuple[int, int]]) -> bool:
        """Every record accepted; or accepted or uncertain, with the group's start offsets at the log
        end (nothing left to hand out again)."""
        if expected <= set(self.accepted):
            return True
        ends = {p: str(1 + max(o for q, o in expected if q == p)) for p, _ in expected}
        return expected <= set(self.accepted) | self.uncertain and start_offsets(nodes) == ends

    def run_until(self, condition, what: str, timeout: float = 120) -> None:
        wait_for(lambda: self.poll() or condition(), what, timeout)

    def close(self) -> None:
        for c in self.consumers:
            c.close()
        self.consumers = []


def start_group(nodes, per_partition: int, members: int = 2) -> tuple[Members, set[tuple[int, int]]]:
    """The topic (two partitions, RF 3), the group's members, both assigned a partition before the
    records are written (else the first to join may take them all), and the records."""
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, TOPIC, 2, 3)
    resource = ConfigResource(ConfigResource.Type.GROUP, GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    group = Members(nodes.bootstrap, members)
    try:
        group.run_until(lambda: re.search(rf"is Stable with {members} member", describe(nodes)), "the members to join")
        for p in range(2):
            produce(nodes.bootstrap, TOPIC, p, [f"{p}-{n}".encode() for n in range(per_partition)], acks="all",
                    **{"batch.num.messages": BATCH})  # (a share fetch takes whole batches: several, of many)
    except BaseException:
        group.close()
        raise
    return group, {(p, o) for p in range(2) for o in range(per_partition)}


@pytest.fixture
def share_cluster(cluster):
    """start(records per partition) → (the three-broker cluster, an admin client, the group's two
    members, the records); the members are closed at the end."""
    started: list[Members] = []

    def start(per_partition: int):
        nodes = cluster(3, CONFIG)
        members, expected = start_group(nodes, per_partition)
        started.append(members)
        return nodes, AdminClient({"bootstrap.servers": nodes.bootstrap}), members, expected

    yield start
    for members in started:
        members.close()


def describe(nodes) -> str:
    """`binlake share-groups --describe`'s output (its error, while the coordinator moves)."""
    result = subprocess.run([sys.executable, "-m", "binlake.cli", "share-groups", "--bootstrap-server", nodes.bootstrap,
                             "--describe", "--group", GROUP], capture_output=True, text=True, timeout=90)
    return result.stdout + result.stderr


def start_offsets(nodes) -> dict[int, str]:
    out = describe(nodes)
    return {int(p): start for p, start in re.findall(rf"^{GROUP}\s+{TOPIC}\s+(\d+)\s+(\S+)\s+\S+$", out, re.M)}


def heartbeat(address: str, group: str, member: str, epoch: int):
    with WireClient(address) as wire:
        return wire.call(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                    subscribed_topic_names=(TOPIC,) if epoch == 0 else None))


def state_call(address: str, api: ApiKey, data: dict):
    """ReadShareGroupState / WriteShareGroupState / DeleteShareGroupState v0 (what brokers send each
    other): the one partition's result."""
    with WireClient(address) as wire:
        return wire.call(build(request_class(api, 0), data)).results[0].partitions[0]


def check_the_answers_that_send_clients_elsewhere(nodes, admin) -> None:
    """Every broker lists the share APIs and finalizes share.version 1. ShareGroupHeartbeat anywhere
    but at the group's coordinator: NOT_COORDINATOR; ShareFetch anywhere but at the partition's
    leader: NOT_LEADER_OR_FOLLOWER, naming the leader. And the share coordinator fences the writes of
    a former leader and of a writer that read before a deletion."""
    for broker in nodes.brokers:
        with WireClient(broker.address) as wire:
            versions = wire.call(ApiVersionsRequest(client_software_name="test", client_software_version="1.0"))
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert all(listed[key] == (1, 1) for key in (76, 77, 78, 79))  # ShareGroupHeartbeat ... ShareAcknowledge
        assert all(listed[key] == (0, 0) for key in range(83, 88))  # Initialize/Read/Write/Delete/ReadSummary
        assert ("share.version", 1) in [(f.name, f.max_version_level) for f in versions.finalized_features]
    answers = {b.broker_id: heartbeat(b.address, "probe", "m", 0) for b in nodes.brokers}
    joined = [i for i, a in answers.items() if a.error_code.name == "none"]
    assert len(joined) == 1 and all(a.error_code.name == "not_coordinator" for i, a in answers.items() if i not in joined)
    topic_id = answers[joined[0]].assignment.topic_partitions[0].topic_id
    leader = partitions(admin, TOPIC)[0][0]
    for broker in nodes.brokers:
        if broker.broker_id == leader:
            continue
        with WireClient(broker.address) as wire:
            fetched = wire.call(ShareFetchRequest(
                group_id="probe", member_id="m", share_session_epoch=0, max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=1, max_records=10, batch_size=10, forgotten_topics_data=(),
                topics=(FetchTopic(topic_id=topic_id, partitions=(FetchPartition(partition_index=0,
                                                                                 acknowledgement_batches=()),)),)))
        answer = fetched.responses[0].partitions[0]
        assert answer.error_code.name == "not_leader_or_follower" and answer.current_leader.leader_id == leader
    assert heartbeat(nodes.brokers[joined[0]].address, "probe", "m", -1).error_code.name == "none"

    state_leader = partitions(admin, "__share_group_state")[partition_for(f"probe:{topic_id}:0", 3)][0]
    address = nodes.brokers[state_leader].address
    key = {"group_id": "probe", "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0}]}]}

    def write(state_epoch: int, leader_epoch: int) -> str:
        key["topics"][0]["partitions"][0].update(state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=5,
                                                 state_batches=[])
        return state_call(address, ApiKey.WRITE_SHARE_GROUP_STATE, key).error_code.name

    assert write(0, 5) == "none"
    assert write(0, 4) == "fenced_leader_epoch"  # (a former leader)
    read = state_call(address, ApiKey.READ_SHARE_GROUP_STATE, {"group_id": "probe", "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 6}]}]})
    assert (read.error_code.name, read.start_offset, read.state_epoch) == ("none", 5, 0)
    assert write(0, 5) == "fenced_leader_epoch"  # (the leader at epoch 6 read it)
    assert state_call(address, ApiKey.DELETE_SHARE_GROUP_STATE, {"group_id": "probe", "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0}]}]}).error_code.name == "none"
    assert write(0, 6) == "fenced_state_epoch"  # (it read before the deletion)
    other = nodes.brokers[(state_leader + 1) % 3].address
    assert state_call(other, ApiKey.READ_SHARE_GROUP_STATE, {"group_id": "probe", "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 6}]}]}).error_code.name == "not_coordinator"


def drain(members: Members, nodes, per_partition: int) -> None:
    """Until nothing is left in flight: the group's start offsets (at its coordinator) at the log end."""
    wait_for(lambda: members.poll() or start_offsets(nodes) == {0: str(per_partition), 1: str(per_partition)},
             "the start offsets at the log end")


def check_at_least_once(members: Members, expected: set[tuple[int, int]]) -> None:
    assert expected <= set(members.accepted) | members.uncertain
    assert len(members.accepted) == len(set(members.accepted)), "a record was accepted twice"
    for key, counts in members.deliveries.items():  # (a record that came again, came with a higher count)
        assert counts == sorted(set(counts)), f"{key} was handed out with delivery counts {counts}"


def test_two_members_share_a_topic_through_its_partition_leaders_sigkill(share_cluster):
    nodes, admin, members, expected = share_cluster(300)
    check_the_answers_that_send_clients_elsewhere(nodes, admin)
    members.run_until(lambda: len(members.accepted) >= 100, "the members accepting records")
    member, held = members.hold()  # locked to the member at the kill
    partition = held[0].partition()
    leader = partitions(admin, TOPIC)[partition][0]
    nodes.brokers[leader].kill()
    killed_at = time.monotonic()
    members.accept(member, held)
    members.run_until(lambda: members.settled(nodes, expected), "every record accepted after the leader's SIGKILL")
    print(f"every record settled {time.monotonic() - killed_at:.1f} s after the kill; "
          f"{len(members.uncertain)} uncertain, {sum(len(c) > 1 for c in members.deliveries.values())} redelivered")
    check_at_least_once(members, expected)
    for m in held:  # (its acknowledgement went to the dead leader: the next one handed it out again)
        assert members.deliveries[(m.partition(), m.offset())][-1] >= 2, members.deliveries[(m.partition(), m.offset())]
    assert partitions(admin, TOPIC)[partition][0] not in (leader, -1)
    drain(members, nodes, 300)
    listed = subprocess.run([sys.executable, "-m", "binlake.cli", "share-groups", "--bootstrap-server", nodes.bootstrap,
                             "--list"], capture_output=True, text=True, timeout=90).stdout.split()
    assert sorted(listed) == ["probe", GROUP]  # (each from its coordinator alone)


def test_a_share_group_with_no_members_is_described_and_deleted_whole_at_a_new_coordinator(cluster):
    """Key 15 (which share-partitions have state) moves with the group: after the members left and the
    coordinator was SIGKILLed, the new coordinator describes the start offsets of all six partitions
    (their state spread over the three share coordinators) and deletes the state of every one."""
    nodes = cluster(3, CONFIG)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, TOPIC, 6, 3)
    resource = ConfigResource(ConfigResource.Type.GROUP, GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    for p in range(6):
        produce(nodes.bootstrap, TOPIC, p, [f"{p}-{n}".encode() for n in range(10)], acks="all")
    members = Members(nodes.bootstrap, 1)
    try:
        members.run_until(lambda: len(members.accepted) == 60, "every record accepted")
    finally:
        members.close()
    wait_for(lambda: "is Empty" in describe(nodes), "the member to leave")
    coordinator_of = lambda: partitions(admin, "__consumer_offsets").get(  # noqa: E731
        partition_for(GROUP, OFFSETS_PARTITIONS), (-1,))[0]
    coordinator = coordinator_of()
    state_leaders = partitions(admin, "__share_group_state")
    topic_id = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30).topic_id
    topic_uuid = uuid.UUID(bytes=bytes(topic_id.get_most_significant_bits().to_bytes(8, "big", signed=True)
                                       + topic_id.get_least_significant_bits().to_bytes(8, "big", signed=True)))
    state_of = {p: state_leaders[partition_for(f"{GROUP}:{topic_uuid}:{p}", 3)][0] for p in range(6)}
    nodes.brokers[coordinator].kill()
    wait_for(lambda: coordinator_of() not in (coordinator, -1), "a new coordinator")
    assert set(state_of.values()) - {coordinator_of()}, "every key's state is at the new coordinator's broker"
    wait_for(lambda: start_offsets(nodes) == {p: "10" for p in range(6)}, "the six start offsets, described whole")
    deleted = subprocess.run([sys.executable, "-m", "binlake.cli", "share-groups", "--bootstrap-server",
                              nodes.bootstrap, "--delete", "--group", GROUP], capture_output=True, text=True, timeout=90)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr

    def summary(p: int):  # ReadShareGroupStateSummary at the key's share coordinator (its leader now)
        leader = partitions(admin, "__share_group_state")[partition_for(f"{GROUP}:{topic_uuid}:{p}", 3)][0]
        return state_call(nodes.brokers[leader].address, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {
            "group_id": GROUP, "topics": [{"topic_id": topic_uuid, "partitions": [{"partition": p, "leader_epoch": -1}]}]})
    assert [(s.error_code.name, s.start_offset) for s in map(summary, range(6))] == [("none", -1)] * 6


@pytest.mark.slow
def test_a_share_group_carries_on_through_its_coordinators_sigkill(share_cluster):
    nodes, admin, members, expected = share_cluster(400)
    coordinator_of = lambda: partitions(admin, "__consumer_offsets").get(  # noqa: E731
        partition_for(GROUP, OFFSETS_PARTITIONS), (-1,))[0]
    members.run_until(lambda: len(members.accepted) >= 200, "both members accepting records")
    coordinator = coordinator_of()
    nodes.brokers[coordinator].kill()
    wait_for(lambda: coordinator_of() not in (coordinator, -1), "a new coordinator")
    members.run_until(lambda: members.settled(nodes, expected), "every record accepted after the coordinator's SIGKILL")
    check_at_least_once(members, expected)
    out = describe(nodes)
    assert re.search(rf"Share group {GROUP} is Stable with 2 member\(s\)", out), out
    drain(members, nodes, 400)
    # An admin's reset at the new coordinator: the leaders' share-partitions are read again.
    members.close()
    wait_for(lambda: "is Empty" in describe(nodes), "the members to leave")
    reset = subprocess.run([sys.executable, "-m", "binlake.cli", "share-groups", "--bootstrap-server", nodes.bootstrap,
                            "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-offset", "350", "--execute"],
                           capture_output=True, text=True, timeout=90)
    assert reset.returncode == 0, reset.stdout + reset.stderr
    members = Members(nodes.bootstrap, 1)
    try:
        again = {(p, o) for p in range(2) for o in range(350, 400)}
        members.run_until(lambda: again <= set(members.accepted), "the records after the reset, again")
        assert set(members.accepted) == again
        drain(members, nodes, 400)
    finally:
        members.close()


@pytest.mark.slow
def test_every_record_is_accepted_through_two_leader_sigkills_in_turn(share_cluster):
    """The first broker killed comes back; then the leader of the other partition is killed."""
    nodes, admin, members, expected = share_cluster(1000)
    for partition, after in ((0, 400), (1, 1200)):
        members.run_until(lambda: len(members.accepted) >= after, f"{after} records accepted")
        leader = partitions(admin, TOPIC)[partition][0]
        nodes.brokers[leader].kill()
        members.run_until(lambda: partitions(admin, TOPIC).get(partition, (-1,))[0] not in (leader, -1),
                          f"a new leader of {TOPIC}-{partition}")
        nodes.brokers[leader].restart()
    members.run_until(lambda: members.settled(nodes, expected), "every record accepted", timeout=180)
    check_at_least_once(members, expected)
    drain(members, nodes, 1000)
