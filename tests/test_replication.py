"""A replicated cluster on real ZooKeeper with brokers in processes of their own (docs/cluster.md):
leaders and ISRs, acknowledged writes surviving a leader's death, followers leaving and rejoining the
ISR, min.insync.replicas, a returning leader cutting what only it had (KIP-101), and the group and
transaction coordinators moving with the leadership of their internal topics.

The default suite runs the core of it (spread, a leader's death, the coordinators moving); the
variants are `slow` (`pytest -m slow tests/test_replication.py`)."""

from __future__ import annotations

import asyncio
import datetime
import json
import signal
import threading

import pytest
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                  NewTopic)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kazoo.client import KazooClient

from binlake.cli import main
from testkit.clusterproc import LocalCluster
from common.zk_client import stop_client
from logcore.cluster.zk_layout import decode_partition_state, partition_state_path
from logcore.coordinator.offsets_codec import partition_for
from logcore.replication.partition import FollowerProgress
from prometheus_scrape import endpoint, sample, scrape
from waiting import wait_for
from wire import WireClient

# A killed broker's ZooKeeper session ends after this; the controller then elects new leaders.
FAST_FAILOVER = {"zookeeper.session.timeout.ms": "6000"}


@pytest.fixture
def cluster(tmp_path):
    clusters = []

    def make(brokers: int = 3, config: dict[str, str] | None = None) -> LocalCluster:
        clusters.append(LocalCluster(tmp_path / "cluster", brokers, {**FAST_FAILOVER, **(config or {})}).start())
        return clusters[-1]

    yield make
    for started in clusters:
        started.stop()
        for broker in started.brokers:  # (pytest shows a teardown's output only when the test failed)
            lines = [line for line in broker.log().splitlines() if "coordinating the groups of" not in line]
            print(f"--- the end of broker {broker.broker_id}'s log ({broker.log_path}), without the group "
                  f"coordinator's one line per __consumer_offsets partition ---", *lines[-60:], sep="\n")


def partitions(admin: AdminClient, topic: str) -> dict:
    """partition -> (leader, replicas, isr) as Metadata says, or {} while the topic is unknown (or
    while the request went to a broker just killed, and timed out)."""
    try:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException:
        return {}
    if found is None or found.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in found.partitions.values()}


def isr_in_zookeeper(nodes: LocalCluster, topic: str, partition: int) -> list[int]:
    """The partition's ISR as its state znode holds it (what its leader last wrote)."""
    zk = KazooClient(hosts=nodes.zookeeper.connect_string)
    zk.start(30)
    try:
        path = partition_state_path(topic, partition)
        return sorted(decode_partition_state(path, zk.get(path)[0]).isr)
    finally:
        stop_client(zk)


def create(admin: AdminClient, topic: str, count: int, replication_factor: int, **configs: str) -> dict:
    admin.create_topics([NewTopic(topic, count, replication_factor, config=configs)])[topic].result(30)
    return wait_for(lambda: (found := partitions(admin, topic)) and len(found) == count and all(
        leader >= 0 and len(isr) == replication_factor for leader, _, isr in found.values()) and found,
        f"{topic}'s partitions to have leaders and full ISRs")


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes], **config) -> list[bytes]:
    """Write `values`; the ones acknowledged, in order."""
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})

    def delivered(err, msg):
        if err is None:
            acked.append(msg.value())

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(120) == 0, "messages still unacknowledged after 120 s"
    return acked


