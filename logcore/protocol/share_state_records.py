"""The records of `__share_group_state`: one share-partition's durable state (KIP-932).

They are modelled on Kafka's ShareSnapshot record (share-coordinator's ShareSnapshotKey and
ShareSnapshotValue), not byte-compatible with it (its field set changed between Kafka versions),
declared here in kio's style and written by kio's serializers, as consumer_group_records.py does
for `__consumer_offsets`:

    key    int16 0 (ShareSnapshot), then GroupId (string), TopicId (uuid), Partition (int32)
    value  int16 0, then (flexible) SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
           StartOffset int64, StateBatches [FirstOffset int64, LastOffset int64,
           DeliveryState int8, DeliveryCount int16]

Every write is a whole snapshot of the share-partition (Kafka also writes ShareUpdate deltas between
snapshots; logcore does not), so the topic, compacted, keeps one record per share-partition. A null
value (tombstone) deletes the share-partition's state (DeleteShareGroupOffsets, DeleteGroups).
"""

# (no `from __future__ import annotations`: kio reads the field types at runtime)

import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from .codec import _reader, _writer

SNAPSHOT = 0  # the key version of ShareSnapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBatch:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    delivery_state: i8 = field(metadata={"kafka_type": "int8"})
    delivery_count: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    snapshot_epoch: i32 = field(metadata={"kafka_type": "int32"})
    state_epoch: i32 = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    start_offset: i64 = field(metadata={"kafka_type": "int64"})
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True)
class SharePartitionKey:
    group: str
    topic_id: uuid.UUID
    partition: int


def encode_key(key: SharePartitionKey) -> bytes:
    group = key.group.encode()
    return struct.pack(">hh", SNAPSHOT, len(group)) + group + key.topic_id.bytes + struct.pack(">i", key.partition)


def decode_key(data: bytes) -> SharePartitionKey:
    """ValueError for a key that is not a ShareSnapshot's (logcore writes no other)."""
    if len(data) < 4:
        raise ValueError("share state record key ends early")
    version, size = struct.unpack_from(">hh", data)
    if version != SNAPSHOT:
        raise ValueError(f"share state record key version {version}: logcore writes only ShareSnapshot (0)")
    if size < 0 or len(data) != 4 + size + 16 + 4:
        raise ValueError(f"share state record key of {len(data)} bytes does not fit its group id of {size}")
    group = data[4:4 + size].decode()
    topic_id = uuid.UUID(bytes=bytes(data[4 + size:20 + size]))
    (partition,) = struct.unpack_from(">i", data, 20 + size)
    return SharePartitionKey(group, topic_id, partition)


def snapshot_value(snapshot_epoch: int, state_epoch: int, leader_epoch: int, start_offset: int,
                   batches: list[tuple[int, int, int, int]]) -> ShareSnapshotValue:
    return ShareSnapshotValue(snapshot_epoch=i32(snapshot_epoch), state_epoch=i32(state_epoch),
                              leader_epoch=i32(leader_epoch),
                              start_offset=i64(start_offset),
                              state_batches=tuple(StateBatch(first_offset=i64(f), last_offset=i64(l), delivery_state=i8(s),
                                                             delivery_count=i16(c)) for f, l, s, c in batches))


def encode_value(value: ShareSnapshotValue | None) -> bytes | None:
    if value is None:
        return None
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    _writer(ShareSnapshotValue)(buf, value)
    return buf.getvalue()


def decode_value(data: bytes | None) -> ShareSnapshotValue | None:
    if data is None:
        return None
    (version,) = struct.unpack_from(">h", data)
    if version != 0:
        raise ValueError(f"unknown ShareSnapshot value version {version}")
    try:
        value, _size = _reader(ShareSnapshotValue)(memoryview(data), 2)
    except Exception as exc:  # kio's reader raises what its parser meets
        raise ValueError(f"undecodable ShareSnapshot value: {exc}") from exc
    return value
