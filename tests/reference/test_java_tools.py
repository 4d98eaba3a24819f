"""Apache Kafka's own tools and Java client (the protocol's reference implementation) against a logcore
broker: each runs unchanged and its output says what Kafka's would."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
from collections import Counter

import pytest
from confluent_kafka import Producer

from brokerproc import NO_REBALANCE_DELAY
from java_tools import KafkaTools, json_lines
from waiting import wait_for
from wire import WireClient

from logcore.protocol.codec import ApiKey, request_class

pytestmark = pytest.mark.java
# A group's first rebalance without the 3 s wait for more members, as in Kafka's own integration tests
# (TestUtils.createBrokerConfig): the tools here form groups of one, or add members later on purpose.


@pytest.fixture
def broker(broker_factory):
    """The broker the tools talk to (kafka_tools'): tests/conftest.py's, with NO_REBALANCE_DELAY."""
    return broker_factory(NO_REBALANCE_DELAY)


def rows(text: str) -> list[list[str]]:
    """The table rows a tool prints (whitespace-separated columns), header lines included."""
    return [line.split() for line in text.splitlines() if line.strip()]


def test_kafka_topics_creates_lists_describes_alters_and_deletes(kafka_tools):
    t = kafka_tools
    assert "Created topic orders." in t.admin("kafka-topics", "--create", "--topic", "orders", "--partitions", "3",
                                              "--replication-factor", "1", "--config", "retention.ms=3600000")
    assert "orders" in t.admin("kafka-topics", "--list").split()
    described = t.admin("kafka-topics", "--describe", "--topic", "orders")
    assert re.search(r"PartitionCount: 3\s+ReplicationFactor: 1\s+Configs: retention.ms=3600000", described)
    assert [r[3] for r in rows(described)[1:]] == ["0", "1", "2"]  # Topic: orders Partition: N ...

    t.admin("kafka-topics", "--alter", "--topic", "orders", "--partitions", "5")
    assert "PartitionCount: 5" in t.admin("kafka-topics", "--describe", "--topic", "orders")
    assert "TopicExistsException: topic 'orders' already exists" in t.refused("kafka-topics", "--create", "--topic", "orders")

    t.admin("kafka-topics", "--delete", "--topic", "orders")
    wait_for(lambda: "orders" not in t.admin("kafka-topics", "--list").split(), "the topic to be gone")


def test_console_producer_and_consumer_carry_keys_and_values(kafka_tools):
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "lines", "--partitions", "2")
    sent = {f"k{i}": f"v{i} ünïcode" for i in range(200)}
    t.admin("kafka-console-producer", "--topic", "lines", "--property", "parse.key=true",
            "--property", "key.separator=:", input="".join(f"{k}:{v}\n" for k, v in sent.items()))
    out = t.admin("kafka-console-consumer", "--topic", "lines", "--from-beginning", "--max-messages", "200",
                  "--property", "print.key=true", "--property", "key.separator=:")
    got = dict(line.split(":", 1) for line in out.splitlines())
    assert got == sent


@pytest.mark.slow  # (a JVM per reset mode, 40 s; the describe test below runs Kafka's groups tool by default)
def test_consumer_groups_describe_reset_in_every_mode_and_delete(kafka_tools):
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "events", "--partitions", "2")
    t.admin("kafka-console-producer", "--topic", "events", "--property", "parse.key=true",
            "--property", "key.separator=:", input="".join(f"{i % 2}:{i}\n" for i in range(100)))
    t.admin("kafka-console-consumer", "--topic", "events", "--from-beginning", "--max-messages", "100",
            "--group", "readers")
    assert "readers" in t.admin("kafka-consumer-groups", "--list").split()

    def offsets(text: str) -> dict[int, tuple[int, int]]:
        """partition → (current offset, log end offset) from --describe."""
        return {int(r[2]): (int(r[3]), int(r[4])) for r in rows(text) if r[:2] == ["readers", "events"]}

    described = t.admin("kafka-consumer-groups", "--describe", "--group", "readers")
    ends = {p: end for p, (_, end) in offsets(described).items()}
    assert sum(ends.values()) == 100 and all(current == end for current, end in offsets(described).values())
    assert re.search(r"readers\s+\S+\s+\(0\)\s+\S+\s+Empty\s+0",
                     t.admin("kafka-consumer-groups", "--describe", "--group", "readers", "--state"))

    def reset(*mode: str, topic: str = "events") -> dict[int, int]:
        out = t.admin("kafka-consumer-groups", "--reset-offsets", "--group", "readers", "--topic", topic,
                      "--execute", *mode)
        return {int(r[2]): int(r[3]) for r in rows(out) if r[:2] == ["readers", "events"]}

    def committed() -> dict[int, int]:
        return {p: c for p, (c, _) in offsets(t.admin("kafka-consumer-groups", "--describe", "--group", "readers")).items()}

    assert reset("--to-earliest") == {0: 0, 1: 0}
    assert reset("--to-latest") == ends
    assert reset("--to-offset", "7") == {0: 7, 1: 7} == committed()  # committed, not only printed
    assert reset("--shift-by", "-3") == {0: 4, 1: 4}
    assert reset("--shift-by", "1000") == ends  # clamped to the log's end, as Kafka does
    assert reset("--to-datetime", "2000-01-01T00:00:00.000") == {0: 0, 1: 0}
    assert reset("--by-duration", "PT0S") == ends  # nothing is newer than now
    assert reset("--to-current") == ends
    assert reset("--to-earliest", topic="events:0") == {0: 0}
    assert committed() == {0: 0, 1: ends[1]}

    assert "successful" in t.admin("kafka-consumer-groups", "--delete", "--group", "readers")
    assert "readers" not in t.admin("kafka-consumer-groups", "--list").split()


def test_configs_describe_and_alter_topics_and_brokers(kafka_tools):
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "tuned", "--partitions", "1", "--config", "retention.ms=60000")
    topic = ("--entity-type", "topics", "--entity-name", "tuned")
    assert "retention.ms=60000" in t.admin("kafka-configs", "--describe", *topic)
    t.admin("kafka-configs", "--alter", *topic, "--add-config", "retention.ms=120000,cleanup.policy=delete")
    described = t.admin("kafka-configs", "--describe", *topic)
    assert "retention.ms=120000" in described and "cleanup.policy=delete" in described
    t.admin("kafka-configs", "--alter", *topic, "--delete-config", "retention.ms")
    assert "retention.ms=" not in t.admin("kafka-configs", "--describe", *topic)
    assert "InvalidConfigurationException: invalid value 'soon' for configuration retention.ms" in \
        t.refused("kafka-configs", "--alter", *topic, "--add-config", "retention.ms=soon")

    every = t.admin("kafka-configs", "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all")
    assert re.search(r"num\.partitions=\d+ .*DEFAULT_CONFIG", every)


def test_delete_records_get_offsets_and_log_dirs(kafka_tools, tmp_path):
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "trimmed", "--partitions", "2")
    t.admin("kafka-console-producer", "--topic", "trimmed", "--property", "parse.key=true",
            "--property", "key.separator=:", input="".join(f"{i % 2}:{i}\n" for i in range(60)))

    def offsets(*args: str) -> dict[int, int]:
        out = t.admin("kafka-get-offsets", "--topic", "trimmed", *args)
        return {int(p): int(o) for _, p, o in (line.split(":") for line in out.split())}

    ends = offsets()
    assert sum(ends.values()) == 60 and offsets("--time", "-2") == {0: 0, 1: 0}
    spec = tmp_path / "delete.json"
    spec.write_text('{"version":1,"partitions":[{"topic":"trimmed","partition":0,"offset":5}]}')
    out = t.admin("kafka-delete-records", "--offset-json-file", str(spec))
    assert re.search(r"partition: trimmed-0\s+low_watermark: 5", out)
    assert offsets("--time", "-2") == {0: 5, 1: 0} and offsets() == ends

    dirs = json_lines(t.admin("kafka-log-dirs", "--describe", "--topic-list", "trimmed"))[0]
    partitions = {p["partition"]: p for p in dirs["brokers"][0]["logDirs"][0]["partitions"]}
    assert set(partitions) == {"trimmed-0", "trimmed-1"} and all(p["size"] > 0 for p in partitions.values())


def test_transactions_tool_lists_describes_and_aborts_an_open_transaction(kafka_tools):
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "pending", "--partitions", "1")
    producer = Producer({"bootstrap.servers": t.address, "transactional.id": "left-open"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce("pending", b"never committed")
    producer.flush()

    assert re.search(r"left-open\s+0\s+\d+\s+Ongoing", t.admin("kafka-transactions", "list"))
    assert re.search(r"left-open\s+\d+\s+\d+\s+Ongoing\s+.*pending-0",
                     t.admin("kafka-transactions", "describe", "--transactional-id", "left-open"))
    producers = rows(t.admin("kafka-transactions", "describe-producers", "--topic", "pending", "--partition", "0"))
    assert producers[1][-1] == "0"  # CurrentTransactionStartOffset

    # an operator aborts it from the partition's side (KIP-664): a marker, and the LSO moves on
    t.admin("kafka-transactions", "abort", "--topic", "pending", "--partition", "0", "--start-offset", "0")
    producers = rows(t.admin("kafka-transactions", "describe-producers", "--topic", "pending", "--partition", "0"))
    assert producers[1][-1] == "None"
    out = t.admin("kafka-console-consumer", "--topic", "pending", "--from-beginning", "--timeout-ms", "3000",
                  "--isolation-level", "read_committed")
    assert out.strip() == ""


def test_kafka_features_downgrades_and_upgrades_transaction_version(kafka_tools):
    t = kafka_tools

    def level() -> tuple[str, str]:
        found = re.search(r"Feature: transaction.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 2\s+"
                          r"FinalizedVersionLevel: (\d+)\s+Epoch: (\d+)", t.admin("kafka-features", "describe"))
        return found.groups()

    assert level() == ("2", "1")
    assert "downgraded to 0" in t.admin("kafka-features", "downgrade", "--feature", "transaction.version=0")
    assert level() == ("0", "2")
    assert "outside what this broker supports" in t.refused("kafka-features", "upgrade", "--feature",
                                                             "transaction.version=5")
    assert "upgraded to 2" in t.admin("kafka-features", "upgrade", "--feature", "transaction.version=2")
    assert level() == ("2", "3")


def test_verifiable_producer_and_three_consumers_rebalancing(kafka_tools, tmp_path):
    """acks=all writes, then a group that grows to three verifiable consumers while the producer runs:
    every acknowledged record is consumed exactly once, in order within its partition."""
    t = kafka_tools
    t.admin("kafka-topics", "--create", "--topic", "verified", "--partitions", "6")
    logs = [tmp_path / f"consumer-{i}.jsonl" for i in range(3)]
    consumers: list[subprocess.Popen] = []

    def start_consumer(i: int) -> None:
        consumers.append(t.start("kafka-verifiable-consumer", "--bootstrap-server", t.address, "--topic", "verified",
                                 "--group-id", "verifiers", "--reset-policy", "earliest", "--verbose",
                                 out=open(logs[i], "w")))

    def events(i: int) -> list[dict]:
        return json_lines(logs[i].read_text())

    def owned(i: int) -> set[int]:
        """The partitions consumer i holds after its last rebalance."""
        held: set[int] = set()
        for e in events(i):
            if e["name"] == "partitions_assigned":
                held |= {p["partition"] for p in e["partitions"]}
            elif e["name"] == "partitions_revoked":
                held -= {p["partition"] for p in e["partitions"]}
        return held

    start_consumer(0)
    wait_for(lambda: owned(0) == set(range(6)), "the first consumer to own every partition")
    producer = t.start("kafka-verifiable-producer", "--bootstrap-server", t.address, "--topic", "verified",
                       "--max-messages", "6000", "--throughput", "1500", "--acks", "-1",
                       out=open(tmp_path / "producer.jsonl", "w"))
    for i in (1, 2):
        wait_for(lambda: sum(e.get("count", 0) for e in events(0) if e["name"] == "records_consumed") > 500 * i,
                 "the group to consume while the producer runs")
        start_consumer(i)
        wait_for(lambda: all(owned(j) for j in range(i + 1)), f"a rebalance that gives consumer {i} partitions")
    assert producer.wait(120) == 0
    sent = json_lines((tmp_path / "producer.jsonl").read_text())
    acked = {(e["partition"], e["offset"]): e["value"] for e in sent if e["name"] == "producer_send_success"}
    assert len(acked) == 6000 and not [e for e in sent if e["name"] == "producer_send_error"]

    def consumed() -> list[dict]:
        return [e for i in range(3) for e in events(i) if e["name"] == "record_data"]

    wait_for(lambda: len({(e["partition"], e["offset"]) for e in consumed()}) >= len(acked), "every record consumed")
    shares = [owned(i) for i in range(3)]
    assert all(shares) and sorted(p for share in shares for p in share) == list(range(6))
    for c in consumers:
        c.send_signal(signal.SIGTERM)  # a clean shutdown: the JVM runs its hooks, then exits 143
        c.wait(60)
    assert all(events(i)[-1]["name"] == "shutdown_complete" for i in range(3))

    records = consumed()
    seen = Counter((e["partition"], e["offset"]) for e in records)
    assert [k for k, n in seen.items() if n > 1] == []
    assert {(e["partition"], e["offset"]): e["value"] for e in records} == acked
    for i in range(3):  # each consumer reads each partition forward
        per_partition: dict[int, list[int]] = {}
        for e in events(i):
            if e["name"] == "record_data":
                per_partition.setdefault(e["partition"], []).append(e["offset"])
        assert all(offsets == sorted(offsets) for offsets in per_partition.values())


COPIED = 5000  # records the copier copies: a hundred transactions and more


@pytest.mark.parametrize("transaction_version", [pytest.param(0, marks=pytest.mark.slow), 2], ids=["tv0", "tv2"])
def test_transactional_copier_with_aborts_and_a_kill_is_exactly_once_read_committed(reference_jars, broker_factory,
                                                                                    tmp_path, transaction_version):
    """Kafka's own exactly-once check: TransactionalMessageCopier copies a partition in transactions (some
    aborted at random, offsets sent with the group's metadata), is SIGKILLed and restarted; a
    read_committed verifiable consumer then sees each input record exactly once.

    The copier asks for its position before it calls initTransactions, so when the kill leaves offsets
    pending in an open transaction, the restarted one waits (UNSTABLE_OFFSET_COMMIT) until the
    coordinator aborts that transaction on its timeout: short ones here, checked every second.

    With `transaction.version` 2 finalized (the broker's default) Kafka 4.1's producer runs
    transactions v2 (KIP-890): no AddPartitionsToTxn or AddOffsetsToTxn, and each commit or abort
    bumps its epoch, so the epoch ends up past the number of transactions; with 0 it runs the
    protocol of KIP-98 and keeps its epoch from one transaction to the next. Some 150 transactions
    (COPIED records in fifties, about a third aborted and copied again), the kill a fifth of the way in."""
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
                             "transaction.version": str(transaction_version), **NO_REBALANCE_DELAY})
    t = KafkaTools(broker.address)
    t.admin("kafka-topics", "--create", "--topic", "input", "--partitions", "1")
    t.admin("kafka-topics", "--create", "--topic", "output", "--partitions", "2")
    t.admin("kafka-verifiable-producer", "--topic", "input", "--max-messages", str(COPIED), "--acks", "-1")
    copier = ("kafka-transactional-message-copier", "--broker-list", t.address, "--input-topic", "input",
              "--input-partition", "0", "--output-topic", "output", "--transactional-id", "copier",
              "--consumer-group", "copiers", "--transaction-size", "50", "--transaction-timeout", "5000",
              "--enable-random-aborts", "--use-group-metadata")
    progress = tmp_path / "copier.jsonl"
    first = t.start(*copier, out=open(progress, "w"))
    wait_for(lambda: any(e.get("totalProcessed", 0) >= COPIED // 5 for e in json_lines(progress.read_text())),
             "the copier to have committed some transactions")
    first.kill()
    first.wait()
    t.run(*copier)  # restarted: fences the old producer, resumes from the committed offsets

    settings = tmp_path / "read_committed.properties"
    settings.write_text("isolation.level=read_committed\n")
    out = t.admin("kafka-verifiable-consumer", "--topic", "output", "--group-id", "checker", "--max-messages",
                  str(COPIED), "--reset-policy", "earliest", "--consumer.config", str(settings), "--verbose")
    values = [e["value"] for e in json_lines(out) if e["name"] == "record_data"]
    assert sorted(values, key=int) == [str(i) for i in range(COPIED)]
    total = sum(int(line.split(":")[-1]) for line in t.admin("kafka-get-offsets", "--topic", "output").split())
    assert total > COPIED  # aborted records and markers are in the log, hidden from read_committed
    with WireClient(broker.address) as client:
        epoch = client.call(request_class(ApiKey.DESCRIBE_TRANSACTIONS, 0)(
            transactional_ids=("copier",))).transaction_states[0].producer_epoch
    if transaction_version == 2:
        assert epoch >= COPIED // 50  # at least one bump per transaction of at most 50 records
    else:
        assert epoch <= 3  # InitProducerId twice, and the timeout's abort of the killed copier's transaction


async def test_consumer_groups_describe_agrees_with_binlakes_but_counts_commit_markers_as_lag(kafka_tools, broker):
    """Kafka's tool and `binlake groups describe` on one exactly-once group whose member lists each
    partition twice (tests/test_groups_cli.py): the same offsets, partitions and counts, but Kafka's
    LAG is the high watermark minus the committed offset, 1 where the group is caught up."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from test_groups import create_topic, parts
    from test_groups import wait_for as wait_async
    from test_groups_cli import EveryPartitionTwice, groups, write_transactions

    await create_topic(broker.address, "txn", 2)
    await asyncio.to_thread(write_transactions, broker.address, "txn", 3)
    member = AIOKafkaConsumer("txn", bootstrap_servers=broker.address, group_id="eos", client_id="eos-client",
                              enable_auto_commit=False, partition_assignment_strategy=(EveryPartitionTwice,))
    await member.start()
    try:
        await wait_async(lambda: len(parts(member)) == 2, 30, "an assignment")
        await member.commit({TopicPartition("txn", 0): 8, TopicPartition("txn", 1): 8})
        kafkas = rows(await asyncio.to_thread(kafka_tools.admin, "kafka-consumer-groups", "--describe", "--group", "eos"))
        ours = rows(await asyncio.to_thread(groups, broker, "describe", "--group", "eos"))
        members = rows(await asyncio.to_thread(kafka_tools.admin, "kafka-consumer-groups", "--describe", "--group",
                                               "eos", "--members", "--verbose"))
    finally:
        await member.stop()
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert [r[2:6] for r in kafkas if r[:2] == ["eos", "txn"]] == [["0", "8", "9", "1"], ["1", "8", "9", "1"]]
    assert [r[2:6] for r in ours if r[:2] == ["eos", "txn"]] == [["0", "8", "9", "0"], ["1", "8", "9", "0"]]
    # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ... ASSIGNMENT: each partition once in both
    kafka_member = next(r for r in members if r[0] == "eos")
    our_member = next(r for r in ours if r and r[0].startswith("eos-client-"))
    assert kafka_member[4] == our_member[4] == "2"
    assert "txn:0,1" in kafka_member and our_member[5] == "txn-0,txn-1"