def consume(bootstrap: str, topic: str, partition: int, until: int) -> list[bytes]:
    """Every value of the partition from offset 0 until `until` values have come (or 60 s pass)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    try:
        wait_for(lambda: _poll_into(consumer, values) >= until, f"{until} values from {topic}-{partition}")
    finally:
        consumer.close()
    return values


def _poll_into(consumer: Consumer, values: list[bytes]) -> int:
    for message in consumer.consume(500, 0.2):
        if message.error() is None:
            values.append(message.value())
    return len(values)


def test_a_topics_partitions_are_led_and_replicated_across_the_brokers(cluster):
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    described = admin.describe_cluster().result(30)
    assert sorted(n.id for n in described.nodes) == [0, 1, 2]
    assert described.controller.id in (0, 1, 2)

    found = create(admin, "orders", 3, 3, **{"min.insync.replicas": "2"})
    assert sorted(leader for leader, _, _ in found.values()) == [0, 1, 2], "leadership spread over the brokers"
    assert all(replicas[0] == leader and sorted(replicas) == [0, 1, 2] for leader, replicas, _ in found.values())

    shown = CliRunner().invoke(main, ["cluster", "--bootstrap-server", nodes.bootstrap])
    assert shown.exit_code == 0, shown.output
    assert f"Controller: {described.controller.id}" in shown.output
    assert [line.split("\t")[1] for line in shown.output.splitlines()[1:]] == [f"Broker: {i}" for i in range(3)]
    shown = CliRunner().invoke(main, ["topics", "describe", "--bootstrap-server", nodes.bootstrap, "--topic", "orders"])
    assert shown.exit_code == 0, shown.output
    assert "ReplicationFactor: 3\tConfigs: min.insync.replicas=2" in shown.output
    rows = {}
    for line in shown.output.splitlines()[1:]:
        fields = dict(field.split(": ") for field in line.strip().split("\t"))
        rows[int(fields["Partition"])] = (int(fields["Leader"]), [int(b) for b in fields["Replicas"].split(",")],
                                          sorted(int(b) for b in fields["Isr"].split(",")))
    assert rows == found
    values = [f"v{i}".encode() for i in range(500)]
    assert produce(nodes.bootstrap, "orders", 1, values, acks="all") == values
    assert consume(nodes.bootstrap, "orders", 1, len(values)) == values

    def sizes() -> dict[int, int]:
        """broker -> the size of orders-1 in its log directory, as `binlake log-dirs` reports it"""
        shown = CliRunner().invoke(main, ["log-dirs", "--describe", "--bootstrap-server", nodes.bootstrap,
                                          "--topic-list", "orders"])
        assert shown.exit_code == 0, shown.output
        described = json.loads(shown.output)
        assert [b["broker"] for b in described["brokers"]] == [0, 1, 2]
        return {b["broker"]: p["size"] for b in described["brokers"] for d in b["logDirs"] for p in d["partitions"]
                if p["partition"] == "orders-1"}

    written = wait_for(lambda: (found := sizes()) and len(set(found.values())) == 1 and found,
                       "every replica of orders-1 to hold the same bytes")
    assert sorted(written) == [0, 1, 2] and written[0] > 500 * 2


def read_committed(bootstrap: str, topic: str, count: int, until: int) -> dict[int, list[bytes]]:
    """partition -> values a read_committed consumer gets, once `until` values in all have come."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(count)])
    found: dict[int, list[bytes]] = {p: [] for p in range(count)}

    def poll() -> int:
        for message in consumer.consume(500, 0.2):
            if message.error() is None:
                found[message.partition()].append(message.value())
        return sum(len(v) for v in found.values())

    try:
        wait_for(lambda: poll() >= until, f"{until} committed values from {topic}")
    finally:
        consumer.close()
    return found


