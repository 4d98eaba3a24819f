"""Who runs what: the group leader's incremental cooperative assignment (Kafka's KIP-415).

Units of work are connectors and their tasks. A rebalance never stops the world: every member keeps
running what it owns, except units that were deleted or that must move for balance. A unit that
moves is *revoked* in one round (its owner stops it, then joins again at once) and assigned in the
next, so two workers never run it at the same time. Units nobody owns (new ones, and those of a
worker that left) are given to the least loaded members. When a worker leaves, its units may wait up
to `scheduled.rebalance.max.delay.ms` for it to come back before they are given to the others.

Pure functions over plain values, so the rules can be tested without a cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

Unit = tuple[str, int | None]
"""(connector name, task id), or (connector name, None) for the connector itself."""


@dataclass(frozen=True)
class MemberState:
    """What a member tells the leader when it joins."""

    url: str
    """Its REST address, where requests for it are forwarded."""
    config_offset: int
    """How far it has read the config topic."""
    owned: frozenset[Unit] = frozenset()

    def encode(self) -> bytes:
        return json.dumps({"url": self.url, "config_offset": self.config_offset,
                           "owned": sorted(self.owned, key=unit_order)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> MemberState:
        raw = json.loads(data)
        return cls(raw["url"], raw["config_offset"], frozenset((name, task) for name, task in raw["owned"]))


@dataclass(frozen=True)
class Assignment:
    """What the leader tells a member: run exactly `units` (stop what it owns outside them)."""

    leader_url: str
    config_offset: int
    """Read the config topic at least this far before acting on the assignment."""
    units: frozenset[Unit]
    delay_ms: int = 0
    """Units of a departed worker are being held: join again after this long."""
    generation: int = -1

    def encode(self) -> bytes:
        return json.dumps({"leader_url": self.leader_url, "config_offset": self.config_offset,
                           "units": sorted(self.units, key=unit_order), "delay_ms": self.delay_ms}).encode()

    @classmethod
    def decode(cls, data: bytes, generation: int) -> Assignment:
        raw = json.loads(data)
        return cls(raw["leader_url"], raw["config_offset"],
                   frozenset((name, task) for name, task in raw["units"]), raw["delay_ms"], generation)


@dataclass
class LeaderMemory:
    """What a leader remembers between the rounds it leads: who was given what, and since when units
    of departed members have been waiting."""

    owners: dict[Unit, str] = field(default_factory=dict)
    lost_at: dict[Unit, float] = field(default_factory=dict)


def assign(members: dict[str, MemberState], units: set[Unit], memory: LeaderMemory, now: float,
           max_delay_ms: int) -> tuple[dict[str, frozenset[Unit]], int]:
    """Each member's units for the next generation, and how long held units still wait (ms, 0 if none).

    Rules, in order: a member keeps what it owns that still exists; no member keeps more than its fair
    share of connectors or of tasks (the surplus is revoked, given out next round); a unit another
    member still owns is never given out; units of departed members wait out the delay; the rest go to
    the least loaded members."""
    ids = sorted(members)
    keep: dict[str, set[Unit]] = {}
    claimed: set[Unit] = set()
    for m in ids:  # a unit two members claim (one lost its membership unnoticed) stays with the first
        keep[m] = set(members[m].owned & units) - claimed
        claimed |= keep[m]
    owned_now = {u for m in ids for u in members[m].owned}
    for is_task in (False, True):
        kind = {u for u in units if (u[1] is not None) == is_task}
        share = -(-len(kind) // len(ids))  # ceil: nobody runs more than this many
        for m in ids:
            mine = sorted((u for u in keep[m] if u in kind), key=unit_order)
            keep[m] -= set(mine[share:])

    free = sorted(units - owned_now, key=unit_order)
    wait_ms = 0
    given_out = []
    for unit in free:
        previous = memory.owners.get(unit)
        if max_delay_ms > 0 and previous is not None and previous not in members:
            since = memory.lost_at.setdefault(unit, now)
            left = since + max_delay_ms / 1000 - now
            if left > 0:
                wait_ms = max(wait_ms, int(left * 1000) + 1)
                continue
        given_out.append(unit)
    for unit in given_out:
        is_task = unit[1] is not None
        m = min(ids, key=lambda m: (sum((u[1] is not None) == is_task for u in keep[m]), len(keep[m]), m))
        keep[m].add(unit)
        memory.lost_at.pop(unit, None)

    memory.owners = {u: m for m in ids for u in keep[m]} | {
        u: memory.owners[u] for u in memory.lost_at if u in memory.owners}
    memory.lost_at = {u: t for u, t in memory.lost_at.items() if u in units}
    return {m: frozenset(keep[m]) for m in ids}, wait_ms


def unit_order(unit: Unit) -> tuple[str, int]:
    """Connectors before their tasks, tasks by id."""
    return unit[0], -1 if unit[1] is None else unit[1]


def unit_label(unit: Unit) -> str:
    """`shop` for a connector, `shop-0` for its task 0 (the task's label in logs)."""
    return unit[0] if unit[1] is None else f"{unit[0]}-{unit[1]}"
