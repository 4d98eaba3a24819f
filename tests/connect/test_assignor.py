"""The leader's incremental cooperative assignment (connect.assignor): its rules on plain values."""

from connect.assignor import Assignment, LeaderMemory, MemberState, assign


def member(*owned, url="http://w") -> MemberState:
    return MemberState(url, 0, frozenset(owned))


UNITS = {("a", None), ("a", 0), ("a", 1), ("b", None), ("b", 0)}


def test_new_units_go_to_the_least_loaded_and_owners_keep_theirs():
    result, delay = assign({"m1": member(("a", 0)), "m2": member()}, UNITS, LeaderMemory(), 0.0, 0)
    assert delay == 0
    assert ("a", 0) in result["m1"]  # kept where it runs: no stop, no start
    assert result["m1"] | result["m2"] == UNITS and not result["m1"] & result["m2"]
    tasks = [sum(u[1] is not None for u in result[m]) for m in ("m1", "m2")]
    connectors = [sum(u[1] is None for u in result[m]) for m in ("m1", "m2")]
    assert sorted(tasks) == [1, 2] and connectors == [1, 1]


def test_a_joining_member_gets_its_share_only_after_the_owner_let_go():
    memory = LeaderMemory()
    everything = member(*UNITS)
    first, _ = assign({"m1": everything, "m2": member()}, UNITS, memory, 0.0, 0)
    revoked = UNITS - first["m1"]
    assert revoked and first["m2"] == frozenset()  # nothing moves while its owner still runs it
    second, _ = assign({"m1": member(*first["m1"]), "m2": member()}, UNITS, memory, 1.0, 0)
    assert second["m2"] == revoked and second["m1"] == first["m1"]


def test_deleted_units_are_revoked_and_a_unit_claimed_twice_stays_with_one():
    result, _ = assign({"m1": member(("gone", 0), ("a", 0)), "m2": member(("a", 0))}, {("a", 0)}, LeaderMemory(), 0, 0)
    assert result == {"m1": frozenset({("a", 0)}), "m2": frozenset()}


def test_a_departed_members_units_wait_out_the_delay_then_move():
    memory = LeaderMemory()
    assign({"m1": member(("a", 0)), "m2": member(("b", 0))}, {("a", 0), ("b", 0)}, memory, 0.0, 0)
    held, delay = assign({"m2": member(("b", 0))}, {("a", 0), ("b", 0)}, memory, 10.0, 5000)
    assert held == {"m2": frozenset({("b", 0)})} and 4000 < delay <= 5001
    still, delay = assign({"m2": member(("b", 0))}, {("a", 0), ("b", 0)}, memory, 14.0, 5000)
    assert still == held and 0 < delay <= 1001
    moved, delay = assign({"m2": member(("b", 0))}, {("a", 0), ("b", 0)}, memory, 15.1, 5000)
    assert moved == {"m2": frozenset({("a", 0), ("b", 0)})} and delay == 0


def test_without_a_delay_a_departed_members_units_move_at_once():
    memory = LeaderMemory()
    assign({"m1": member(("a", 0)), "m2": member()}, {("a", 0)}, memory, 0.0, 0)
    result, delay = assign({"m2": member()}, {("a", 0)}, memory, 0.1, 0)
    assert result == {"m2": frozenset({("a", 0)})} and delay == 0


def test_metadata_and_assignments_round_trip():
    state = MemberState("http://h:1", 42, frozenset({("a", None), ("a", 3)}))
    assert MemberState.decode(state.encode()) == state
    sent = Assignment("http://leader", 7, frozenset({("b", 0)}), 250)
    assert Assignment.decode(sent.encode(), generation=9) == Assignment("http://leader", 7, frozenset({("b", 0)}),
                                                                       250, 9)