def test_transactions_span_leaders_and_survive_their_coordinators_death(cluster):
    """The transaction coordinator is the leader of the id's __transaction_state partition; it sends
    markers to the leaders of the other brokers, and when it dies the new leader takes the id over
    from the replicated log: the producer carries on, commits stay committed, aborts stay aborted."""
    nodes = cluster(3, {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leaders = create(admin, "orders", 3, 3)
    assert sorted(leader for leader, _, _ in leaders.values()) == [0, 1, 2]
    create(admin, "sources", 1, 3)
    assert produce(nodes.bootstrap, "sources", 0, [b"s"] * 10, acks="all") == [b"s"] * 10
    producer = Producer({"bootstrap.servers": nodes.bootstrap, "transactional.id": "shop", "linger.ms": 5})
    producer.init_transactions(60)

    def transaction(name: str, commit: bool) -> None:
        producer.begin_transaction()
        for i in range(30):
            producer.produce("orders", f"{name}{i}".encode(), partition=i % 3)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)

    transaction("committed", True)
    transaction("aborted", False)
    state = partitions(admin, "__transaction_state")[partition_for("shop", 3)]
    coordinator = state[0]
    assert sorted(state[2]) == [0, 1, 2], "the transaction log is replicated to every broker"

    # The coordinator dies with a transaction open; the producer finishes it through the new one.
    producer.begin_transaction()
    for i in range(30):
        producer.produce("orders", f"after{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    nodes.brokers[coordinator].kill()
    wait_for(lambda: partitions(admin, "__transaction_state")[partition_for("shop", 3)][0] not in (coordinator, -1),
             "a new transaction coordinator")
    reader = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "copier", "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    try:
        producer.send_offsets_to_transaction([TopicPartition("sources", 0, 7)], reader.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        assert reader.committed([TopicPartition("sources", 0)], timeout=30)[0].offset == 7
    finally:
        reader.close()

    found = read_committed(nodes.bootstrap, "orders", 3, 60)
    for p in range(3):
        assert found[p] == [f"{name}{i}".encode() for name in ("committed", "after") for i in range(p, 30, 3)]

    zombie = producer
    successor = Producer({"bootstrap.servers": nodes.bootstrap, "transactional.id": "shop"})
    successor.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce("orders", b"zombie", partition=0)
    with pytest.raises(Exception, match="(?i)fenced"):
        zombie.commit_transaction(30)


def test_acknowledged_writes_survive_the_leaders_death_with_no_duplicate_or_gap(cluster):
    """An idempotent producer carries on across the leader change: its state replicated with the log."""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, _, _ = create(admin, "payments", 1, 3)[0]
    first = [f"a{i}".encode() for i in range(2000)]
    assert produce(nodes.bootstrap, "payments", 0, first, acks="all", **{"enable.idempotence": True}) == first

    nodes.brokers[leader].kill()
    second = [f"b{i}".encode() for i in range(2000)]
    acked = produce(nodes.bootstrap, "payments", 0, second, acks="all", **{"enable.idempotence": True})
    assert acked == second
    new_leader, _, isr = partitions(admin, "payments")[0]
    assert new_leader != leader and leader not in isr
    assert consume(nodes.bootstrap, "payments", 0, 4000) == first + second


class SteadyProducer(threading.Thread):
    """An idempotent acks=all producer writing to every partition of `topic` until stopped;
    `acked[partition]` holds what each partition acknowledged, in order."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.count = topic, count
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5})
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(count)}
        self.errors: list[KafkaError] = []
        self.stopping = threading.Event()
        self.unflushed = -1

    def delivered(self, err, msg) -> None:
        (self.acked[msg.partition()].append(msg.value()) if err is None else self.errors.append(err))

    def run(self) -> None:
        sent = 0
        while not self.stopping.is_set():
            for partition in range(self.count):
                self.producer.produce(self.topic, f"{partition}-{sent}".encode(), partition=partition,
                                      on_delivery=self.delivered)
            sent += 1
            self.producer.poll(0.002)
        self.unflushed = self.producer.flush(120)

    def total(self) -> int:
        return sum(len(values) for values in self.acked.values())


@pytest.mark.parametrize("kills", [pytest.param(3, id="3-kills", marks=pytest.mark.slow),  # one death runs by default
                                   pytest.param(30, id="30-kills", marks=pytest.mark.slow)])
def test_leaders_killed_again_and_again_lose_no_acknowledged_write(cluster, kills):
    """acks=all, RF 3, min.insync.replicas=2, an idempotent producer writing throughout: the leader
    of a partition is SIGKILLed and restarted again and again. Every acknowledged message is then
    read exactly once and in order, and the replicas agree byte for byte (replica-verification)."""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, "ledger", 2, 3, **{"min.insync.replicas": "2"})
    writer = SteadyProducer(nodes.bootstrap, "ledger", 2)
    writer.start()
    try:
        for kill in range(kills):
            progress = writer.total()
            wait_for(lambda: writer.total() >= progress + 200, "the producer to make progress")
            leader = partitions(admin, "ledger")[kill % 2][0]
            nodes.brokers[leader].kill()
            wait_for(lambda: partitions(admin, "ledger").get(kill % 2, (-1,))[0] not in (leader, -1),
                     f"a new leader after killing broker {leader}")
            nodes.brokers[leader].start()
            wait_for(lambda: all(len(isr) == 3 for _, _, isr in partitions(admin, "ledger").values()),
                     f"broker {leader} to rejoin the ISRs")
    finally:
        writer.stopping.set()
        writer.join(180)
    assert writer.unflushed == 0 and writer.errors == []
    for partition, acked in writer.acked.items():
        assert len(acked) > 200 * kills // 2
        assert consume(nodes.bootstrap, "ledger", partition, len(acked)) == acked
    verified = CliRunner().invoke(main, ["replica-verification", "--bootstrap-server", nodes.bootstrap,
                                         "--topics-include", "ledger"])
    assert verified.exit_code == 0, verified.output
    assert verified.output.count("identical") == 2, verified.output


@pytest.mark.slow
def test_with_two_brokers_down_acks_all_is_refused_and_nothing_is_lost(cluster):
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, replicas, _ = create(admin, "ledger", 1, 3, **{"min.insync.replicas": "2"})[0]
    before = [f"before{i}".encode() for i in range(500)]
    assert produce(nodes.bootstrap, "ledger", 0, before, acks="all") == before
    followers = [b for b in replicas if b != leader]
    for broker in followers:
        nodes.brokers[broker].kill()
    wait_for(lambda: isr_in_zookeeper(nodes, "ledger", 0) == [leader], "the ISR to shrink to the leader")
    producer = Producer({"bootstrap.servers": nodes.brokers[leader].address, "acks": "all", "retries": 0})
    errors: list[KafkaError] = []
    producer.produce("ledger", b"refused", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors
    for broker in followers:
        nodes.brokers[broker].start()
    wait_for(lambda: isr_in_zookeeper(nodes, "ledger", 0) == sorted(replicas), "the followers to rejoin the ISR")
    after = [f"after{i}".encode() for i in range(500)]
    assert produce(nodes.bootstrap, "ledger", 0, after, acks="all") == after
    assert consume(nodes.bootstrap, "ledger", 0, 1000) == before + after


@pytest.mark.slow
def test_a_stalled_follower_leaves_the_isr_and_rejoins_once_caught_up(cluster):
    """While it is out, min.insync.replicas=3 refuses acks=all writes (and acks=1 goes on)."""
    nodes = cluster(3, {"replica.lag.time.max.ms": "1500", "zookeeper.session.timeout.ms": "60000",
                        "prometheus.listener": "127.0.0.1:0"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, replicas, _ = create(admin, "events", 1, 3, **{"min.insync.replicas": "3"})[0]
    follower = next(b for b in replicas if b != leader)
    metrics = wait_for(lambda: endpoint(nodes.brokers[leader].log()), "the leader's metrics endpoint")

    nodes.pause(follower)
    produce(nodes.brokers[leader].address, "events", 0, [b"while-stalled"], acks="1")
    # (read from ZooKeeper: a client's Metadata request may go to the stopped broker and time out)
    wait_for(lambda: isr_in_zookeeper(nodes, "events", 0) == sorted(set(replicas) - {follower}),
             f"broker {follower} to leave the ISR")
    producer = Producer({"bootstrap.servers": nodes.brokers[leader].address, "acks": "all", "retries": 0})
    errors: list[KafkaError] = []
    producer.produce("events", b"refused", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors
    out = scrape(metrics)  # the leader's own view, as an operator's alert sees it
    assert sample(out, "binlake_broker_under_replicated_partitions") == 1
    assert sample(out, "binlake_broker_under_min_isr_partitions") == 1
    assert sample(out, "binlake_broker_isr_shrinks_total") == 1

    nodes.resume(follower)
    wait_for(lambda: isr_in_zookeeper(nodes, "events", 0) == sorted(replicas), f"broker {follower} to rejoin the ISR")
    assert produce(nodes.bootstrap, "events", 0, [b"after"], acks="all") == [b"after"]
    out = scrape(metrics)
    assert sample(out, "binlake_broker_under_replicated_partitions") == 0
    assert sample(out, "binlake_broker_isr_expands_total") == 1


@pytest.mark.slow
def test_a_returning_leader_truncates_what_only_it_had(cluster):
    """KIP-101: acks=1 writes that only the old leader took die with it; when it comes back it
    follows the new leader and cuts them, so the two logs agree again."""
    nodes = cluster(2, {"replica.lag.time.max.ms": "60000"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, _, _ = create(admin, "ledger", 1, 2)[0]
    follower = 1 - leader
    kept = [f"kept{i}".encode() for i in range(100)]
    assert produce(nodes.bootstrap, "ledger", 0, kept, acks="all") == kept

    # The follower dies (its fetches with it), the leader takes writes alone, then dies too, before
    # either session ends: the ISR still names both.
    nodes.brokers[follower].kill()
    produce(nodes.brokers[leader].address, "ledger", 0, [f"lost{i}".encode() for i in range(50)], acks="1")
    nodes.brokers[leader].kill()
    zk = KazooClient(hosts=nodes.zookeeper.connect_string)
    zk.start(30)
    try:
        wait_for(lambda: zk.get_children("/brokers/ids") == [], "both brokers' sessions to end")
    finally:
        zk.stop()
    nodes.brokers[follower].start()
    wait_for(lambda: partitions(admin, "ledger").get(0, (None,))[0] == follower, f"broker {follower} to lead")
    later = [f"later{i}".encode() for i in range(30)]
    assert produce(nodes.bootstrap, "ledger", 0, later, acks="1") == later

    nodes.brokers[leader].start()
    wait_for(lambda: partitions(admin, "ledger")[0][2] == [0, 1], f"broker {leader} to rejoin the ISR")
    nodes.brokers[follower].kill()  # now only the returning broker has the partition
    wait_for(lambda: partitions(admin, "ledger").get(0, (None,))[0] == leader, f"broker {leader} to lead again")
    assert consume(nodes.brokers[leader].address, "ledger", 0, len(kept) + len(later)) == kept + later


@pytest.mark.slow
def test_sigterm_moves_leadership_first_so_an_idempotent_producer_sees_no_error(cluster):
    """Controlled shutdown: the broker leaves the live brokers, the controller moves its leaderships
    to in-sync followers, and only then does it stop; the producer only retries."""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, _, _ = create(admin, "orders", 1, 3)[0]
    producer = Producer({"bootstrap.servers": nodes.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked: list[bytes] = []
    errors: list[KafkaError] = []

    def delivered(err, msg):
        (acked.append(msg.value()) if err is None else errors.append(err))

    sent = 0
    for phase in ("before", "during"):
        if phase == "during":
            nodes.brokers[leader].proc.send_signal(signal.SIGTERM)
        while sent < (2000 if phase == "before" else 4000):
            producer.produce("orders", f"m{sent}".encode(), partition=0, on_delivery=delivered)
            producer.poll(0.001 if phase == "during" else 0)
            sent += 1
    assert producer.flush(120) == 0
    assert nodes.brokers[leader].proc.wait(60) == 0, nodes.brokers[leader].log()
    assert "left the cluster's live brokers for a controlled shutdown" in nodes.brokers[leader].log()
    assert errors == []
    assert acked == [f"m{i}".encode() for i in range(4000)]
    new_leader, _, isr = partitions(admin, "orders")[0]
    assert new_leader not in (leader, -1) and leader not in isr
    assert consume(nodes.bootstrap, "orders", 0, 4000) == acked


@pytest.mark.slow
def test_topics_grow_change_configs_and_are_deleted_across_the_cluster(cluster):
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, "grows", 1, 2)
    admin.create_partitions([NewPartitions("grows", 3)])["grows"].result(30)
    found = wait_for(lambda: (p := partitions(admin, "grows")) and len(p) == 3 and all(
        leader >= 0 and len(isr) == 2 for leader, _, isr in p.values()) and p, "three led partitions")
    assert all(len(set(replicas)) == 2 for _, replicas, _ in found.values())
    assert produce(nodes.bootstrap, "grows", 2, [b"in-a-new-partition"], acks="all") == [b"in-a-new-partition"]

    resource = ConfigResource(ConfigResource.Type.TOPIC, "grows")
    change = ConfigResource(ConfigResource.Type.TOPIC, "grows", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[resource].result(30)

    def retention_on(broker) -> str:
        asked = AdminClient({"bootstrap.servers": broker.address})  # (held until the answer comes)
        return asked.describe_configs([resource])[resource].result(30)["retention.ms"].value

    wait_for(lambda: all(retention_on(broker) == "3600000" for broker in nodes.brokers),
             "every broker to answer with the new retention.ms")

    admin.delete_topics(["grows"])["grows"].result(30)
    wait_for(lambda: "grows" not in admin.list_topics(timeout=10).topics, "the topic to go")
    wait_for(lambda: not any((broker.data_dir / f"grows-{p}").exists() for broker in nodes.brokers for p in range(3)),
             "every broker to drop its replicas")
    create(admin, "grows", 1, 3)  # the name is free again


def _kafka_python_round(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    futures = [producer.send(topic, value, partition=0) for value in values]
    producer.flush(120)
    producer.close()
    return [value for value, future in zip(values, futures) if future.succeeded()]


def _aiokafka_round(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    async def run() -> list[bytes]:
        async with AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                    request_timeout_ms=60_000) as producer:
            batch = [await producer.send(topic, value, partition=0) for value in values]
            await asyncio.gather(*batch)
        return values
    return asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_follow_the_new_leader_after_a_kill(cluster, client):
    """Metadata leads each client to the new leader; its idempotent writes land once, in order."""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    leader, _, _ = create(admin, "t", 1, 3)[0]
    round_trip = _kafka_python_round if client == "kafka-python" else _aiokafka_round
    first = [f"a{i}".encode() for i in range(500)]
    assert round_trip(nodes.bootstrap, "t", first) == first
    nodes.brokers[leader].kill()
    second = [f"b{i}".encode() for i in range(500)]
    assert round_trip(nodes.bootstrap, "t", second) == second
    consumer = KafkaConsumer(bootstrap_servers=nodes.bootstrap, auto_offset_reset="earliest")
    consumer.assign([KafkaTopicPartition("t", 0)])
    got: list[bytes] = []

    def polled() -> int:
        for messages in consumer.poll(200).values():
            got.extend(message.value for message in messages)
        return len(got) >= 1000

    wait_for(polled, "1000 values")
    consumer.close()
    assert got == first + second


def test_a_follower_behind_by_one_fetch_under_steady_writes_counts_as_caught_up():
    """Kafka's rule: reaching where the leader's log ended at the previous fetch is caught up as of
    that fetch; a follower that stops moving is not."""
    follower = FollowerProgress()
    follower.fetched(5, leader_end=10, now_ms=1000)
    assert follower.caught_up_ms == 0
    follower.fetched(10, leader_end=20, now_ms=2000)  # has what the leader had at 1000
    assert follower.caught_up_ms == 1000
    follower.fetched(20, leader_end=30, now_ms=3000)
    assert follower.caught_up_ms == 2000
    follower.fetched(20, leader_end=40, now_ms=4000)  # stuck
    follower.fetched(20, leader_end=50, now_ms=5000)
    assert follower.caught_up_ms == 2000
    follower.fetched(50, leader_end=50, now_ms=6000)  # level with the leader
    assert follower.caught_up_ms == 6000


def test_a_consumer_group_moves_with_its_coordinator_and_keeps_its_commits(cluster):
    """The group's coordinator is the leader of its __consumer_offsets partition; commits are
    acknowledged once replicated, so they survive that broker's death."""
    # (each consumer joins an empty group: no 3 s wait for more members before its first rebalance)
    nodes = cluster(3, {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, "events", 1, 3)
    values = [f"e{i}".encode() for i in range(100)]
    assert produce(nodes.bootstrap, "events", 0, values, acks="all") == values

    def group_consumer() -> Consumer:
        consumer = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "readers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["events"])
        return consumer

    first = group_consumer()
    got: list[bytes] = []
    wait_for(lambda: _poll_into(first, got) >= 60, "60 values")
    first.commit(offsets=[TopicPartition("events", 0, 60)], asynchronous=False)
    first.close()
    coordinator = partitions(admin, "__consumer_offsets")[partition_for("readers", 3)][0]
    assert partitions(admin, "__consumer_offsets")[partition_for("readers", 3)][2] == [0, 1, 2]

    nodes.brokers[coordinator].kill()
    wait_for(lambda: partitions(admin, "__consumer_offsets")[partition_for("readers", 3)][0] not in (coordinator, -1),
             "a new coordinator")
    second = group_consumer()
    rest: list[bytes] = []
    wait_for(lambda: _poll_into(second, rest) >= 40, "the 40 values after the commit")
    assert second.committed([TopicPartition("events", 0)], timeout=30)[0].offset == 60
    second.close()
    assert rest == values[60:]


def test_leader_elections_on_request_preferred_and_unclean(cluster):
    """`binlake leader-election` (ElectLeaders, carried out by the controller): preferred gives a
    partition back to its first replica; unclean gives a leaderless partition a replica from outside
    its ISR."""
    nodes = cluster(3, {"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    found = create(admin, "orders", 3, 3)
    preferred = {p: replicas[0] for p, (_, replicas, _) in found.items()}
    assert all(leader == preferred[p] for p, (leader, _, _) in found.items())
    moved = preferred[0]
    nodes.brokers[moved].stop()  # (a controlled shutdown moves its leaderships at once; a death's: tests above)
    wait_for(lambda: partitions(admin, "orders")[0][0] not in (moved, -1), "partition 0 to move")
    nodes.brokers[moved].start()
    wait_for(lambda: all(len(isr) == 3 for _, _, isr in partitions(admin, "orders").values()),
             f"broker {moved} to rejoin the ISRs")
    assert partitions(admin, "orders")[0][0] != moved, "no automatic rebalance when it is off"

    def elect(*args: str):
        return CliRunner().invoke(main, ["leader-election", "--bootstrap-server", nodes.bootstrap, *args])

    done = elect("--election-type", "preferred", "--all-topic-partitions")
    assert done.exit_code == 0, done.output
    assert "Successfully completed leader election (PREFERRED) for partitions orders-0" in done.output
    assert "Valid replica already elected for partitions" in done.output
    wait_for(lambda: {p: leader for p, (leader, _, _) in partitions(admin, "orders").items()} == preferred,
             "every partition led by its preferred replica")

    # Unclean: the follower stops first (leaves the ISR), then the leader; the follower alone comes back. (They
    # stop by SIGTERM: the controller hears of each at once; a death's ISR shrink and failover: the tests above.)
    # "loose" allows unclean elections (topic config), "ledger" does not (the default).
    leader, follower = 1, 2
    for name, unclean in (("ledger", "false"), ("loose", "true")):
        admin.create_topics([NewTopic(name, 1, replica_assignment=[[leader, follower]],
                                      config={"unclean.leader.election.enable": unclean})])[name].result(30)
        wait_for(lambda: partitions(admin, name).get(0, (-1, [], []))[2] == [leader, follower], f"{name}'s ISR")
    nodes.brokers[follower].stop()
    wait_for(lambda: isr_in_zookeeper(nodes, "ledger", 0) == [leader] == isr_in_zookeeper(nodes, "loose", 0),
             "the follower to leave the ISRs")
    nodes.brokers[leader].stop()
    wait_for(lambda: partitions(admin, "ledger").get(0, (None,))[0] == -1, "ledger-0 to lose its leader")
    nodes.brokers[follower].start()
    wait_for(lambda: partitions(admin, "loose").get(0, (None,))[0] == follower, "loose-0 to elect it uncleanly")
    refused = elect("--election-type", "preferred", "--topic", "ledger", "--partition", "0")
    assert refused.exit_code == 1 and "ledger-0" in refused.output
    assert partitions(admin, "ledger")[0][0] == -1, "out of the ISR, it does not lead on its own"
    done = elect("--election-type", "unclean", "--topic", "ledger", "--partition", "0")
    assert done.exit_code == 0, done.output
    wait_for(lambda: partitions(admin, "ledger")[0][0] == follower, f"broker {follower} to lead, uncleanly")


@pytest.mark.slow
def test_the_controller_gives_leaderships_back_to_preferred_replicas(cluster):
    """auto.leader.rebalance.enable: a broker that came back leads its preferred partitions again."""
    nodes = cluster(3, {"leader.imbalance.check.interval.seconds": "1"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    found = create(admin, "orders", 3, 3)
    moved = found[0][1][0]
    nodes.brokers[moved].kill()
    wait_for(lambda: partitions(admin, "orders")[0][0] not in (moved, -1), "partition 0 to move")
    nodes.brokers[moved].start()
    wait_for(lambda: partitions(admin, "orders")[0][0] == moved, f"broker {moved} to lead partition 0 again")


def test_a_partition_moves_to_other_brokers_while_a_producer_writes(cluster, tmp_path):
    """`binlake reassign-partitions`: the target replicas join and catch up, the leader moves off the
    broker that leaves, its log is deleted there; the producer loses and repeats nothing."""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    admin.create_topics([NewTopic("moving", 1, replica_assignment=[[0, 1]])])["moving"].result(30)
    wait_for(lambda: partitions(admin, "moving").get(0, (-1, [], []))[2] == [0, 1], "moving-0's ISR")

    def tool(*args: str):
        return CliRunner().invoke(main, ["reassign-partitions", "--bootstrap-server", nodes.bootstrap, *args])

    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
    proposed = tool("--generate", "--topics-to-move-json-file", str(tmp_path / "topics.json"), "--broker-list", "1,2")
    assert proposed.exit_code == 0, proposed.output
    plan = json.loads(proposed.output.split("Proposed partition reassignment configuration\n")[1])
    assert sorted(plan["partitions"][0]["replicas"]) == [1, 2]

    writer = SteadyProducer(nodes.bootstrap, "moving", 1)
    writer.start()
    try:
        wait_for(lambda: writer.total() >= 2000, "the producer to be writing")
        (tmp_path / "plan.json").write_text(json.dumps(
            {"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1, 2]}]}))
        started = tool("--execute", "--reassignment-json-file", str(tmp_path / "plan.json"))
        assert started.exit_code == 0, started.output
        assert '"replicas": [0, 1]' in started.output, "the current assignment, to roll back with"
        wait_for(lambda: "is completed" in tool("--verify", "--reassignment-json-file",
                                                str(tmp_path / "plan.json")).output, "the move to complete")
        progress = writer.total()
        wait_for(lambda: writer.total() >= progress + 2000, "the producer to go on writing after the move")
    finally:
        writer.stopping.set()
        writer.join(180)
    leader, replicas, isr = partitions(admin, "moving")[0]
    assert replicas == [1, 2] and isr == [1, 2] and leader in (1, 2)
    wait_for(lambda: not (nodes.brokers[0].data_dir / "moving-0").exists(), "broker 0 to delete its replica")
    assert writer.unflushed == 0 and writer.errors == []
    assert consume(nodes.bootstrap, "moving", 0, len(writer.acked[0])) == writer.acked[0]
    verified = CliRunner().invoke(main, ["replica-verification", "--bootstrap-server", nodes.bootstrap,
                                         "--topics-include", "moving"])
    assert verified.exit_code == 0 and "replicas [1, 2] identical" in verified.output, verified.output

    # The pre-2.4 way: a plan written to /admin/reassign_partitions, which the controller removes.
    zk = KazooClient(hosts=nodes.zookeeper.connect_string)
    zk.start(30)
    try:
        zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": 0, "replicas": [2, 0]}]}).encode(), makepath=True)
        wait_for(lambda: partitions(admin, "moving")[0][1:] == ([2, 0], [0, 2]), "the move back to brokers 2 and 0")
        wait_for(lambda: not zk.exists("/admin/reassign_partitions"), "the request znode to go")
    finally:
        stop_client(zk)


def test_a_controller_taking_over_a_reassignment_under_way_goes_on_electing(cluster, tmp_path):
    """The controller stops while a reassignment waits for a replica that cannot catch up (paused);
    the next controller follows the reassignment and still elects leaders. (It once deadlocked on
    its own lock doing so, and elected nothing ever again: seen in CI as a partition left leaderless.)"""
    nodes = cluster(3)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    controller = admin.list_topics(timeout=10).controller_id
    other, stalled = [b for b in range(3) if b != controller]
    admin.create_topics([NewTopic("moving", 1, replica_assignment=[[other]])])["moving"].result(30)
    nodes.pause(stalled)
    try:
        (tmp_path / "plan.json").write_text(json.dumps(
            {"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [other, stalled]}]}))
        started = CliRunner().invoke(main, ["reassign-partitions", "--bootstrap-server", nodes.brokers[other].address,
                                            "--execute", "--reassignment-json-file", str(tmp_path / "plan.json")])
        assert started.exit_code == 0, started.output
        nodes.brokers[controller].stop()  # (SIGTERM: it resigns at once; the takeover is the same as after a death)
        survivor = AdminClient({"bootstrap.servers": nodes.brokers[other].address})
        wait_for(lambda: survivor.list_topics(timeout=10).controller_id == other, f"broker {other} to take control",
                 timeout=120)
        refusals = []

        def created() -> bool:   # (a create the new controller answered with an error is asked again)
            error = survivor.create_topics([NewTopic("after", 1, replica_assignment=[[other]])])["after"].exception(30)
            if error is None or error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return True
            refusals.append(str(error))
            return False
        try:
            wait_for(created, f"broker {other} to create a topic", timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its answers: {refusals[-3:]}") from None
        wait_for(lambda: partitions(survivor, "after").get(0, (-1,))[0] == other,
                 "the new controller to elect a leader for a new topic", timeout=60)
    finally:
        nodes.resume(stalled)


def test_a_new_replica_starts_at_the_leaders_log_start(cluster, tmp_path):
    """A partition whose first records are gone (DeleteRecords, or retention) gets a new replica: the
    leader answers OFFSET_OUT_OF_RANGE for offset 0, and the replica starts over at the log start."""
    nodes = cluster(2)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    admin.create_topics([NewTopic("trimmed", 1, replica_assignment=[[0]])])["trimmed"].result(30)
    values = [f"t{i}".encode() for i in range(200)]
    assert produce(nodes.bootstrap, "trimmed", 0, values, acks="all") == values
    [deleted] = admin.delete_records([TopicPartition("trimmed", 0, 150)]).values()
    assert deleted.result(30).low_watermark == 150
    (tmp_path / "plan.json").write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": "trimmed", "partition": 0, "replicas": [0, 1]}]}))
    started = CliRunner().invoke(main, ["reassign-partitions", "--bootstrap-server", nodes.bootstrap, "--execute",
                                        "--reassignment-json-file", str(tmp_path / "plan.json")])
    assert started.exit_code == 0, started.output
    wait_for(lambda: partitions(admin, "trimmed").get(0, (-1,))[1:] == ([0, 1], [0, 1]), "broker 1 to join the ISR")
    nodes.brokers[0].stop()  # (a controlled shutdown: its leadership moves to broker 1 without a session's timeout)
    wait_for(lambda: partitions(admin, "trimmed").get(0, (-1,))[0] == 1, "broker 1 to lead", timeout=180)
    consumer = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("trimmed", 0, -2)])  # (-2: the log start)
    got: list[bytes] = []
    try:
        wait_for(lambda: _poll_into(consumer, got) >= 50, "the 50 records kept")
    finally:
        consumer.close()
    assert got == values[150:]


def test_created_topics_are_answered_once_their_partitions_have_leaders(cluster):
    """As Kafka: CreateTopics returns when the broker's metadata has a leader for every partition, so
    the client's next Metadata request finds the topic whole (aiokafka keeps a leaderless topic out
    of its metadata until its next refresh, minutes later: faust then assigned nothing of it)."""
    from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32

    nodes = cluster(3)
    for broker in nodes.brokers:                       # each broker, whether it is the controller or not
        topic = TopicName(f"fresh-{broker.broker_id}")
        with WireClient(broker.address) as client:     # (one connection: the same broker answers both)
            created = client.call(CreateTopicsRequest(topics=(CreatableTopic(
                name=topic, num_partitions=i32(12), replication_factor=i16(3), assignments=(), configs=()),),
                timeout=datetime.timedelta(seconds=30), validate_only=False))
            assert created.topics[0].error_code == 0, created
            found = client.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                                allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False)).topics[0]
        assert found.error_code == 0 and len(found.partitions) == 12
        assert all(p.leader_id >= 0 and p.error_code == 0 for p in found.partitions), found.partitions


def test_a_coordinator_topic_another_broker_created_a_moment_ago_is_no_error():
    """Two brokers may create __transaction_state (or __consumer_offsets) at once; the one whose create
    loses must carry on (its clients retry on NOT_COORDINATOR), not answer TOPIC_ALREADY_EXISTS as the
    InitProducerId of a CI run once did. The race depends on timing between processes, so the losing
    create is played by a stand-in that raises what ZooKeeper's metadata store raises then."""
    from types import SimpleNamespace

    from logcore.coordinator.state_topic import StateTopic
    from logcore.protocol.errors import TopicAlreadyExists

    async def lost_the_race(name, **_settings):
        raise TopicAlreadyExists(f"topic {name} already exists")
    topic = StateTopic("__transaction_state", 3, 1 << 20, replicas=None,
                       metadata=SimpleNamespace(topics={}, brokers=[0, 1, 2]), create_topic=lost_the_race,
                       replication_factor=3)
    asyncio.run(topic.ensure())  # no error
    assert topic.partitions == 3
