"""Where a new topic's replicas go: Kafka's spread, so a binlake cluster places partitions the way a
Kafka operator expects (docs/cluster.md, "Controller").

The first replicas (the preferred leaders) go round the brokers from a random start, so leadership
is even; each later replica sits a shift away from the first, and the shift grows by one every
round of partitions, so the followers of one broker's partitions spread over the others instead of
all landing on its neighbour. With racks, the brokers are listed alternating racks, and a replica
skips a broker whose rack (or the broker itself) already holds one while some rack (or broker) holds
none: a partition spans as many racks as it has replicas, up to the number of racks.
"""

from __future__ import annotations

import random
from collections import defaultdict

from ..protocol.errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor
from .view import Node


def assign_replicas(nodes: list[Node], partitions: int, replication_factor: int, first_partition: int = 0,
                    start: int | None = None, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Partition → broker ids for `partitions` partitions numbered from `first_partition` (new
    partitions of an existing topic continue its spread). `start` fixes the otherwise random start
    and shift (tests, and Kafka's worked example)."""
    if partitions < 1:
        raise InvalidPartitions(f"number of partitions must be at least 1, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > len(nodes):
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} larger than available brokers {len(nodes)}")
    racks = {n.node_id: n.rack for n in nodes}
    if any(racks.values()) and not all(racks.values()):
        unracked = sorted(b for b, rack in racks.items() if not rack)
        raise InvalidReplicaAssignment(f"brokers {unracked} have no broker.rack while others do: give every broker a "
                                       f"rack, or none, for a rack-aware assignment")
    brokers = _alternating_racks(racks) if any(racks.values()) else sorted(racks)
    rng = rng or random.Random()
    first_index = rng.randrange(len(brokers)) if start is None else start
    shift = rng.randrange(len(brokers)) if start is None else start
    rack_count = len(set(racks.values()))
    assignment = {}
    for partition in range(first_partition, first_partition + partitions):
        first = (partition + first_index) % len(brokers)
        round_shift = shift + partition // len(brokers)  # one more every round of the brokers
        replicas = [brokers[first]]
        k = 0
        while len(replicas) < replication_factor:
            broker = brokers[_follower_index(first, round_shift * rack_count, k, len(brokers))]
            k += 1
            used_racks = {racks[b] for b in replicas}
            if racks[broker] in used_racks and len(used_racks) < rack_count:
                continue  # a rack with no replica yet comes first
            if broker in replicas:
                continue
            replicas.append(broker)
        assignment[partition] = replicas
    return assignment


def _follower_index(first: int, shift: int, k: int, count: int) -> int:
    """The k-th candidate after the first replica: never the first replica itself."""
    if count == 1:
        return first
    return (first + 1 + (shift + k) % (count - 1)) % count


def _alternating_racks(racks: dict[int, str | None]) -> list[int]:
    """The brokers one rack at a time, in rack order, each rack's in id order: r1, r2, r3, r1, …"""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker in sorted(racks):
        by_rack[racks[broker]].append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged = []
    while len(arranged) < len(racks):
        for queue in queues:
            if len(arranged) < len(racks) and queue:
                arranged.append(queue.pop(0))
    return arranged
