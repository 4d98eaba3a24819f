"""Keys and values of `__consumer_offsets` records, in Kafka's own byte layout.

kio has no schemas for these record types, so this codec follows Kafka's JSON definitions
(group-coordinator/src/main/resources/common/message/*.json). All are non-flexible, big-endian:
strings are int16 length + UTF-8 (-1 for null), bytes are int32 length + data, arrays int32 count.

    OffsetCommitKey v1     version:int16=1  group:string  topic:string  partition:int32
    OffsetCommitValue v3   version:int16=3  offset:int64  leader_epoch:int32  metadata:string
                           commit_timestamp:int64
    GroupMetadataKey v2    version:int16=2  group:string
    GroupMetadataValue v3  version:int16=3  protocol_type:string  generation:int32
                           protocol:string?  leader:string?  current_state_timestamp:int64
                           members:[member_id:string  group_instance_id:string?  client_id:string
                                    client_host:string  rebalance_timeout:int32  session_timeout:int32
                                    subscription:bytes  assignment:bytes]

The key's version tells the record type: 0 and 1 are offset commits, 2 is group metadata, 3 to 8
and 16 are the records of KIP-848 consumer groups (logcore/protocol/consumer_group_records.py), 10 to 14
those of KIP-932 share groups (logcore/protocol/share_group_records.py). A null
value is a tombstone (offset deleted, group deleted). Older value versions are read too, so a log
written by Kafka itself loads.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field

from ..protocol import consumer_group_records as consumer
from ..protocol import share_group_records as share
from ..protocol.consumer_group_records import ConsumerGroupKey, MemberKey, RegexKey
from ..protocol.share_group_records import ShareGroupKey, ShareMemberKey

OFFSETS_TOPIC = "__consumer_offsets"


@functools.lru_cache(maxsize=8192)  # every request of a group or transactional id asks for its partition
def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# -- writing -----------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def int16(self, v: int) -> "_Writer":
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> "_Writer":
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> "_Writer":
        self.buf += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> "_Writer":
        if v is None:
            return self.int16(-1)
        data = v.encode()
        self.int16(len(data))
        self.buf += data
        return self

    def bytes_(self, v: bytes) -> "_Writer":
        self.int32(len(v))
        self.buf += v
        return self


Key = OffsetKey | GroupKey | ConsumerGroupKey | MemberKey | RegexKey | ShareGroupKey | ShareMemberKey


def encode_key(key: Key) -> bytes:
    if isinstance(key, (ConsumerGroupKey, MemberKey, RegexKey)):
        return consumer.encode_key(key)
    if isinstance(key, (ShareGroupKey, ShareMemberKey)):
        return share.encode_key(key)
    if isinstance(key, OffsetKey):
        return bytes(_Writer().int16(1).string(key.group).string(key.topic).int32(key.partition).buf)
    return bytes(_Writer().int16(2).string(key.group).buf)


def encode_value(value) -> bytes | None:
    """An OffsetValue, GroupValue or consumer group record value; None (a tombstone) as is."""
    if value is None:
        return None
    if isinstance(value, (share.ShareMemberMetadataValue, share.ShareGroupMetadataValue,
                          share.ShareCurrentAssignmentValue)):
        return share.encode_value(value)
    if not isinstance(value, (OffsetValue, GroupValue)):
        return consumer.encode_value(value)  # (the consumer groups' values, and the two share groups reuse)
    if isinstance(value, OffsetValue):
        w = _Writer().int16(3).int64(value.offset).int32(value.leader_epoch).string(value.metadata)
        return bytes(w.int64(value.commit_timestamp).buf)
    w = _Writer().int16(3).string(value.protocol_type).int32(value.generation).string(value.protocol)
    w.string(value.leader).int64(value.current_state_timestamp).int32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout).int32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.buf)


# -- reading -----------------------------------------------------------------------------------


class CorruptOffsetsRecord(ValueError):
    """A `__consumer_offsets` record that does not follow any known key/value schema."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: str):
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as exc:
            raise CorruptOffsetsRecord(f"record ends early at byte {self.pos}") from exc
        self.pos += struct.calcsize(fmt)
        return value

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def _raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CorruptOffsetsRecord(f"field of {n} bytes runs past the record at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._raw(n).decode()

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n < 0 else self._raw(n)


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.int32())
    if version == 2:
        return GroupKey(r.string() or "")
    codec = consumer if version in consumer.CONSUMER_KEY_VERSIONS else share if version in share.SHARE_KEY_VERSIONS \
        else None
    if codec is not None:
        try:
            return codec.decode_key(version, data)
        except ValueError as exc:
            raise CorruptOffsetsRecord(str(exc)) from exc
    raise CorruptOffsetsRecord(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise CorruptOffsetsRecord(f"unknown OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_timestamp = r.int64()
    if version == 1:
        r.int64()  # expire timestamp: retention is the broker's decision since Kafka 2.1
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise CorruptOffsetsRecord(f"unknown GroupMetadataValue version {version}")
    protocol_type, generation, protocol, leader = r.string() or "", r.int32(), r.string(), r.string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.int32()):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(MemberValue(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                   session_timeout, r.bytes_(), r.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def decode(key: bytes, value: bytes | None) -> tuple[Key, object]:
    """One `__consumer_offsets` record as (key, value); value None is a tombstone."""
    k = decode_key(key)
    if value is None:
        return k, None
    if isinstance(k, (ConsumerGroupKey, MemberKey, RegexKey, ShareGroupKey, ShareMemberKey)):
        codec = consumer if isinstance(k, (ConsumerGroupKey, MemberKey, RegexKey)) else share
        try:
            return k, codec.decode_value(k.version, value)
        except ValueError as exc:
            raise CorruptOffsetsRecord(str(exc)) from exc
    return k, decode_offset_value(value) if isinstance(k, OffsetKey) else decode_group_value(value)
