"""Committed offsets: OffsetCommit's checks and records, OffsetFetch, OffsetDelete and DeleteGroups,
expiry after `offsets.retention.minutes`, and the offsets of deleted topics. Each change is computed
first, then appended and replayed through the `GroupStore`, which holds the offsets.

Event loop only; no `await` between computing records and appending them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from ..protocol.errors import BrokerError, ErrorCode
from .group import Group, GroupState, Member
from .group_store import GroupStore, Record
from .offsets_codec import GroupKey, OffsetKey, OffsetValue

log = logging.getLogger(__name__)

S = GroupState


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class CommittedOffsets:
    def __init__(self, store: GroupStore, metadata, config, touch: Callable[[Member], None],
                 consumer_check: Callable[[str, int, str], ErrorCode | None]) -> None:
        self.store = store
        self.metadata = metadata
        self.config = config
        self.touch = touch  # a member's sign of life (membership.py): a commit is as good as a heartbeat
        # A KIP-848 group's own check of a commit (member id, member epoch); None for the other groups.
        self.consumer_check = consumer_check
        # Told which topics' offsets went (`gone(topic)`): transactional commits still pending for them go too.
        self.deletion_listeners: list[Callable[[Callable[[str], bool]], None]] = []

    def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
               commits: list[OffsetCommit]) -> list[ErrorCode]:
        """One error per commit, in order."""
        if not self.store.owns(group_id):
            return [ErrorCode.not_coordinator] * len(commits)
        group = self.store.groups.get(group_id)
        error = self.consumer_check(group_id, generation, member_id)
        if error is None:
            error = _check_commit(group, generation, member_id, instance_id)
        if error is not ErrorCode.none:
            return [error] * len(commits)
        errors, records = self.records(group_id, commits)
        if records:
            try:
                self.store.append(group_id, records)
            except BrokerError as exc:
                return [exc.code if e is ErrorCode.none else e for e in errors]
        if group is not None and member_id in group.members:
            self.touch(group.members[member_id])
        return errors

    def records(self, group_id: str,
                commits: list[OffsetCommit]) -> tuple[list[ErrorCode], list[tuple[OffsetKey, OffsetValue]]]:
        """One error per commit, in order (its partition must exist and its metadata fit
        offset.metadata.max.bytes), and the records of the commits that passed."""
        now_ms = int(time.time() * 1000)
        max_metadata = self.config.get("offset.metadata.max.bytes")
        errors, records = [], []
        for c in commits:
            info = self.metadata.topics.get(c.topic)
            if info is None or not 0 <= c.partition < info.partitions:
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif c.metadata and len(c.metadata.encode()) > max_metadata:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                errors.append(ErrorCode.none)
                records.append((OffsetKey(group_id, c.topic, c.partition),
                                OffsetValue(c.offset, c.leader_epoch, c.metadata or "", now_ms)))
        return errors, records

    def fetch(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets; `partitions` None means every partition the group has committed."""
        group = self.store.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {tp: offsets.get(tp) for tp in partitions}

    def delete(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        if not self.store.owns(group_id):
            return ErrorCode.not_coordinator, []
        group = self.store.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return ErrorCode.group_id_not_found, []
        subscribed: set[str] = set()
        if not group.is_(S.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, []
            subscribed = topics
        errors, records = [], []
        for topic, partition in partitions:
            if topic in subscribed:
                errors.append(ErrorCode.group_subscribed_to_topic)
                continue
            errors.append(ErrorCode.none)
            if (topic, partition) in group.offsets:
                records.append((OffsetKey(group_id, topic, partition), None))
        if records:
            try:
                self.store.append(group_id, records)
            except BrokerError as exc:
                return exc.code, []
        return ErrorCode.none, errors

    def delete_group(self, group_id: str, also: list[Record] = ()) -> ErrorCode:
        """DeleteGroups: an empty group's offsets and metadata go (tombstones), with `also` (the records
        ending an empty KIP-848 group of that id)."""
        if not self.store.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.store.groups.get(group_id)
        if (group is None or group.is_(S.DEAD)) and not also:
            return ErrorCode.group_id_not_found
        if group is not None and not group.is_(S.EMPTY, S.DEAD):
            return ErrorCode.non_empty_group
        records: list[Record] = [(OffsetKey(group_id, t, p), None) for t, p in (group.offsets if group else ())]
        records += [*also, (GroupKey(group_id), None)]
        try:
            self.store.append(group_id, records)
        except BrokerError as exc:
            return exc.code
        return ErrorCode.none

    def expire(self, now_ms: int) -> int:
        """Tombstone offsets past `offsets.retention.minutes`: all of an empty group's (counted from when
        it became empty), and a stable consumer group's for topics it no longer subscribes to."""
        retention_ms = self.config.get("offsets.retention.minutes") * 60_000
        expired_total = 0
        for group in list(self.store.groups.values()):
            if (consumer := self.store.consumer_groups.get(group.group_id)) is not None and consumer.members:
                continue  # (a KIP-848 group's offsets last while it has members)
            if group.is_(S.EMPTY) and not group.pending_members:
                base = group.state_timestamp_ms
                expired = [tp for tp, v in group.offsets.items()
                           if now_ms - (base if base is not None else v.commit_timestamp) >= retention_ms]
            elif group.is_(S.STABLE) and (subscribed := group.subscribed_topics()) is not None:
                expired = [tp for tp, v in group.offsets.items()
                           if tp[0] not in subscribed and now_ms - v.commit_timestamp >= retention_ms]
            else:
                continue
            expired_total += self._tombstone(group, expired, "expired")
        if expired_total:
            log.info("expired %d committed offset(s)", expired_total)
        return expired_total

    # -- deleted topics ------------------------------------------------------------------------

    def topics_deleted(self, topics: set[str]) -> int:
        """Kafka's onPartitionsDeleted: a deleted topic's committed offsets leave every group this broker
        coordinates, as tombstones in __consumer_offsets, so a topic created again under the name starts
        with none and neither a reload nor the next coordinator brings them back. How many went."""
        return self._remove(list(self.store.groups.values()), topics.__contains__)

    def remove_missing_topics(self, groups: Iterable[Group]) -> None:
        """Loading: offsets of topics that no longer exist are of a deletion this coordinator did not see
        through (down at the time, not yet leading the partition, or its tombstones lost with a leader
        that died before its followers had them)."""
        self._remove(list(groups), lambda topic: topic not in self.metadata.topics)

    def _remove(self, groups: list[Group], gone: Callable[[str], bool]) -> int:
        for listener in self.deletion_listeners:
            listener(gone)
        removed = 0
        for group in groups:
            if doomed := [tp for tp in group.offsets if gone(tp[0])]:
                removed += self._tombstone(group, doomed, "deleted topics'")
        if removed:
            log.info("removed %d committed offset(s) of deleted topics", removed)
        return removed

    def _tombstone(self, group: Group, partitions: list[tuple[str, int]], why: str) -> int:
        """Tombstones for `group`'s offsets of `partitions`, and for the group itself when that leaves it
        empty with no offsets (Kafka's group then goes Dead). How many offsets went."""
        records: list[Record] = [(OffsetKey(group.group_id, t, p), None) for t, p in partitions]
        if group.is_(S.EMPTY) and not group.members and len(partitions) == len(group.offsets):
            records.append((GroupKey(group.group_id), None))
        if not records:
            return 0
        try:
            self.store.append(group.group_id, records)
        except BrokerError as exc:
            log.error("group %s: cannot write tombstones for its %s offsets: %s", group.group_id, why, exc)
            return 0
        return len(partitions)


def _check_commit(group: Group | None, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
    """Whether a member of `group` at `generation` may commit (-1: a commit from outside group management)."""
    if group is None:
        # No group: only a commit from outside group management (generation -1) may create one.
        return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
    if group.is_(S.DEAD):
        return ErrorCode.coordinator_not_available
    if generation < 0 and group.is_(S.EMPTY):
        return ErrorCode.none
    if instance_id and group.static_members.get(instance_id) not in (None, member_id):
        return ErrorCode.fenced_instance_id
    if group.is_(S.COMPLETING_REBALANCE):
        return ErrorCode.rebalance_in_progress
    if member_id not in group.members:
        return ErrorCode.unknown_member_id
    if generation != group.generation:
        return ErrorCode.illegal_generation
    return ErrorCode.none
