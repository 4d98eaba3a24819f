"""The initial snapshot: a policy (snapshotter) and the steps that run it (source)."""

from cdc.snapshot.snapshotter import Decision, Snapshotter
from cdc.snapshot.source import SnapshotSource

__all__ = ["Snapshotter", "Decision", "SnapshotSource"]
