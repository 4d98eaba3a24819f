"""Share groups' pure parts, with no broker: one share-partition's rules (acquiring whole new
batches, locks, acknowledgements all or nothing, the start offset, gaps, the delivery limit), its
snapshot's round trip through the `__share_group_state` codec, the simple assignor, share sessions'
epochs, and the share group records through the `__consumer_offsets` codec and replay."""

import uuid

import pytest

from logcore.coordinator.share_assignor import simple_assign
from logcore.coordinator.share_partition import RecordState, SharePartition
from logcore.coordinator.share_state import Snapshot, counts_deliveries_only
from logcore.protocol import share_state_records as codec
from logcore.protocol.errors import InvalidRecordState
from logcore.storage.batch import CONTROL, BatchHeader

LIMIT = 3


def batch(base: int, count: int, control: bool = False) -> BatchHeader:
    return BatchHeader(base, 0, 0, 2, 0, CONTROL if control else 0, count - 1, 0, 0, -1, -1, -1, count)


def test_new_batches_are_acquired_whole_and_released_records_one_by_one():
    sp = SharePartition(0)
    acquired, chosen = sp.acquire([batch(0, 5), batch(5, 5)], "a", max_records=3, deadline=10, max_in_flight=100)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in acquired] == [(0, 4, 1)] and chosen == [0]
    sp.acknowledge("a", 1, 2, [2], LIMIT)  # RELEASE 1-2
    assert sp.next_fetch_offset() == 1
    acquired, chosen = sp.acquire([batch(0, 5), batch(5, 5)], "b", max_records=10, deadline=10, max_in_flight=100)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in acquired] == [(1, 2, 2), (5, 9, 1)]
    assert chosen == [0, 1]


def test_acknowledging_is_all_or_nothing_and_only_by_the_holder():
    sp = SharePartition(0)
    sp.acquire([batch(0, 4)], "a", 10, 10, 100)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("b", 0, 0, [1], LIMIT)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 2, 5, [1], LIMIT)  # 4 and 5 were never handed out
    assert [sp.record(o) for o in range(4)] == [(RecordState.ACQUIRED, 1, "a")] * 4


def test_the_start_offset_moves_past_what_is_done_and_over_control_batches():
    sp = SharePartition(0)
    sp.acquire([batch(0, 2), batch(2, 1, control=True), batch(3, 2)], "a", 10, 10, 100)
    sp.acknowledge("a", 1, 1, [1], LIMIT)
    assert sp.start_offset == 0
    sp.acknowledge("a", 0, 0, [3], LIMIT)  # REJECT: archived
    assert sp.start_offset == 3  # (2 is the control batch's)
    sp.acknowledge("a", 3, 4, [1, 1], LIMIT)
    assert (sp.start_offset, sp.end_offset) == (5, 5)


def test_expired_locks_come_back_until_the_delivery_limit_then_are_archived():
    sp = SharePartition(0)
    for delivery in range(1, LIMIT + 1):
        acquired, _ = sp.acquire([batch(0, 2)], "a", 10, deadline=delivery, max_in_flight=100)
        assert [r.delivery_count for r in acquired] == [delivery]
        assert sp.expire_locks(now=delivery, delivery_limit=LIMIT)
    assert sp.start_offset == 2 and sp.next_fetch_offset() == 2


