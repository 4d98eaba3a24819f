"""The transactional check of a partition's leader (KIP-890, Kafka's AddPartitionsToTxnManager):
before a transactional write lands on a partition, the transaction's coordinator confirms it.

- Transactions v1 (Produce up to v11, TxnOffsetCommit up to v4): the producer added the partition
  itself (AddPartitionsToTxn), so the coordinator only *verifies* that the partition belongs to the
  producer's open transaction at this epoch (AddPartitionsToTxn v4+ with `verify_only`). A write
  delayed past its transaction's end, or a zombie's, is refused instead of opening a transaction
  that nothing would close.
- Transactions v2 (Produce v12+, TxnOffsetCommit v5+): the producer adds nothing; the coordinator
  *adds* the partition to the producer's transaction (starting one if none is open) at the epoch
  the write carries, which is the epoch the last EndTxn handed out, so a write of an ended
  transaction (an older epoch) is fenced.

The coordinator is this broker's own transaction coordinator when it owns the id, else the leader
of the id's `__transaction_state` partition, asked with AddPartitionsToTxn v5. A partition whose
producer state already shows this producer's transaction open at this epoch needs no check (the
transaction cannot have ended without a marker here, which would have closed it).

A check awaits the coordinator, and the write follows with no await in between; a marker landing
on the partition meanwhile that ends the checked transaction voids the check (Kafka's verification
guard), and the write is refused. A produce answers as Kafka's does (`for_produce`):
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, and a coordinator that cannot answer now
(moving, loading, finishing the last transaction) NOT_ENOUGH_REPLICAS, which producers retry.

Event loop only.
"""

from __future__ import annotations

import logging

from ..protocol.codec import ApiKey, ErrorCode, build, request_class
from ..protocol.errors import BrokerError
from ..replication.peer import PeerConnection, PeerUnavailable
from .transaction_log import TRANSACTION_TOPIC
from .transaction_markers import Marker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ADD_PARTITIONS_TO_TXN_VERSION = 5
TIMEOUT_S = 30.0
TRANSACTIONS_V2 = 2
# Answers that mean "not now": the producer retries the write (Kafka maps them so too).
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
              ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
              ErrorCode.network_exception, ErrorCode.request_timed_out}


class TxnVerifier:
    def __init__(self, coordinator, replicas, cluster, peer_security=None) -> None:
        self.coordinator = coordinator
        self.replicas = replicas
        self.cluster = cluster
        self.peer_security = peer_security
        self._peers: dict[tuple[str, int], PeerConnection] = {}
        # (producer id, partition) -> the check under way: (its token, the epoch it checks, transactions v2?)
        self._checks: dict[tuple[int, TopicPartition], tuple[object, int, bool]] = {}
        coordinator.markers.listeners.append(self._on_marker)

    async def check(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
                    transaction_version: int) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        """The partitions refused, each with its error code and why; the others may be written now
        (before the next await)."""
        wanted = [tp for tp in partitions if not self._open_here(producer_id, epoch, tp)]
        if not wanted:
            return {}
        adding = transaction_version >= TRANSACTIONS_V2
        guards = {tp: (object(), epoch, adding) for tp in wanted}
        for tp, guard in guards.items():
            self._checks[(producer_id, tp)] = guard
        try:
            if self.coordinator.owns(transactional_id):
                refused = await self._check_here(transactional_id, producer_id, epoch, wanted, adding)
            else:
                refused = await self._ask(transactional_id, producer_id, epoch, wanted, adding)
        finally:
            ended = {tp for tp, guard in guards.items() if self._checks.pop((producer_id, tp), None) is not guard}
        for tp in ended - refused.keys():
            refused[tp] = (ErrorCode.invalid_txn_state, f"the transaction of {transactional_id!r} ended on "
                           f"{tp[0]}-{tp[1]} while the write was being checked")
        return refused

    def _open_here(self, producer_id: int, epoch: int, tp: TopicPartition) -> bool:
        try:
            return self.replicas.leader(*tp).log.producers.in_transaction(producer_id, epoch)
        except BrokerError:
            return False  # the append says what is wrong with the partition

    async def _check_here(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
                          adding: bool) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        try:
            if adding:
                await self.coordinator.add_partitions(transactional_id, producer_id, epoch, partitions,
                                                      TRANSACTIONS_V2)
            else:
                for tp in partitions:
                    self.coordinator.check_in_transaction(transactional_id, producer_id, epoch, tp)
        except BrokerError as exc:
            return {tp: (exc.code, exc.message) for tp in partitions}
        return {}

    async def _ask(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
                   adding: bool) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        """AddPartitionsToTxn v5 to the id's coordinator, wherever it is."""
        view = self.cluster.partition(TRANSACTION_TOPIC, self.coordinator.partition_of(transactional_id))
        address = self.cluster.address_of(view.leader) if view is not None and view.leader >= 0 else None
        if address is None:
            return {tp: (ErrorCode.coordinator_not_available, f"the coordinator of {transactional_id!r} is not "
                         f"known yet") for tp in partitions}
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = PeerConnection(
                *address, client_id=f"broker-{self.replicas.broker_id}-txn-verify", security=self.peer_security)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = build(request_class(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION), {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch,
            "verify_only": not adding,
            "topics": [{"name": name, "partitions": indexes} for name, indexes in topics.items()]}]})
        try:
            response = await peer.call(request, TIMEOUT_S)
        except PeerUnavailable as exc:
            return {tp: (ErrorCode.network_exception, str(exc)) for tp in partitions}
        if response.error_code != ErrorCode.none:
            return {tp: (ErrorCode(response.error_code), f"the coordinator of {transactional_id!r} answered "
                         f"{ErrorCode(response.error_code).name}") for tp in partitions}
        refused = {}
        for topic in response.results_by_transaction[0].topic_results:
            for result in topic.results_by_partition:
                code = ErrorCode(result.partition_error_code)
                if code != ErrorCode.none:
                    refused[(topic.name, result.partition_index)] = (
                        code, f"the coordinator of {transactional_id!r} answered {code.name}")
        return refused

    def _on_marker(self, marker: Marker, topic: str, partition: int) -> None:
        """A marker voids a check under way on its partition if it ends the checked transaction: under
        v1 one of the same epoch; under v2 one of a newer epoch only, since the marker of the
        transaction before carries the very epoch the next one writes with, and may land meanwhile."""
        key = (marker.producer_id, (topic, partition))
        check = self._checks.get(key)
        if check is not None and (marker.producer_epoch > check[1] if check[2] else marker.producer_epoch >= check[1]):
            del self._checks[key]

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()


def for_produce(code: ErrorCode) -> ErrorCode:
    """What a produce request answers for a refused check."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # what a write answers since KIP-588
    if code in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    return code
