"""Whether to snapshot: policy only, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cdc.errors import PositionLostError
from cdc.offsets import Offset


@dataclass(frozen=True, slots=True)
class Decision:
    snapshot_data: bool      # read table rows as `op: r` events
    snapshot_schema: bool    # read the structure and reset the schema history
    resume: bool = False     # continue an unfinished data snapshot from its last chunk
    stream: bool = True      # follow the binlog afterwards


class Snapshotter:
    """Modes: initial (data once, then stream), initial_only (data once, no streaming: decided like
    initial), when_needed (also when the stored position is gone), no_data (structure only, then
    stream from the current position), always (every start)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def decide(self, offset: Offset | None, position_available: bool) -> Decision:
        if self.mode == "initial_only":
            if offset is not None and offset.snapshot is None:
                return Decision(False, False, stream=False)     # done before: nothing left to do
            return replace(Snapshotter("initial").decide(offset, position_available), stream=False)
        if self.mode == "always":
            return Decision(True, True)
        if offset is None:
            return Decision(self.mode != "no_data", True)
        if offset.snapshot is not None:
            if not position_available:
                return Decision(self.mode != "no_data", True)
            return Decision(True, False, resume=True)
        if position_available:
            return Decision(False, False)
        if self.mode == "when_needed":
            return Decision(True, True)
        raise PositionLostError(
            f"the stored binlog position {offset.position} is no longer on the server (purged or reset); "
            "set snapshot: when_needed to take a new snapshot, or delete the stored offset")
