"""The share-partitions' durable state in `__share_group_state` (KIP-932's share coordinator, on this
broker): each change to a share-partition's start offset or record states is written as one
ShareSnapshot record (logcore/protocol/share_state_records.py) before it is answered, and replayed
on start. The topic is compacted: the latest snapshot of each share-partition is its state.

A broker alone keeps every share-partition; in a cluster, share groups are not served yet
(docs/groups.md). Event loop only.
"""

from __future__ import annotations

import logging
import time

from ..protocol import share_state_records as codec
from ..protocol.share_state_records import SharePartitionKey
from .offsets_codec import partition_for
from .share_partition import SharePartition
from .state_topic import StateTopic

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"


class ShareStateStore:
    def __init__(self, replicas, metadata, config, create_topic) -> None:
        self.topic = StateTopic(SHARE_STATE_TOPIC, config.get("group.share.state.topic.num.partitions"),
                                config.get("offsets.topic.segment.bytes"), replicas, metadata, create_topic,
                                config.get("offsets.topic.replication.factor"))
        self.snapshot_epochs: dict[SharePartitionKey, int] = {}

    def load(self) -> dict[SharePartitionKey, SharePartition]:
        """Every share-partition as its latest snapshot left it."""
        if not self.topic.exists:
            return {}
        started = time.monotonic()
        loaded: dict[SharePartitionKey, SharePartition] = {}

        def apply(key: bytes, value: bytes | None) -> None:
            k, v = codec.decode_key(key), codec.decode_value(value)
            if v is None:
                loaded.pop(k, None)
                self.snapshot_epochs.pop(k, None)
                return
            loaded[k] = SharePartition.restore(v.start_offset, v.state_epoch, [
                (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches])
            self.snapshot_epochs[k] = v.snapshot_epoch

        records = self.topic.replay(apply)
        log.info("loaded %d share-partition(s) from %d %s record(s) in %.2fs", len(loaded), records,
                 SHARE_STATE_TOPIC, time.monotonic() - started)
        return loaded

    def write(self, key: SharePartitionKey, partition: SharePartition | None) -> None:
        """Append the share-partition's snapshot (None: its tombstone). Raises the log's BrokerError."""
        epoch = self.snapshot_epochs.get(key, -1) + 1
        value = None if partition is None else codec.snapshot_value(epoch, partition.state_epoch, partition.start_offset,
                                                                   partition.state_batches())
        self.topic.append(self._partition(key), [(codec.encode_key(key), codec.encode_value(value))])
        if partition is None:
            self.snapshot_epochs.pop(key, None)
        else:
            self.snapshot_epochs[key] = epoch

    def _partition(self, key: SharePartitionKey) -> int:
        """Kafka's share coordinator key: "group:topic id:partition"."""
        return partition_for(f"{key.group}:{key.topic_id}:{key.partition}", self.topic.partitions)
