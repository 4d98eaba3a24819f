"""Offsets committed inside a transaction (TxnOffsetCommit, KIP-98; group fencing from KIP-447).

They are written to the group's `__consumer_offsets` partition as part of the producer's
transaction and stay pending until the transaction's marker lands there: a commit marker replays
them into the group coordinator (its only mutator), an abort drops them. While pending they make
OffsetFetch with require_stable answer UNSTABLE_OFFSET_COMMIT, so a consumer taking over the
partitions waits for the outcome instead of reading an offset about to change.

Pending offsets are rebuilt from the transactions `StateTopic.read` left open, whenever the group
coordinator loads partitions (on start, or in a cluster as it comes to lead them), and dropped with
a partition it stops leading. A commit is answered once the partition's ISR has it.
Event loop only; no `await` between checking a commit and recording it.
"""

from __future__ import annotations

import logging

from ..protocol.errors import BrokerError, CoordinatorNotAvailable, ErrorCode, InvalidProducerEpoch, ProducerFenced
from .committed_offsets import OffsetCommit
from .group import GroupState
from .offsets_codec import OFFSETS_TOPIC, OffsetKey, OffsetValue, decode, encode_key, encode_value, partition_for
from .transaction_markers import Marker

log = logging.getLogger(__name__)

Pending = list[tuple[OffsetKey, OffsetValue]]


class TxnOffsets:
    def __init__(self, groups, transactions) -> None:
        self.groups = groups
        self.transactions = transactions
        self.pending: dict[tuple[int, int], Pending] = {}  # (producer id, offsets partition) -> commits
        groups.partition_listeners.append(self.on_partition)
        groups.deletion_listeners.append(self.forget_topics)

    def on_partition(self, partition: int, loaded: bool) -> None:
        """The group coordinator loaded `partition` (adopt the transactional commits it found still
        open) or dropped it (forget them)."""
        for key in [k for k in self.pending if k[1] == partition]:
            del self.pending[key]
        if loaded:
            for producer_id, records in self.groups.topic.open_transactions.get(partition, {}).items():
                decoded = [decode(k, v) for k, v in records if k is not None]
                offsets = [(k, v) for k, v in decoded if isinstance(k, OffsetKey) and isinstance(v, OffsetValue)]
                if offsets:
                    self.pending[(producer_id, partition)] = offsets

    def forget_topics(self, gone) -> None:
        """Offsets of deleted topics (`gone(topic)`) still pending in a transaction will not take effect
        at its commit either (Kafka removes a deleted partition's pending offsets with its committed ones)."""
        for key, records in list(self.pending.items()):
            kept = [(k, v) for k, v in records if not gone(k.topic)]
            if len(kept) < len(records):
                self.pending[key] = kept

    async def commit(self, group_id: str, producer_id: int, epoch: int, generation: int,
               member_id: str, instance_id: str | None, commits: list[OffsetCommit]) -> list[ErrorCode]:
        """One error per commit, in order. Group-level refusals apply to every commit. The caller
        checked the transaction with its coordinator (`TxnVerifier`) right before."""
        if not self.groups.owns(group_id):
            return [ErrorCode.not_coordinator] * len(commits)
        error = self._check_member(group_id, generation, member_id, instance_id)
        if error is not ErrorCode.none:
            return [error] * len(commits)
        partition = partition_for(group_id, self.groups.topic.partitions)
        errors, records = self.groups.offset_records(group_id, commits)
        if not records:
            return errors
        try:
            self.groups.topic.append(partition, [(encode_key(k), encode_value(v)) for k, v in records],
                                     producer_id, epoch)
        except (InvalidProducerEpoch, ProducerFenced) as exc:
            return [exc.code if e is ErrorCode.none else e for e in errors]
        except BrokerError as exc:
            code = CoordinatorNotAvailable(exc.message).code
            return [code if e is ErrorCode.none else e for e in errors]
        self.pending.setdefault((producer_id, partition), []).extend(records)
        replicated = await self.groups.replicated(group_id)
        return [replicated if e is ErrorCode.none else e for e in errors]

    def _check_member(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        """KIP-447: a commit naming a member and generation must come from the current generation, so
        a processor that lost its partitions in a rebalance cannot commit for them any more (in a KIP-848
        group: the member at its current epoch)."""
        if member_id or generation >= 0:
            consumer = self.groups.check_consumer_commit(group_id, generation, member_id)
            if consumer is not None:
                return consumer
        group = self.groups.groups.get(group_id)
        if group is None:
            return ErrorCode.none  # the group appears with its first committed offset
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        if member_id and member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation >= 0 and generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def on_marker(self, marker: Marker, topic: str, partition: int) -> None:
        """A transaction ended on `topic`-`partition`: its offsets take effect, or vanish."""
        if topic != OFFSETS_TOPIC:
            return
        records = self.pending.pop((marker.producer_id, partition), [])
        if marker.commit:
            for key, value in records:
                self.groups.replay(key, value)

    def unstable(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of `group_id` with a transactional commit still pending."""
        partition = partition_for(group_id, self.groups.topic.partitions)
        return {(k.topic, k.partition) for (pid, p), records in self.pending.items() if p == partition
                for k, _ in records if k.group == group_id}
