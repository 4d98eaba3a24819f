"""The pure parts of KIP-848 consumer groups: the assignors, one member's reconciliation, and the
records' byte layout (Kafka's)."""

import uuid

from logcore.coordinator.assignors import range_, uniform
from logcore.coordinator.consumer_group import ConsumerMember, MemberState, reconcile
from logcore.protocol.consumer_group_records import (CurrentAssignmentValue, GroupMetadataValue, MemberKey,
                                                     RegexKey, RegexValue, TopicPartitions, decode_key, decode_value,
                                                     encode_key, encode_value, i8, i32, i64)

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def partitions_of(assignment) -> list[tuple[uuid.UUID, int]]:
    return sorted((t, p) for member in assignment.values() for t, ps in member.items() for p in ps)


def counts(assignment) -> list[int]:
    return sorted(sum(map(len, member.values())) for member in assignment.values())


def test_uniform_assigns_every_partition_once_balanced_and_keeps_what_it_can():
    members = {m: frozenset({A, B}) for m in ("m1", "m2")}
    first = uniform(members, {A: 4, B: 3}, {})
    assert partitions_of(first) == [(A, p) for p in range(4)] + [(B, p) for p in range(3)]
    assert counts(first) == [3, 4]
    grown = uniform({**members, "m3": frozenset({A, B})}, {A: 4, B: 3}, first)
    assert partitions_of(grown) == partitions_of(first) and counts(grown) == [2, 2, 3]
    for member in ("m1", "m2"):  # sticky: the old members only lose partitions, never trade them
        for topic, ps in grown[member].items():
            assert ps <= first[member][topic]


def test_uniform_respects_different_subscriptions():
    assignment = uniform({"a": frozenset({A}), "ab": frozenset({A, B})}, {A: 2, B: 4}, {})
    assert set(assignment["a"]) == {A} and partitions_of(assignment) == [(A, 0), (A, 1)] + [(B, p) for p in range(4)]
    assert counts(assignment) == [2, 4]  # (the best balance the subscriptions allow)


def test_range_gives_each_member_the_same_partition_numbers_of_each_topic():
    assignment = range_({"m1": frozenset({A, B}), "m2": frozenset({A, B})}, {A: 3, B: 3}, {})
    assert assignment["m1"] == {A: frozenset({0, 1}), B: frozenset({0, 1})}
    assert assignment["m2"] == {A: frozenset({2}), B: frozenset({2})}


def test_a_member_revokes_before_it_moves_on_and_waits_for_partitions_others_still_own():
    member = ConsumerMember("m", member_epoch=3, state=MemberState.STABLE, assigned={A: frozenset({0, 1, 2})})
    owners = {(A, 3): 2}  # partition 3 is still another member's
    epoch_of = lambda t, p: owners.get((t, p), -1)  # noqa: E731
    target = {A: frozenset({0, 3})}
    step = reconcile(member, 5, target, {A: frozenset({0, 1, 2})}, epoch_of)
    assert (step.state, step.member_epoch, step.assigned, step.pending_revocation) == (
        MemberState.UNREVOKED_PARTITIONS, 3, {A: frozenset({0})}, {A: frozenset({1, 2})})
    assert reconcile(step, 5, target, {A: frozenset({0, 1})}, epoch_of) == step  # still owns 1: nothing moves
    step = reconcile(step, 5, target, {A: frozenset({0})}, epoch_of)
    assert (step.state, step.member_epoch, step.assigned) == (MemberState.UNRELEASED_PARTITIONS, 5, {A: frozenset({0})})
    owners.clear()
    step = reconcile(step, 5, target, {A: frozenset({0})}, epoch_of)
    assert (step.state, step.member_epoch, step.assigned) == (MemberState.STABLE, 5, target)


def test_records_are_kafkas_bytes():
    assert encode_value(GroupMetadataValue(epoch=i32(5))).hex() == "0000" "00000005" "00"
    key = MemberKey(8, "g", "m")
    assert encode_key(key).hex() == "0008" "0001" + b"g".hex() + "0001" + b"m".hex()
    assert decode_key(8, encode_key(key)) == key
    value = CurrentAssignmentValue(member_epoch=i32(7), previous_member_epoch=i32(6), state=i8(1),
                                   assigned_partitions=(TopicPartitions(topic_id=A, partitions=(i32(0), i32(2))),),
                                   partitions_pending_revocation=())
    # version, epochs, state, compact array of 1: uuid + compact array of 2 ints + no tags, empty array, no tags
    assert encode_value(value).hex() == ("0000" "00000007" "00000006" "01" "02" + A.hex + "03" "00000000" "00000002"
                                         "00" "01" "00")
    assert decode_value(8, encode_value(value)) == value
    regex = RegexKey(16, "g", "rx-.*")  # key 16, a regex's resolution: its topics, version, timestamp
    assert encode_key(regex).hex() == "0010" "0001" + b"g".hex() + "0005" + b"rx-.*".hex()
    assert decode_key(16, encode_key(regex)) == regex
    resolved = RegexValue(topics=("rx-eu",), version=i64(-1), timestamp=i64(1000))
    assert encode_value(resolved).hex() == "0000" "02" "06" + b"rx-eu".hex() + "ffffffffffffffff" "00000000000003e8" "00"
    assert decode_value(16, encode_value(resolved)) == resolved
