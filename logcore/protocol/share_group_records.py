"""The `__consumer_offsets` records of KIP-932 share groups, in the layout of Kafka's own
(group-coordinator's ShareGroup*.json), declared in kio's style and written by kio's serializers as
consumer_group_records.py does for KIP-848 groups. Keys are an int16 version (the record type)
followed by the strings; values an int16 0 followed by the flexible struct:

    key 10  ShareGroupMemberMetadataKey(GroupId, MemberId)         value: RackId, ClientId, ClientHost, SubscribedTopicNames
    key 11  ShareGroupMetadataKey(GroupId)                         value: Epoch, MetadataHash (written 0)
    key 12  ShareGroupTargetAssignmentMetadataKey(GroupId)         value: AssignmentEpoch
    key 13  ShareGroupTargetAssignmentMemberKey(GroupId, MemberId) value: its target partitions
    key 14  ShareGroupCurrentMemberAssignmentKey(GroupId, MemberId) value: MemberEpoch, PreviousMemberEpoch, State, AssignedPartitions

    key 15  ShareGroupStatePartitionMetadataKey(GroupId)           value: InitializingTopics, InitializedTopics
                                                                          (id, name, partitions), DeletingTopics (id, name)

Key 15 is Kafka 4.1's layout (the CreateTimestamp of later versions is not in it). A null value is a
tombstone.
"""

# (no `from __future__ import annotations`: kio reads the field types at runtime)

import struct
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from .consumer_group_records import (TargetAssignmentMemberValue, TargetAssignmentMetadataValue, TopicPartitions,
                                     _string, decode_struct, encode_struct, key_strings)

SHARE_MEMBER_METADATA, SHARE_GROUP_EPOCH, SHARE_TARGET_METADATA, SHARE_TARGET_MEMBER, SHARE_CURRENT_ASSIGNMENT = \
    10, 11, 12, 13, 14
SHARE_STATE_PARTITIONS = 15
SHARE_KEY_VERSIONS = frozenset(range(10, 16))
_MEMBER_KEYS = (SHARE_MEMBER_METADATA, SHARE_TARGET_MEMBER, SHARE_CURRENT_ASSIGNMENT)


class _Flexible:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareMemberMetadataValue(_Flexible):
    rack_id: str | None = field(metadata={"kafka_type": "string"})
    client_id: str = field(metadata={"kafka_type": "string"})
    client_host: str = field(metadata={"kafka_type": "string"})
    subscribed_topic_names: tuple[str, ...] = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupMetadataValue(_Flexible):
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    metadata_hash: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCurrentAssignmentValue(_Flexible):
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    previous_member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    state: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))  # (STABLE: nothing to revoke in a share group)
    assigned_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitionsInfo(_Flexible):
    __type__: ClassVar = EntityType.nested
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo(_Flexible):
    __type__: ClassVar = EntityType.nested
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareStatePartitionsValue(_Flexible):
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


VALUE_CLASSES = {SHARE_MEMBER_METADATA: ShareMemberMetadataValue, SHARE_GROUP_EPOCH: ShareGroupMetadataValue,
                 SHARE_TARGET_METADATA: TargetAssignmentMetadataValue, SHARE_TARGET_MEMBER: TargetAssignmentMemberValue,
                 SHARE_CURRENT_ASSIGNMENT: ShareCurrentAssignmentValue, SHARE_STATE_PARTITIONS: ShareStatePartitionsValue}


@dataclass(frozen=True)
class ShareGroupKey:
    """Keys 11, 12 and 15: one per group."""
    version: int
    group: str


@dataclass(frozen=True)
class ShareMemberKey:
    """Keys 10, 13 and 14: one per member."""
    version: int
    group: str
    member_id: str


def encode_key(key: ShareGroupKey | ShareMemberKey) -> bytes:
    out = struct.pack(">h", key.version) + _string(key.group)
    return out + _string(key.member_id) if isinstance(key, ShareMemberKey) else out


def decode_key(version: int, data: bytes) -> ShareGroupKey | ShareMemberKey:
    if version in _MEMBER_KEYS:
        return ShareMemberKey(version, *key_strings(version, data, 2))
    return ShareGroupKey(version, *key_strings(version, data, 1))


def encode_value(value) -> bytes:
    return encode_struct(value)


def decode_value(key_version: int, data: bytes):
    """ValueError when it is not a value logcore knows."""
    return decode_struct(VALUE_CLASSES[key_version], data, f"share group record key version {key_version}")
