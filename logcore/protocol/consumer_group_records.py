"""The `__consumer_offsets` records of KIP-848 consumer groups, in Kafka's own byte layout.

kio generates the client protocol, not the group coordinator's record schemas, so these are declared
here in kio's style from Kafka's JSON definitions
(group-coordinator/src/main/resources/common/message/ConsumerGroup*.json) and written and read by
kio's own serializers. A record is a key and a value, each an int16 version followed by the struct;
the key's version says which record it is. Keys are non-flexible, values flexible (compact strings
and arrays, tagged fields):

    key 3  ConsumerGroupMetadataKey(GroupId)                  value: Epoch (the group epoch)
    key 4  ConsumerGroupPartitionMetadataKey(GroupId)         value: the subscribed topics' metadata
    key 5  ConsumerGroupMemberMetadataKey(GroupId, MemberId)  value: the member's subscription
    key 6  ConsumerGroupTargetAssignmentMetadataKey(GroupId)  value: AssignmentEpoch
    key 7  ConsumerGroupTargetAssignmentMemberKey(GroupId, MemberId)   value: its target partitions
    key 8  ConsumerGroupCurrentMemberAssignmentKey(GroupId, MemberId)  value: its epochs, state, partitions
    key 16 ConsumerGroupRegularExpressionKey(GroupId, RegularExpression)  value: the topics it resolved to

A null value is a tombstone. Key 4 is read and dropped (Kafka 4.1 stopped writing it; the
coordinator recomputes subscribed topics' metadata from the cluster's).
"""

# (no `from __future__ import annotations`: kio reads the field types at runtime)

import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64  # (re-exported: the coordinator builds values with them)

from .codec import _reader, _writer  # (kio's serializers, cached per class)
from .varint import uvarint

__all__ = ["i8", "i32", "i64", "RegexKey", "RegexValue", "ClassicMemberMetadata", "ClassicProtocol", "CONSUMER_KEY_VERSIONS", "ConsumerGroupKey", "MemberKey", "TopicPartitions", "GroupMetadataValue",
           "MemberMetadataValue", "TargetAssignmentMetadataValue", "TargetAssignmentMemberValue",
           "CurrentAssignmentValue", "PartitionMetadataValue", "encode_key", "decode_key", "encode_value",
           "decode_value", "MemberMetadata"]


class _Flexible:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitions(_Flexible):
    __type__: ClassVar = EntityType.nested
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue(_Flexible):
    epoch: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicProtocol(_Flexible):
    __type__: ClassVar = EntityType.nested
    name: str = field(metadata={"kafka_type": "string"})
    metadata: bytes = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMemberMetadata(_Flexible):
    """A member that speaks the classic protocol in a consumer group (an online upgrade)."""
    __type__: ClassVar = EntityType.nested
    session_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadataValue(_Flexible):
    instance_id: str | None = field(metadata={"kafka_type": "string"})
    rack_id: str | None = field(metadata={"kafka_type": "string"})
    client_id: str = field(metadata={"kafka_type": "string"})
    client_host: str = field(metadata={"kafka_type": "string"})
    subscribed_topic_names: tuple[str, ...] = field(metadata={"kafka_type": "string"})
    subscribed_topic_regex: str | None = field(metadata={"kafka_type": "string"})
    rebalance_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    server_assignor: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetAssignmentMetadataValue(_Flexible):
    assignment_epoch: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetAssignmentMemberValue(_Flexible):
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CurrentAssignmentValue(_Flexible):
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    previous_member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    state: i8 = field(metadata={"kafka_type": "int8"})
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RegexValue(_Flexible):
    """What a regex subscription resolved to: the matching topics that the member whose heartbeat
    resolved it may describe. `version` is Kafka's metadata image version; logcore has none (-1)."""
    topics: tuple[str, ...] = field(metadata={"kafka_type": "string"})
    version: i64 = field(metadata={"kafka_type": "int64"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata(_Flexible):
    __type__: ClassVar = EntityType.nested
    partition: i32 = field(metadata={"kafka_type": "int32"})
    racks: tuple[str, ...] = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata(_Flexible):
    __type__: ClassVar = EntityType.nested
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})
    num_partitions: i32 = field(metadata={"kafka_type": "int32"})
    partition_metadata: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadataValue(_Flexible):
    topics: tuple[TopicMetadata, ...]


# -- keys --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerGroupKey:
    """Keys 3, 4 and 6: one per group."""
    version: int
    group: str


@dataclass(frozen=True)
class MemberKey:
    """Keys 5, 7 and 8: one per member."""
    version: int
    group: str
    member_id: str


@dataclass(frozen=True)
class RegexKey:
    """Key 16: one per regex some member of the group subscribes with."""
    version: int
    group: str
    regex: str


GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 4, 5, 6, 7, 8
REGEX = 16
CONSUMER_KEY_VERSIONS = frozenset((*range(3, 9), REGEX))
VALUE_CLASSES = {GROUP_EPOCH: GroupMetadataValue, PARTITION_METADATA: PartitionMetadataValue,
                 MEMBER_METADATA: MemberMetadataValue, TARGET_METADATA: TargetAssignmentMetadataValue,
                 TARGET_MEMBER: TargetAssignmentMemberValue, CURRENT_ASSIGNMENT: CurrentAssignmentValue,
                 REGEX: RegexValue}


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(key: ConsumerGroupKey | MemberKey | RegexKey) -> bytes:
    out = struct.pack(">h", key.version) + _string(key.group)
    if isinstance(key, MemberKey):
        return out + _string(key.member_id)
    return out + _string(key.regex) if isinstance(key, RegexKey) else out


def key_strings(version: int, data: bytes, count: int) -> list[str]:
    """The `count` strings of a group record key after its version (`data` is the whole key);
    ValueError when it is cut short."""
    strings, position = [], 2
    for _ in range(count):
        if position + 2 > len(data):
            raise ValueError(f"group record key version {version} ends early")
        (size,) = struct.unpack_from(">h", data, position)
        if size < 0 or position + 2 + size > len(data):
            raise ValueError(f"group record key version {version}: bad string length {size}")
        strings.append(data[position + 2:position + 2 + size].decode())
        position += 2 + size
    return strings


def decode_key(version: int, data: bytes) -> ConsumerGroupKey | MemberKey | RegexKey:
    """The key after its version (`data` is the whole key); ValueError when it is cut short."""
    if version in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT):
        return MemberKey(version, *key_strings(version, data, 2))
    if version == REGEX:
        return RegexKey(version, *key_strings(version, data, 2))
    return ConsumerGroupKey(version, *key_strings(version, data, 1))


@dataclass(frozen=True)
class MemberMetadata:
    """The value of key 5: MemberMetadataValue and its tagged field 0, ClassicMemberMetadata (kio's
    native reader cannot read an entity in a tagged field, so this module writes and reads that one)."""
    value: MemberMetadataValue
    classic: ClassicMemberMetadata | None = None


def encode_struct(value) -> bytes:
    """A group record value (a kio-style dataclass) after its version, 0."""
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    _writer(type(value))(buf, value)
    return buf.getvalue()


def decode_struct(cls: type, data: bytes, what: str):
    """A version-0 group record value of class `cls`; ValueError naming `what` when it is not one."""
    (version,) = struct.unpack_from(">h", data)
    if version != 0:
        raise ValueError(f"unknown value version {version} for {what}")
    try:
        value, _size = _reader(cls)(memoryview(data), 2)
    except Exception as exc:  # kio's reader raises what its parser meets: a short or malformed value
        raise ValueError(f"undecodable value of {what}: {exc}") from exc
    return value


def encode_value(value) -> bytes:
    """A value with its version."""
    classic = None
    if isinstance(value, MemberMetadata):
        value, classic = value.value, value.classic
    data = encode_struct(value)
    if classic is None:
        return data
    nested = io.BytesIO()
    _writer(ClassicMemberMetadata)(nested, classic)
    return data[:-1] + uvarint(1) + uvarint(0) + uvarint(len(nested.getvalue())) + nested.getvalue()


def decode_member_metadata(data: bytes) -> MemberMetadata:
    r = _FlexibleReader(data, 2)
    fields = dict(instance_id=r.string(), rack_id=r.string(), client_id=r.string() or "",
                  client_host=r.string() or "", subscribed_topic_names=tuple(r.string() or "" for _ in range(r.count())),
                  subscribed_topic_regex=r.string(), rebalance_timeout_ms=i32(r.int32()), server_assignor=r.string())
    classic = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        if tag == 0:
            classic, _size = _reader(ClassicMemberMetadata)(memoryview(data), r.position)
        r.position += size
    if r.position != len(data):
        raise ValueError(f"member metadata value: {len(data) - r.position} byte(s) after its end")
    return MemberMetadata(MemberMetadataValue(**fields), classic)


class _FlexibleReader:
    def __init__(self, data: bytes, position: int) -> None:
        self.data, self.position = data, position

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.position >= len(self.data):
                raise ValueError("member metadata value ends inside a varint")
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def count(self) -> int:
        return self.uvarint() - 1

    def string(self) -> str | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        if self.position + size > len(self.data):
            raise ValueError("member metadata value: a string runs past its end")
        text = self.data[self.position:self.position + size].decode()
        self.position += size
        return text

    def int32(self) -> int:
        if self.position + 4 > len(self.data):
            raise ValueError("member metadata value ends inside an int32")
        (value,) = struct.unpack_from(">i", self.data, self.position)
        self.position += 4
        return value


def decode_value(key_version: int, data: bytes):
    """The value of a record whose key has `key_version` (for key 5 a MemberMetadata); ValueError when
    it is not one we know."""
    what = f"consumer group record key version {key_version}"
    if key_version != MEMBER_METADATA:
        return decode_struct(VALUE_CLASSES[key_version], data, what)
    (version,) = struct.unpack_from(">h", data)
    if version != 0:
        raise ValueError(f"unknown value version {version} for {what}")
    try:
        return decode_member_metadata(data)
    except Exception as exc:  # kio's reader raises what its parser meets: a short or malformed value
        raise ValueError(f"undecodable value of {what}: {exc}") from exc
