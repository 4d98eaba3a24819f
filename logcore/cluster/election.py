"""The controller's decisions about one partition, as pure functions of what ZooKeeper holds: its
replicas (preferred leader first), its state (leader, epoch, ISR) and the live brokers
(docs/cluster.md, "Controller").

- A new partition is led by its first live replica, with its live replicas in sync.
- A partition whose leader is gone is led by the first replica, in assignment order, that is alive
  and in the ISR: it holds every acknowledged write. With none, it stays leaderless and keeps its
  last ISR, so that replica leads again when it comes back; unless unclean leader election is on,
  which takes any live replica and accepts losing what only the ISR had.
- A follower that is gone leaves the ISR.
Every change raises the leader epoch (as Kafka's ZooKeeper controller did), which fences requests
made against the old state.
"""

from __future__ import annotations

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
