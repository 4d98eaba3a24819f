"""Where a new topic's replicas go (logcore/cluster/assignment.py): Kafka's spread, with and
without racks, and clear refusals."""

from __future__ import annotations

import collections
import random

import pytest

from logcore.cluster.assignment import assign_replicas
from logcore.cluster.view import Node
from logcore.protocol.errors import InvalidReplicaAssignment, InvalidReplicationFactor


def nodes(*racks: str | None) -> list[Node]:
    return [Node(i, "127.0.0.1", 9090 + i, rack) for i, rack in enumerate(racks)]


def test_kafkas_worked_example_without_racks():
    # Kafka's documentation of the assignment: 5 brokers, 10 partitions, 3 replicas, start 0.
    #   broker-0  broker-1  broker-2  broker-3  broker-4
    #   p0        p1        p2        p3        p4       (1st replica)
    #   p5        p6        p7        p8        p9       (1st replica)
    #   p4        p0        p1        p2        p3       (2nd replica)
    #   p8        p9        p5        p6        p7       (2nd replica)
    #   p3        p4        p0        p1        p2       (3rd replica)
    #   p7        p8        p9        p5        p6       (3rd replica)
    assignment = assign_replicas(nodes(*[None] * 5), 10, 3, start=0)
    holders = collections.defaultdict(list)  # (broker, replica number) -> partitions
    for partition, replicas in assignment.items():
        for number, broker in enumerate(replicas):
            holders[broker, number].append(partition)
    assert [holders[b, 0] for b in range(5)] == [[0, 5], [1, 6], [2, 7], [3, 8], [4, 9]]
    assert [holders[b, 1] for b in range(5)] == [[4, 8], [0, 9], [1, 5], [2, 6], [3, 7]]
    assert [holders[b, 2] for b in range(5)] == [[3, 7], [4, 8], [0, 9], [1, 5], [2, 6]]


@pytest.mark.parametrize("seed", range(20))
def test_leaders_and_replicas_spread_evenly(seed):
    assignment = assign_replicas(nodes(*[None] * 4), 12, 3, rng=random.Random(seed))
    assert sorted(assignment) == list(range(12))
    assert all(len(set(replicas)) == 3 for replicas in assignment.values())
    leaders = collections.Counter(replicas[0] for replicas in assignment.values())
    held = collections.Counter(b for replicas in assignment.values() for b in replicas)
    assert set(leaders.values()) == {3} and set(held.values()) == {9}


@pytest.mark.parametrize("seed", range(20))
def test_with_racks_a_partition_spans_as_many_racks_as_it_can(seed):
    brokers = nodes("r1", "r3", "r3", "r2", "r2", "r1")
    racks = {n.node_id: n.rack for n in brokers}
    for replication_factor in (2, 3, 4):
        assignment = assign_replicas(brokers, 12, replication_factor, rng=random.Random(seed))
        for replicas in assignment.values():
            assert len(set(replicas)) == replication_factor
            assert len({racks[b] for b in replicas}) == min(replication_factor, 3), replicas
        leaders = collections.Counter(replicas[0] for replicas in assignment.values())
        assert set(leaders.values()) == {2}


def test_new_partitions_continue_the_spread():
    brokers = nodes(*[None] * 3)
    whole = assign_replicas(brokers, 6, 2, start=1)
    assert {**assign_replicas(brokers, 4, 2, start=1), **assign_replicas(brokers, 2, 2, 4, start=1)} == whole


def test_refusals_say_what_is_wrong():
    with pytest.raises(InvalidReplicationFactor, match="replication factor 3 larger than available brokers 2"):
        assign_replicas(nodes(None, None), 1, 3)
    with pytest.raises(InvalidReplicaAssignment, match=r"brokers \[1\] have no broker.rack while others do"):
        assign_replicas(nodes("r1", None), 1, 1)
