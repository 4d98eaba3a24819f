"""Transactions v2 (KIP-890 part 2) at the protocol level: the schedules of the anomaly Jepsen found
in Kafka's transactions, driven request by request through logcore's own codec, under the protocol
of KIP-98 (v1: AddPartitionsToTxn from the producer, one epoch for every transaction) and under
transactions v2 (Produce v12 adds the partition, EndTxn v5 bumps the epoch).

A *delayed marker* is delivered as the coordinator's marker channel delivers markers
(WriteTxnMarkers, v1 or v2), after the producer's next transaction wrote to the partition, as a
marker request that was slow on the network, or a coordinator's retry, arrives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from brokerproc import read_to_end
from confluent_kafka import Producer
from test_transactions import (CONFIG, TXN_PARTITIONS, append_while_down, create_topics, describe_txn,
                               list_offset_latest)
from wire import WireClient

from logcore.coordinator.offsets_codec import partition_for
from logcore.coordinator.transaction_log import (TRANSACTION_TOPIC, TxnLogValue, TxnState, decode_value, encode_key,
                                                 encode_value)
from logcore.protocol.codec import ApiKey, ErrorCode, build, request_class
from logcore.storage.batch import TRANSACTIONAL
from logcore.storage.records import encode_batch

TOPIC = "anomaly"
TP = (TOPIC, 0)


def call(client: WireClient, api_key: ApiKey, version: int, data: dict):
    return client.call(build(request_class(api_key, version), data))


@dataclass
class TxnProducer:
    """A transactional producer speaking v1 (`version` 1) or transactions v2 (`version` 2), one
    request at a time; `batch` builds a write without sending it, so a test can delay it."""

    client: WireClient
    transactional_id: str
    version: int
    producer_id: int = -1
    epoch: int = -1
    sequences: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (id, epoch, partition) -> next
    added: bool = False

    def init(self) -> "TxnProducer":
        answer = call(self.client, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": self.transactional_id,
                                                                "transaction_timeout": 60000})
        assert answer.error_code == ErrorCode.none
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        return self

    def batch(self, value: bytes, partition: int = 0) -> tuple[int, bytes]:
        """(the epoch it carries, a transactional batch with the next sequence of that epoch)."""
        key = (self.producer_id, self.epoch, partition)
        sequence = self.sequences.get(key, 0)
        self.sequences[key] = sequence + 1
        return self.epoch, encode_batch([(None, value)], int(time.time() * 1000), producer_id=self.producer_id,
                                        producer_epoch=self.epoch, base_sequence=sequence, attributes=TRANSACTIONAL)

    def add_partition(self) -> ErrorCode:
        """v1 only: the producer adds the partition to its transaction itself."""
        answer = call(self.client, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": self.transactional_id, "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.epoch, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
        return ErrorCode(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

    def send(self, batch: tuple[int, bytes]) -> ErrorCode:
        """Produce v9 under v1, v12 under transactions v2 (whose check adds the partition)."""
        answer = call(self.client, ApiKey.PRODUCE, 12 if self.version == 2 else 9, {
            "transactional_id": self.transactional_id, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch[1]}]}]})
        return ErrorCode(answer.responses[0].partition_responses[0].error_code)

    def write(self, value: bytes) -> ErrorCode:
        if self.version == 1 and not self.added:
            assert self.add_partition() == ErrorCode.none
            self.added = True
        return self.send(self.batch(value))

    def end(self, commit: bool) -> ErrorCode:
        """EndTxn v3 under v1; v5 under transactions v2, whose answer carries the epoch to go on with."""
        answer = call(self.client, ApiKey.END_TXN, 5 if self.version == 2 else 3, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": commit})
        if answer.error_code == ErrorCode.none and self.version == 2:
            self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.added = False
        return ErrorCode(answer.error_code)


def producer_here(client: WireClient, producer_id: int):
    """The partition's state of `producer_id` (DescribeProducers): epoch, coordinator epoch, open txn."""
    answer = call(client, ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    return next(p for p in answer.topics[0].partitions[0].active_producers if p.producer_id == producer_id)


def deliver_marker(client: WireClient, version: int, producer_id: int, epoch: int, coordinator_epoch: int,
                   commit: bool) -> ErrorCode:
    """A marker as the coordinator's channel sends it: WriteTxnMarkers v1 (transactions v1), v2 with
    transaction_version 2 (transactions v2)."""
    marker = {"producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
              "coordinator_epoch": coordinator_epoch, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    if version == 2:
        marker["transaction_version"] = 2
    answer = call(client, ApiKey.WRITE_TXN_MARKERS, version, {"markers": [marker]})
    return ErrorCode(answer.markers[0].topics[0].partitions[0].error_code)


@pytest.fixture
def broker(broker_factory):
    broker = broker_factory(config=CONFIG)
    create_topics(broker.address, **{TOPIC: 1})
    return broker


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
def test_delayed_commit_marker_racing_the_next_transaction(broker, version):
    """Transaction 1 commits; its commit marker is delivered once more, late, after transaction 2
    wrote to the same partition; then transaction 2 aborts. Under v1 the late marker carries the
    producer's one epoch and the partition takes it: it commits transaction 2's write on that
    partition, and the abort that follows cannot take it back (read_committed shows aborted data,
    the anomaly). Under v2 the marker carries the epoch transaction 1's end bumped to, which
    transaction 2 writes with: the partition refuses it (INVALID_PRODUCER_EPOCH)."""
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, f"late-marker-v{version}", version).init()
        first_epoch = producer.epoch
        assert producer.write(b"txn1") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        marker_epoch = producer_here(client, producer.producer_id).producer_epoch  # as transaction 1's marker wrote
        coordinator_epoch = producer_here(client, producer.producer_id).coordinator_epoch
        assert marker_epoch == (first_epoch + 1 if version == 2 else first_epoch)
        assert producer.epoch == marker_epoch  # v2: EndTxn v5 handed the bumped epoch out

        assert producer.write(b"txn2-aborted") == ErrorCode.none
        late = deliver_marker(client, version, producer.producer_id, marker_epoch, coordinator_epoch, commit=True)
        assert producer.end(commit=False) == ErrorCode.none
    committed = read_to_end(broker.address, {TOPIC: 1}, "read_committed")
    if version == 1:
        assert late == ErrorCode.none
        assert committed == [b"txn1", b"txn2-aborted"]  # the anomaly: an aborted write is visible
    else:
        assert late == ErrorCode.invalid_producer_epoch
        assert committed == [b"txn1"]
    assert list_offset_latest(broker.address, TOPIC, isolation=1) == list_offset_latest(broker.address, TOPIC, 0)


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
def test_delayed_write_racing_the_next_transaction(broker, version):
    """A write sent in transaction 1 is delayed past its commit and arrives once transaction 2 has
    the partition; transaction 2 aborts. Under v1 the write carries the producer's one epoch, its
    sequence follows, and the partition belongs to an open transaction of the producer: it lands in
    transaction 2 and is aborted with it, although it was sent in transaction 1, which committed.
    Under v2 its epoch is the one transaction 1's end retired: INVALID_PRODUCER_EPOCH."""
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, f"late-write-v{version}", version).init()
        assert producer.write(b"txn1") == ErrorCode.none
        delayed = producer.batch(b"txn1-delayed")
        assert producer.end(commit=True) == ErrorCode.none
        if version == 1:
            assert producer.add_partition() == ErrorCode.none  # transaction 2 has the partition
            producer.added = True
            late = producer.send(delayed)
            assert producer.write(b"txn2") == ErrorCode.none
        else:
            assert producer.write(b"txn2") == ErrorCode.none  # Produce v12: transaction 2 has the partition
            late = producer.send(delayed)
        assert producer.end(commit=False) == ErrorCode.none
    everything = read_to_end(broker.address, {TOPIC: 1}, "read_uncommitted")
    if version == 1:
        assert late == ErrorCode.none
        assert everything == [b"txn1", b"txn1-delayed", b"txn2"]  # the anomaly: it went down with transaction 2
    else:
        assert late == ErrorCode.invalid_producer_epoch
        assert everything == [b"txn1", b"txn2"]
    assert read_to_end(broker.address, {TOPIC: 1}, "read_committed") == [b"txn1"]