def test_the_snapshot_round_trips_through_the_record_codec():
    sp = SharePartition(10)
    sp.acquire([batch(10, 6)], "a", 10, 10, 100)
    sp.acknowledge("a", 11, 12, [1], LIMIT)
    sp.acknowledge("a", 13, 13, [2], LIMIT)
    key = codec.SharePartitionKey("g", uuid.uuid4(), 3)
    value = codec.decode_value(codec.encode_value(codec.snapshot_value(7, 0, 4, sp.start_offset, sp.state_batches())))
    assert codec.decode_key(codec.encode_key(key)) == key and (value.snapshot_epoch, value.leader_epoch) == (7, 4)
    restored = SharePartition.restore(value.start_offset, value.state_epoch, [
        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in value.state_batches])
    assert restored.start_offset == 10 and restored.end_offset == 16
    # acquired before the restart: available again, its delivery counted
    assert [restored.record(o) for o in range(10, 16)] == [
        (RecordState.AVAILABLE, 1, None), (RecordState.ACKNOWLEDGED, 1, None), (RecordState.ACKNOWLEDGED, 1, None),
        (RecordState.AVAILABLE, 1, None), (RecordState.AVAILABLE, 1, None), (RecordState.AVAILABLE, 1, None)]
    assert value.state_batches[0].last_offset == 10 and len(value.state_batches) == 3  # (runs, not offsets)


def test_only_a_snapshot_that_counts_deliveries_may_skip_the_share_coordinators_replication():
    sp = SharePartition(0)
    def written() -> tuple:  # (the snapshot as a leader sends it, and the coordinator's copy of it)
        snapshot = Snapshot(sp.state_epoch, 1, sp.start_offset, tuple(sp.state_batches()))
        return snapshot, codec.snapshot_value(0, snapshot.state_epoch, 1, snapshot.start_offset,
                                              list(snapshot.batches))

    snapshot, value = written()
    assert not counts_deliveries_only(None, snapshot)  # (the first write of a share-partition)
    sp.acquire([batch(0, 4)], "a", 10, 10, 100)
    after, after_value = written()
    assert counts_deliveries_only(value, after)  # a new batch acquired
    sp.acknowledge("a", 0, 1, [2], LIMIT)  # RELEASE: written as before (available, counted)
    released, released_value = written()
    assert counts_deliveries_only(after_value, released)
    sp.acquire([batch(0, 4)], "b", 10, 10, 100)  # redelivered: counts rise
    assert counts_deliveries_only(released_value, written()[0])
    sp.acknowledge("b", 0, 0, [1], LIMIT)  # ACCEPT: the start offset moves
    assert not counts_deliveries_only(released_value, written()[0])
    sp.acknowledge("b", 1, 1, [3], LIMIT)
    sp.acknowledge("a", 3, 3, [1], LIMIT)  # ACCEPT behind the start offset: a state changes
    accepted, accepted_value = written()
    assert sp.start_offset == 2 and not counts_deliveries_only(
        codec.snapshot_value(0, 0, 1, 2, [(2, 3, 0, 1)]), accepted)
    sp.reset(2)  # an admin's reset: a new state epoch
    assert not counts_deliveries_only(accepted_value, written()[0])
    assert not counts_deliveries_only(accepted_value, None)


def test_a_reset_into_a_batch_hands_out_the_rest_of_it():
    sp = SharePartition(0)
    sp.reset(3)
    acquired, chosen = sp.acquire([batch(0, 5), batch(5, 2)], "a", 100, 10, 100)
    assert [(r.first_offset, r.last_offset) for r in acquired] == [(3, 4), (5, 6)] and chosen == [0, 1]


def test_the_simple_assignor_shares_partitions_when_members_outnumber_them():
    topic = uuid.uuid4()
    three = simple_assign({m: frozenset({topic}) for m in "abc"}, {topic: 2})
    assert [three[m][topic] for m in "abc"] == [{0}, {1}, {0}]
    two = simple_assign({m: frozenset({topic}) for m in "ab"}, {topic: 5})
    assert two["a"][topic] == {0, 2, 4} and two["b"][topic] == {1, 3}


