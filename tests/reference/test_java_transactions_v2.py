"""Transactions v2 (KIP-890) against Kafka's own code: the TransactionLogValue records logcore writes
are the bytes Kafka's generated class writes, and Kafka 4.1's Java producer runs transactions v2 on
a ZooKeeper cluster of logcore brokers (slow): TransactionalMessageCopier copies a partition in transactions (random aborts, offsets with
the group's metadata) to the same partition of another topic, led by another broker than the
transaction's coordinator, so that leader adds the partition to the transaction at the coordinator
(AddPartitionsToTxn v5 across brokers); the coordinator is SIGKILLed mid-run.

What shows that v2 ran, and that its state moved with the coordinator: in every output partition's
log, each transaction's batches share one epoch and its marker carries the next one (the epoch its
end bumped), the transaction open at the kill included, whose end the new coordinator decided from
the replicated TransactionLogValue (v1, with the transaction version); and the transactional id's
epoch ends up past the number of transactions. (A transaction the copier aborts at random may leave
its marker alone: its write, sent as the abort went out, was refused by the epoch the abort bumped.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from java_tools import KafkaTools, json_lines
from test_replication import cluster, create, partitions  # noqa: F401  (the fixture too)
from waiting import wait_for

from logcore.coordinator.offsets_codec import partition_for
from logcore.coordinator.transaction_log import TxnLogValue, TxnState, decode_value, encode_value
from logcore.storage.batch import HEADER_SIZE, read_header
from testkit.reference import classpath

pytestmark = pytest.mark.java

RECORDS = 20000
TRANSACTION_SIZE = 50


def transactions_in_log(partition_dir: Path, producer_id: int) -> list[tuple[set[int], int]]:
    """(epochs of the producer's data batches, its marker's epoch) per transaction that wrote to this
    partition, in log order, read from the segment files."""
    found, data = [], set()
    for segment in sorted(partition_dir.glob("*.log")):
        raw, position = segment.read_bytes(), 0
        while position + HEADER_SIZE <= len(raw):
            header = read_header(raw, position)
            position += header.size
            if header.producer_id != producer_id:
                continue
            if header.is_control:
                found.append((data, header.producer_epoch))
                data = set()
            else:
                data.add(header.producer_epoch)
    return found


@pytest.mark.parametrize("value", [
    TxnLogValue(5, 3, 60000, TxnState.ONGOING, frozenset({("orders", 0), ("orders", 2), ("__consumer_offsets", 7)}),
                1700000000123, 1700000000001, client_transaction_version=2),
    TxnLogValue(5, 32767, 60000, TxnState.PREPARE_COMMIT, frozenset({("orders", 1)}), 17, 16, next_producer_id=1000,
                client_transaction_version=2),
    TxnLogValue(1000, 0, 60000, TxnState.COMPLETE_COMMIT, frozenset(), 18, 16, previous_producer_id=5,
                client_transaction_version=2),
    TxnLogValue(9, 1, 900000, TxnState.COMPLETE_ABORT, frozenset(), 20, 19),  # transactions v1: version 0
], ids=["ongoing", "epochs-run-out", "new-producer-id", "v1"])
def test_transaction_log_values_are_kafkas_bytes(reference_jars, tmp_path, value):
    source = Path(__file__).parent / "java" / "TxnLogValueBytes.java"
    subprocess.run(["javac", "-cp", classpath(), "-d", str(tmp_path), str(source)], check=True, timeout=120)
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(index)
    version = 1 if value.client_transaction_version >= 2 else 0
    args = [str(a) for a in (version, value.producer_id, value.previous_producer_id, value.next_producer_id,
                             value.producer_epoch, value.timeout_ms, int(value.state), value.last_update_ms,
                             value.start_ms, value.client_transaction_version)]
    args += [f"{topic}:{','.join(map(str, ids))}" for topic, ids in by_topic.items()]
    kafkas = subprocess.run(["java", "-cp", f"{tmp_path}:{classpath()}", "TxnLogValueBytes", *args], check=True,
                            capture_output=True, text=True, timeout=120).stdout.strip()
    assert encode_value(value).hex() == kafkas
    assert decode_value(bytes.fromhex(kafkas)) == value


@pytest.mark.slow
def test_java_producer_runs_transactions_v2_through_its_coordinators_sigkill(reference_jars, cluster, tmp_path):
    nodes = cluster(3, {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, "input", 1, 3)
    output_leader = create(admin, "output", 1, 3)[0][0]
    Producer({"bootstrap.servers": nodes.bootstrap, "transactional.id": "warm-up"}).init_transactions(60)
    coordinators = wait_for(lambda: (found := partitions(admin, "__transaction_state")) and all(
        leader >= 0 for leader, _, _ in found.values()) and found, "__transaction_state to have leaders")
    txn_id = next(name for name in (f"copier-{i}" for i in range(100))
                  if coordinators[partition_for(name, 3)][0] != output_leader)
    t = KafkaTools(nodes.bootstrap)
    t.admin("kafka-verifiable-producer", "--topic", "input", "--max-messages", str(RECORDS), "--acks", "-1")

    progress = tmp_path / "copier.jsonl"
    copier = t.start("kafka-transactional-message-copier", "--broker-list", nodes.bootstrap, "--input-topic", "input",
                     "--input-partition", "0", "--output-topic", "output", "--transactional-id", txn_id,
                     "--consumer-group", "copiers", "--transaction-size", str(TRANSACTION_SIZE),
                     "--transaction-timeout", "10000", "--enable-random-aborts", "--use-group-metadata",
                     out=open(progress, "w"))
    try:
        wait_for(lambda: any(e.get("totalProcessed", 0) >= 3000 for e in json_lines(progress.read_text())),
                 "the copier to have committed some transactions", timeout=120)
        coordinator = partitions(admin, "__transaction_state")[partition_for(txn_id, 3)][0]
        nodes.brokers[coordinator].kill()
        wait_for(lambda: copier.poll() is not None, "the copier to copy everything", timeout=300)
    finally:
        copier.kill()
        copier.wait()
    assert copier.returncode == 0, f"the copier failed: {json_lines(progress.read_text())[-3:]}"

    settings = tmp_path / "read_committed.properties"
    settings.write_text("isolation.level=read_committed\n")
    out = t.admin("kafka-verifiable-consumer", "--topic", "output", "--group-id", "checker", "--max-messages",
                  str(RECORDS), "--reset-policy", "earliest", "--consumer.config", str(settings), "--verbose")
    values = [e["value"] for e in json_lines(out) if e["name"] == "record_data"]
    assert sorted(values, key=int) == [str(i) for i in range(RECORDS)]

    described = [line.split() for line in t.admin("kafka-transactions", "describe", "--transactional-id",
                                                  txn_id).splitlines()]
    row = dict(zip(described[0], described[1]))
    producer_id, epoch = int(row["ProducerId"]), int(row["ProducerEpoch"])
    assert epoch >= RECORDS // TRANSACTION_SIZE  # one bump per transaction at least

    logged = transactions_in_log(nodes.brokers[output_leader].data_dir / "output-0", producer_id)
    assert len(logged) >= RECORDS // TRANSACTION_SIZE
    for data, marker in logged:
        assert len(data) <= 1 and all(marker == e + 1 for e in data), (data, marker)
