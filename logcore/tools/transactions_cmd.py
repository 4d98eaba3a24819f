"""`binlake transactions`: list, describe and abort transactions, like kafka-transactions.sh.

It speaks the wire protocol (ListTransactions, DescribeTransactions, DescribeProducers and
WriteTxnMarkers, which no Python client library offers) through logcore's codec, asking the broker
that owns each piece: every broker for `list`, the transaction coordinator for `describe`, the
partition leader for `describe-producers` and `abort`. So it works the same against Apache Kafka.

`abort` is for hanging transactions: a partition whose open transaction its coordinator no longer
knows (so it never times out) holds back the last stable offset, and read_committed consumers with
it. It writes an abort marker to that one partition.
"""

from __future__ import annotations

import datetime
import time

import click

from ..protocol.codec import ApiKey
from .groups_cmd import _echo_table as echo_table
from .wire_admin import WireAdmin, bootstrap_option, check, command_config_option

TRANSACTION = 1  # FindCoordinator key type


class _Cluster(WireAdmin):
    """The admin connection, with the transaction coordinator's lookup."""

    def __init__(self, bootstrap: str, security) -> None:
        super().__init__(bootstrap, client_id="binlake-transactions", security=security)

    def coordinator_of(self, transactional_id: str) -> tuple[str, int]:
        found = self.call(ApiKey.FIND_COORDINATOR, 3, {"key": transactional_id, "key_type": TRANSACTION})
        check(found.error_code, f"finding the coordinator of {transactional_id!r}", found.error_message)
        return found.host, found.port


def _run(bootstrap_server: str, security, job):
    cluster = _Cluster(bootstrap_server, security)
    try:
        return job(cluster)
    finally:
        cluster.close()


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _epoch_ms(value) -> int:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return -1 if value is None else int(value)


@click.group("transactions")
def transactions_command() -> None:
    """List, describe and abort transactions."""


@transactions_command.command("list")
@bootstrap_option
@command_config_option
@click.option("--state", "states", multiple=True, help="only these states, e.g. Ongoing (repeatable)")
@click.option("--producer-id", "producer_ids", multiple=True, type=int, help="only these producer ids")
@click.option("--duration-ms", type=int, default=-1, help="only transactions open at least this long")
def list_transactions(bootstrap_server: str, security, states, producer_ids, duration_ms: int) -> None:
    """Every transactional id the cluster's coordinators know."""
    def job(cluster: _Cluster):
        rows = []
        brokers, _ = cluster.brokers()
        for broker_id, address in sorted(brokers.items()):
            listed = cluster.call(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": list(states),
                                                              "producer_id_filters": list(producer_ids),
                                                              "duration_filter": duration_ms}, address)
            check(listed.error_code, f"listing the transactions of broker {broker_id}")
            if listed.unknown_state_filters:
                raise click.ClickException(f"unknown transaction state(s): {', '.join(listed.unknown_state_filters)}")
            rows += [[t.transactional_id, broker_id, t.producer_id, t.transaction_state]
                     for t in listed.transaction_states]
        echo_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], sorted(rows))
    _run(bootstrap_server, security, job)


@transactions_command.command("describe")
@bootstrap_option
@command_config_option
@click.option("--transactional-id", required=True)
def describe_transaction(bootstrap_server: str, security, transactional_id: str) -> None:
    """State, producer, timeout and partitions of one transactional id."""
    def job(cluster: _Cluster):
        address = cluster.coordinator_of(transactional_id)
        state = cluster.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]},
                             address).transaction_states[0]
        check(state.error_code, f"describing {transactional_id!r}")
        start = _epoch_ms(state.transaction_start_time)
        duration = int(time.time() * 1000) - start if start > 0 else None
        partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
        echo_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"],
                   [[f"{address[0]}:{address[1]}", transactional_id, state.producer_id, state.producer_epoch,
                     state.transaction_state, _ms(state.transaction_timeout), start if start > 0 else None,
                     duration, partitions or None]])
    _run(bootstrap_server, security, job)


def _producers(cluster: _Cluster, topic: str, partition: int) -> list:
    wanted = {"topics": [{"name": topic, "partition_indexes": [partition]}]}
    described = cluster.call(ApiKey.DESCRIBE_PRODUCERS, 0, wanted, cluster.leader_of(topic, partition))
    result = described.topics[0].partitions[0]
    check(result.error_code, f"describing the producers of {topic}-{partition}", result.error_message)
    return list(result.active_producers)


@transactions_command.command("describe-producers")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
def describe_producers(bootstrap_server: str, security, topic: str, partition: int) -> None:
    """The producers a partition remembers, with the start offset of each one's open transaction."""
    def job(cluster: _Cluster):
        rows = [[p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
                 p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None]
                for p in _producers(cluster, topic, partition)]
        echo_table(["ProducerId", "ProducerEpoch", "LastSequence", "LastTimestamp", "LatestCoordinatorEpoch",
                    "CurrentTransactionStartOffset"], rows)
    _run(bootstrap_server, security, job)


@transactions_command.command("abort")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.option("--start-offset", type=int, help="the first offset of the hanging transaction (see describe-producers)")
@click.option("--producer-id", type=int, help="instead of --start-offset: the producer, with its epoch")
@click.option("--producer-epoch", type=int)
@click.option("--coordinator-epoch", type=int, default=0, show_default=True)
def abort_transaction(bootstrap_server: str, security, topic: str, partition: int, start_offset: int | None,
                      producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int) -> None:
    """Write an abort marker for a hanging transaction on one partition."""
    if (start_offset is None) == (producer_id is None) or (producer_id is not None and producer_epoch is None):
        raise click.UsageError("give either --start-offset, or --producer-id with --producer-epoch")

    def job(cluster: _Cluster):
        nonlocal producer_id, producer_epoch, coordinator_epoch
        if start_offset is not None:
            found = [p for p in _producers(cluster, topic, partition) if p.current_txn_start_offset == start_offset]
            if not found:
                raise click.ClickException(f"no open transaction starts at offset {start_offset} of "
                                           f"{topic}-{partition}; see `binlake transactions describe-producers`")
            producer_id, producer_epoch = found[0].producer_id, found[0].producer_epoch
            coordinator_epoch = max(found[0].coordinator_epoch, 0)
        written = cluster.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [partition]}], "coordinator_epoch": coordinator_epoch,
        }]}, cluster.leader_of(topic, partition))
        result = written.markers[0].topics[0].partitions[0]
        check(result.error_code, f"aborting producer {producer_id}'s transaction on {topic}-{partition}")
        click.echo(f"aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on {topic}-{partition}")
    _run(bootstrap_server, security, job)