def test_share_group_records_round_trip_through_the_offsets_codec_and_replay():
    from logcore.coordinator import share_group
    from logcore.coordinator.offsets_codec import decode, encode_key, encode_value
    topic = uuid.uuid4()
    member = share_group.ShareMember("m1", client_id="c", client_host="/h", subscribed_topic_names=("t",))
    out = [share_group.metadata_record("g", member), share_group.epoch_record("g", 3),
           *share_group.assignment_records("g", {"m1": member}, {"m1": {topic: frozenset({0, 2})}}, 3)]
    groups: dict = {}
    for key, value in out:
        share_group.replay(groups, *decode(encode_key(key), encode_value(value)))
    g = groups["g"]
    assert (g.group_epoch, g.assignment_epoch, g.members["m1"].member_epoch) == (3, 3, 3)
    assert g.members["m1"].assigned == {topic: {0, 2}} and g.members["m1"].subscribed_topic_names == ("t",)
    for key, value in [*share_group.removal_records("g", "m1"), *share_group.end_records("g")]:
        share_group.replay(groups, *decode(encode_key(key), encode_value(value)))
    assert groups == {}


def test_key_15_is_kafkas_bytes_and_follows_initialization_and_deletion():
    from logcore.coordinator import share_group
    from logcore.coordinator.offsets_codec import decode, encode_key, encode_value
    a, bb, c = (uuid.UUID(int=(hi << 64) | lo) for hi, lo in ((1, 2), (3, 4), (5, 6)))
    state = share_group.StatePartitions({a: frozenset({0, 1})}, {bb: frozenset({2})}, frozenset({c}),
                                        {a: "a", bb: "bb", c: "c"})
    key, value = share_group.state_partitions_record("g", state)
    # Kafka 4.1.1's ShareGroupStatePartitionMetadataKey/Value of the same content (its generated classes)
    assert encode_key(key).hex() == "000f000167"
    assert encode_value(value).hex() == (
        "0000020000000000000001000000000000000202610300000000000000010002000000000000000300000000000000040362620200"
        "00000200020000000000000005000000000000000602630000")
    groups: dict = {}
    share_group.replay(groups, *decode(encode_key(key), encode_value(value)))
    assert groups["g"].state_partitions == state
    wanted = {a: ("a", 3), bb: ("bb", 2)}  # (topic a grew to three partitions, bb has two)
    more = state.to_initialize(wanted)
    assert more.initializing == {a: {0, 1, 2}, bb: {0, 1}} and more.initialized == {bb: {2}}
    done = more.initialized_now(more.initializing, {})
    assert done.to_initialize(wanted) is None and done.known() == {(a, 0), (a, 1), (a, 2), (bb, 0), (bb, 1), (bb, 2)}
    deleting = done.deleting_topic(a, "a")
    assert deleting.known() == {(bb, 0), (bb, 1), (bb, 2)} and a in deleting.deleting
    assert deleting.forgetting({a, c}) == share_group.StatePartitions({}, {bb: frozenset({0, 1, 2})}, frozenset(),
                                                                      {bb: "bb"})
    share_group.replay(groups, key, None)
    assert groups["g"].state_partitions == share_group.StatePartitions()


def test_share_sessions_follow_kip_932s_epochs_and_rotate_their_partitions():
    from logcore.coordinator.share_sessions import ShareSessions
    from logcore.protocol.errors import InvalidRequest, InvalidShareSessionEpoch, ShareSessionNotFound
    topic = uuid.uuid4()
    sessions = ShareSessions()
    with pytest.raises(ShareSessionNotFound):
        sessions.update("g", "m", 1)
    with pytest.raises(InvalidRequest):
        sessions.update("g", "m", 0, acknowledging=True)
    session = sessions.update("g", "m", 0, [(topic, 0), (topic, 1), (topic, 2)])
    assert [session.fetch_order()[0][1] for _ in range(3)] == [1, 2, 0]
    with pytest.raises(InvalidShareSessionEpoch):
        sessions.update("g", "m", 2)
    sessions.update("g", "m", 1, forgotten=[(topic, 1)])
    assert list(sessions.update("g", "m", 2).partitions) == [(topic, 0), (topic, 2)]
    assert sessions.update("g", "m", -1) is None
    with pytest.raises(ShareSessionNotFound):
        sessions.update("g", "m", 3)
