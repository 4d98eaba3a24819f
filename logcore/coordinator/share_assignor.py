"""The `simple` assignor of share groups (Kafka's SimpleAssignor, KIP-932): a pure function from the
members' subscriptions and the subscribed topics' partition counts to each member's partitions.

In a share group a partition may go to several members: its records are handed out under locks, one
record to one member at a time. Per topic, with M subscribed members (sorted by id) and P partitions:

    M <= P   the partitions are dealt round-robin, each to one member (counts at most one apart)
    M >  P   each member takes one partition, dealt round-robin, so every partition is shared by
             M // P or M // P + 1 members

Every partition of a subscribed topic goes to at least one subscribed member.
"""

from __future__ import annotations

import uuid
from typing import Mapping

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id → partitions


def simple_assign(members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic in sorted(partitions, key=str):
        count = partitions[topic]
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed or count <= 0:
            continue
        if len(subscribed) <= count:
            for p in range(count):
                owned[subscribed[p % len(subscribed)]].setdefault(topic, set()).add(p)
        else:
            for i, member in enumerate(subscribed):
                owned[member].setdefault(topic, set()).add(i % count)
    return {m: {topic: frozenset(ps) for topic, ps in by_topic.items()} for m, by_topic in owned.items()}
