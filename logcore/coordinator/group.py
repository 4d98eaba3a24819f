"""One consumer group: Kafka's classic group state machine, its members and its committed offsets.

States and their allowed predecessors (Kafka's GroupState):

    Empty                ← PreparingRebalance                  no members; offsets may remain
    PreparingRebalance   ← Empty, Stable, CompletingRebalance  collecting JoinGroups
    CompletingRebalance  ← PreparingRebalance                  joined; waiting for the leader's SyncGroup
    Stable               ← CompletingRebalance                 assignment handed out
    Dead                 ← any                                 deleted; answers COORDINATOR_NOT_AVAILABLE

Mutated only by the GroupCoordinator, on the event loop. The broker stays neutral about
assignment: it picks the protocol all members support (by vote) and relays opaque bytes.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import Counter
from dataclasses import dataclass, field

from ..protocol.consumer_protocol import decode_subscription
from .offsets_codec import GroupValue, MemberValue, OffsetValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS = {
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: set(_S),
}


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    deadline: float = 0.0  # time.monotonic() at which the session expires without a heartbeat
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def heartbeat(self) -> None:
        self.deadline = time.monotonic() + self.session_timeout_ms / 1000

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, float] = field(default_factory=dict)  # member id → monotonic deadline
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id → member id
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    state_timestamp_ms: int | None = None  # when the state last changed; None for offset-only groups
    rebalance_deadline: float = 0.0  # PreparingRebalance completes at this monotonic time regardless
    join_not_before: float | None = None  # initial rebalance delay: no completion before this

    # -- state ---------------------------------------------------------------------------------

    def transition(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} → {target.value}")
        self.state = target
        self.state_timestamp_ms = int(time.time() * 1000)

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members -------------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, instance_id: str, new_member_id: str) -> Member:
        """Give a restarted static member a new member id, keeping its assignment (no rebalance)."""
        old = self.members.pop(self.static_members[instance_id])
        member = Member(new_member_id, instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                        old.session_timeout_ms, old.protocols, old.assignment)
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old.member_id:
            self.leader_id = new_member_id
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(FencedByNewMember(old.member_id))
        return member

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that every member supports."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: (votes[name], name))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); None when unknown."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= parse_subscription(member.metadata(self.protocol))
        return topics

    # -- records -------------------------------------------------------------------------------

    def to_value(self, assignments: dict[str, bytes], generation: int | None = None,
                 protocol: str | None = None, leader: str | None = None) -> GroupValue:
        """The group as a GroupMetadataValue, with `assignments` (member id → bytes)."""
        protocol = self.protocol if protocol is None else protocol
        members = tuple(
            MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, m.metadata(protocol), assignments.get(m.member_id, b""))
            for m in self.members.values())
        return GroupValue(self.protocol_type or "", self.generation if generation is None else generation,
                          protocol, self.leader_id if leader is None else leader, int(time.time() * 1000), members)


class FencedByNewMember(Exception):
    """A static member's old incarnation, replaced by a new member id with the same instance id."""


def parse_subscription(metadata: bytes) -> set[str]:
    """Topic names of a ConsumerProtocolSubscription; none when it cannot be read."""
    try:
        return set(decode_subscription(metadata).topics)
    except ValueError:
        return set()