def test_end_txn_v5_bumps_the_epoch_and_answers_its_retry_alike(broker):
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, "bumps", 2).init()
        start = producer.epoch
        for i in range(3):  # each transaction ends with the next epoch
            assert producer.write(b"%d" % i) == ErrorCode.none
            assert producer.end(commit=i != 1) == ErrorCode.none
            assert producer.epoch == start + i + 1
        assert producer_here(client, producer.producer_id).producer_epoch == producer.epoch  # the markers' epoch

        def end(epoch: int, commit: bool):
            return call(client, ApiKey.END_TXN, 5, {"transactional_id": "bumps", "producer_id": producer.producer_id,
                                                    "producer_epoch": epoch, "committed": commit})
        retried = end(producer.epoch - 1, commit=True)  # the last EndTxn again: its answer was lost
        assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, producer.epoch)
        assert end(producer.epoch - 1, commit=False).error_code == ErrorCode.invalid_txn_state
        assert end(producer.epoch - 2, commit=True).error_code == ErrorCode.producer_fenced
        # nothing open: Kafka's rule under v2 takes only a retry's epoch once a transaction ended
        assert end(producer.epoch, commit=True).error_code == ErrorCode.producer_fenced
        current = producer.batch(b"next")
        producer.epoch -= 1
        assert producer.send(producer.batch(b"old-epoch")) == ErrorCode.invalid_producer_epoch
        producer.epoch += 1
        assert producer.send(current) == ErrorCode.none  # the current epoch opens the next transaction
        assert producer.end(commit=True) == ErrorCode.none
    assert read_to_end(broker.address, {TOPIC: 1}, "read_committed") == [b"0", b"2", b"next"]


