"""The controller's decisions about one partition, as pure functions of what ZooKeeper holds: its
replicas (preferred leader first), its state (leader, epoch, ISR) and the live brokers
(docs/cluster.md, "Controller").

- A new partition is led by its first live replica, with its live replicas in sync.
- A partition whose leader is gone is led by the first replica, in assignment order, that is alive
  and in the ISR: it holds every acknowledged write. With none, it stays leaderless and keeps its
  last ISR, so that replica leads again when it comes back; unless unclean leader election is on,
  which takes any live replica and accepts losing what only the ISR had.
- A follower that is gone leaves the ISR.
- Asked for (ElectLeaders, and the controller's automatic rebalance): a preferred election gives the
  leadership back to the first replica when it is alive and in sync; an unclean one elects a leader
  for a partition that has none, from outside the ISR if it must.
Every change raises the leader epoch (as Kafka's ZooKeeper controller did), which fences requests
made against the old state.
"""

from __future__ import annotations

from ..protocol.errors import ElectionNotNeeded, EligibleLeadersNotAvailable, PreferredLeaderNotAvailable
from .zk_layout import PartitionState

NO_LEADER = -1


def initial_state(replicas: list[int], live: set[int], controller_epoch: int) -> PartitionState:
    in_sync = [b for b in replicas if b in live]
    return PartitionState(in_sync[0] if in_sync else NO_LEADER, 0, tuple(in_sync), controller_epoch)


def next_state(replicas: list[int], state: PartitionState, live: set[int], controller_epoch: int,
               unclean: bool = False) -> PartitionState | None:
    """The state after brokers came or went, or None if it stays as it is."""
    live_isr = [b for b in state.isr if b in live]
    if state.leader in live:
        if len(live_isr) == len(state.isr):
            return None
        return PartitionState(state.leader, state.leader_epoch + 1, tuple(live_isr), controller_epoch)
    candidates = [b for b in replicas if b in live_isr]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, tuple(live_isr), controller_epoch)
    if unclean and (survivors := [b for b in replicas if b in live]):
        return PartitionState(survivors[0], state.leader_epoch + 1, (survivors[0],), controller_epoch)
    if state.leader == NO_LEADER:
        return None  # (still waiting for an ISR replica to come back)
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


def preferred_election(replicas: list[int], state: PartitionState, live: set[int],
                       controller_epoch: int) -> PartitionState:
    """The first replica leads again; raises why it cannot or need not."""
    preferred = replicas[0]
    if state.leader == preferred:
        raise ElectionNotNeeded(f"its preferred replica, broker {preferred}, already leads it")
    if preferred not in live or preferred not in state.isr:
        raise PreferredLeaderNotAvailable(f"its preferred replica, broker {preferred}, is "
                                          f"{'not alive' if preferred not in live else 'not in sync'}")
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)


def unclean_election(replicas: list[int], state: PartitionState, live: set[int],
                     controller_epoch: int) -> PartitionState:
    """A leader for a partition that has none: an in-sync replica if one is alive, else any live
    replica (what only the ISR held is then lost); raises why it cannot or need not."""
    if state.leader in live:
        raise ElectionNotNeeded(f"broker {state.leader} leads it")
    live_isr = [b for b in replicas if b in live and b in state.isr]
    survivors = live_isr or [b for b in replicas if b in live]
    if not survivors:
        raise EligibleLeadersNotAvailable(f"none of its replicas {replicas} is alive")
    return PartitionState(survivors[0], state.leader_epoch + 1, tuple(live_isr) or (survivors[0],), controller_epoch)
