"""The server-side assignors of KIP-848 consumer groups (`group.consumer.assignors`, a member's
`group.remote.assignor`): pure functions from the members' subscriptions and the subscribed topics'
partition counts to each member's target partitions.

    uniform  every partition to one subscribed member, the members' counts at most one apart where
             their subscriptions allow it, and sticky: a partition stays with the member that had it
             in the previous target unless the balance needs it elsewhere
    range    per topic, its subscribed members sorted by id each take a contiguous range of
             partitions (the first `partitions % members` one more), so members subscribed to the
             same topics get the same partition numbers of each (co-partitioning)

Kafka's are faster for identical subscriptions; these keep their contracts: every subscribed
partition assigned exactly once, balanced, sticky for uniform. Like Kafka's since KAFKA-16694 (4.x
included), neither reads racks.
"""

from __future__ import annotations

import uuid
from typing import Callable, Mapping

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]  # topic id → partitions
# (members → subscribed topic ids, topic id → partition count, previous target) → new target
Assignor = Callable[[Mapping[str, frozenset[TopicId]], Mapping[TopicId, int], Mapping[str, Assignment]],
                    dict[str, Assignment]]


def uniform(members: Mapping[str, frozenset[TopicId]], partitions: Mapping[TopicId, int],
            previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in members}
    taken: set[tuple[TopicId, int]] = set()
    for member, topics in members.items():  # stickiness: keep what is still valid
        for topic, kept in previous.get(member, {}).items():
            if topic in topics:
                for p in kept:
                    if p < partitions.get(topic, 0) and (topic, p) not in taken:
                        owned[member].add((topic, p))
                        taken.add((topic, p))
    eligible = {topic: sorted(m for m, topics in members.items() if topic in topics) for topic in partitions}
    for topic in sorted(partitions, key=str):
        for p in range(partitions[topic]):
            if (topic, p) not in taken and eligible[topic]:
                least = min(eligible[topic], key=lambda m: (len(owned[m]), m))
                owned[least].add((topic, p))
    _balance(owned, eligible)
    return {member: _by_topic(tps) for member, tps in owned.items()}


def _balance(owned: dict[str, set[tuple[TopicId, int]]], eligible: dict[TopicId, list[str]]) -> None:
    """Move partitions from the fullest members to eligible ones holding at least two fewer, until no
    such move is left: the counts end at most one apart wherever the subscriptions allow."""
    moved = True
    while moved:
        moved = False
        for member in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[member], key=lambda tp: (str(tp[0]), -tp[1])):
                target = min(eligible[tp[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[target]) + 1 < len(owned[member]):
                    owned[member].discard(tp)
                    owned[target].add(tp)
                    moved = True


def range_(members: Mapping[str, frozenset[TopicId]], partitions: Mapping[TopicId, int],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in members}
    for topic, count in partitions.items():
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        quota, extra = divmod(count, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            size = quota + (1 if i < extra else 0)
            owned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {member: _by_topic(tps) for member, tps in owned.items()}


def _by_topic(partitions: set[tuple[TopicId, int]]) -> Assignment:
    grouped: dict[TopicId, set[int]] = {}
    for topic, p in partitions:
        grouped.setdefault(topic, set()).add(p)
    return {topic: frozenset(ps) for topic, ps in grouped.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