def test_txn_offset_commit_v5_adds_the_offsets_partition_itself(broker):
    """Transactions v2: the producer sends its offsets without AddOffsetsToTxn; the commit's check
    adds the group's partition of __consumer_offsets to the transaction, so the offsets are pending
    until the commit marker, as with AddOffsetsToTxn."""
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, "offsets-v2", 2).init()
        assert producer.write(b"out") == ErrorCode.none

        def commit_offset(version: int, epoch: int) -> ErrorCode:
            answer = call(client, ApiKey.TXN_OFFSET_COMMIT, version, {
                "transactional_id": "offsets-v2", "group_id": "g-v2", "producer_id": producer.producer_id,
                "producer_epoch": epoch, "generation_id": -1, "member_id": "", "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                    "committed_metadata": ""}]}]})
            return ErrorCode(answer.topics[0].partitions[0].error_code)

        def fetch() -> tuple[ErrorCode, int]:
            answer = call(client, ApiKey.OFFSET_FETCH, 7, {"group_id": "g-v2", "require_stable": True,
                                                          "topics": [{"name": TOPIC, "partition_indexes": [0]}]})
            result = answer.topics[0].partitions[0]
            return ErrorCode(result.error_code), result.committed_offset

        assert commit_offset(4, producer.epoch) == ErrorCode.invalid_txn_state  # v4 verifies only: not added
        assert commit_offset(5, producer.epoch) == ErrorCode.none
        assert fetch() == (ErrorCode.unstable_offset_commit, -1)
        assert producer.end(commit=True) == ErrorCode.none
        assert fetch() == (ErrorCode.none, 7)
        assert commit_offset(5, producer.epoch - 1) == ErrorCode.producer_fenced  # the retired epoch


def finalized(address: str) -> dict[str, int]:
    with WireClient(address) as client:
        answer = call(client, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return {f.name: f.max_version_level for f in answer.finalized_features}


def test_transaction_version_is_finalized_at_2_unless_configured_lower(broker, broker_factory):
    assert finalized(broker.address)["transaction.version"] == 2
    assert "transaction.version" not in finalized(broker_factory(config={"transaction.version": "0"}, name="tv0").address)


def test_state_of_transactions_v2_survives_a_broker_sigkill(broker):
    """The open transaction's version is in its TransactionLogValue (v1, tagged field 2), so the
    restarted coordinator ends it with a bumped epoch and a marker of transactions v2."""
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, "survivor-v2", 2).init()
        assert producer.write(b"before") == ErrorCode.none
    broker.kill()
    broker.start()
    with WireClient(broker.address) as client:
        producer.client = client
        opened = producer.epoch
        assert producer.write(b"after") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        assert producer.epoch == opened + 1
        here = producer_here(client, producer.producer_id)
        assert here.producer_epoch == opened + 1  # the marker the restarted coordinator wrote
        late = deliver_marker(client, 2, producer.producer_id, opened + 1, here.coordinator_epoch, commit=True)
        assert late == ErrorCode.invalid_producer_epoch
    assert read_to_end(broker.address, {TOPIC: 1}, "read_committed") == [b"before", b"after"]
    logged = [decode_value(v) for v in read_to_end(broker.address, {TRANSACTION_TOPIC: TXN_PARTITIONS}) if v is not None]
    transactions = [v for v in logged if v.producer_id == producer.producer_id and v.state != TxnState.EMPTY]
    assert [v.state for v in transactions] == [TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert {v.client_transaction_version for v in transactions} == {2}


def test_epochs_running_out_hand_over_a_new_producer_id(broker):
    """Transactions v2 bump the epoch 32,767 times at most: the end that reaches the last one (its
    markers carry 32767) names a new producer id, which EndTxn answers with epoch 0 and a retry of
    that EndTxn answers again. The id's epoch is set near the end while the broker is down, in its
    __transaction_state record."""
    with WireClient(broker.address) as client:
        producer = TxnProducer(client, "rollover", 2).init()
        assert producer.write(b"first") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
    broker.kill()
    now = int(time.time() * 1000)
    worn = TxnLogValue(producer.producer_id, 32765, 60000, TxnState.COMPLETE_COMMIT, frozenset(), now, now,
                       client_transaction_version=2)
    append_while_down(broker.data_dir, TRANSACTION_TOPIC, partition_for("rollover", TXN_PARTITIONS),
                      encode_batch([(encode_key("rollover"), encode_value(worn))], now))
    broker.start()
    with WireClient(broker.address) as client:
        producer.client, producer.epoch, old_id = client, 32765, producer.producer_id
        assert producer.write(b"at-32765") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        assert (producer.producer_id, producer.epoch) == (old_id, 32766)
        assert producer.write(b"at-32766") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        assert producer.producer_id != old_id and producer.epoch == 0
        assert producer_here(client, old_id).producer_epoch == 32767  # the last marker of the old id
        retried = call(client, ApiKey.END_TXN, 5, {"transactional_id": "rollover", "producer_id": old_id,
                                                   "producer_epoch": 32766, "committed": True})
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
            ErrorCode.none, producer.producer_id, 0)
        assert producer.write(b"new-id") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        assert producer.epoch == 1
    assert read_to_end(broker.address, {TOPIC: 1}, "read_committed") == [b"first", b"at-32765", b"at-32766",
                                                                          b"new-id"]


def test_librdkafka_keeps_transactions_v1_on_a_broker_that_offers_v2(broker):
    """confluent-kafka (librdkafka 2.16) ignores transaction.version: it adds partitions itself and
    ends with EndTxn v1, so its epoch stays put from one transaction to the next, and its commits and
    aborts come out as before."""
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "rdkafka-v1", "linger.ms": 5})
    producer.init_transactions(30)
    epochs = []
    for i, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        producer.produce(TOPIC, b"rd-%d" % i, partition=0)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        epochs.append(describe_txn(broker.address, "rdkafka-v1").producer_epoch)
    assert epochs == [epochs[0]] * 3
    assert read_to_end(broker.address, {TOPIC: 1}, "read_committed") == [b"rd-0", b"rd-2"]
