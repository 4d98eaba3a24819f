"""Keys and values of `__transaction_state` records, in Kafka's byte layout
(transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json).

    TransactionLogKey v0    version:int16=0  transactional_id:string
    TransactionLogValue v0  version:int16=0  producer_id:int64  producer_epoch:int16
                            transaction_timeout_ms:int32  status:int8
                            partitions:[topic:string  partition_ids:[int32]]   (null when empty)
                            last_update_timestamp_ms:int64  start_timestamp_ms:int64

Version 1 of the value is the flexible (compact, tagged-field) form of the same fields, with tagged
fields PreviousProducerId (tag 0, int64), NextProducerId (tag 1, int64) and ClientTransactionVersion
(tag 2, int16). As Kafka does, v1 is written for a transaction of transactions v2 (KIP-890: the
epoch bumped at each commit or abort, a new producer id when the epochs run out), v0 otherwise;
both are read. A null value is a tombstone (the transactional id expired).

The partition of a transactional id is abs(javaHash(id)) % partitions, as for consumer groups.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from .offsets_codec import partition_for

TRANSACTION_TOPIC = "__transaction_state"

__all__ = ["TRANSACTION_TOPIC", "TxnState", "TxnLogValue", "CorruptTxnRecord", "decode_key", "decode_value",
           "encode_key", "encode_value", "partition_for"]


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, numbered as its log records store it."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit", ...)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> "TxnState | None":
        return next((s for s in cls if s.kafka_name == name), None)


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1  # the producer id a transaction of transactions v2 hands over at its end
    client_transaction_version: int = 0


class CorruptTxnRecord(ValueError):
    """A `__transaction_state` record that follows no known schema."""


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return struct.pack(">hh", 0, len(data)) + data


def encode_value(value: TxnLogValue | None) -> bytes | None:
    if value is None:
        return None
    flexible = value.client_transaction_version >= 2
    out = bytearray(struct.pack(">hqhib", 1 if flexible else 0, value.producer_id, value.producer_epoch,
                                value.timeout_ms, value.state))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _length(len(by_topic), ">i", flexible)
    for topic, partitions in by_topic.items():
        name = topic.encode()
        out += _length(len(name), ">h", flexible) + name + _length(len(partitions), ">i", flexible)
        out += struct.pack(f">{len(partitions)}i", *partitions)
        if flexible:
            out += b"\x00"  # no tagged fields in a partitions entry
    out += struct.pack(">qq", value.last_update_ms, value.start_ms)
    if flexible:
        tags = [(0, struct.pack(">q", value.previous_producer_id)), (1, struct.pack(">q", value.next_producer_id)),
                (2, struct.pack(">h", value.client_transaction_version))]
        tags = [(tag, data) for tag, data in tags if data != _TAG_DEFAULTS[tag]]
        out += _uvarint(len(tags)) + b"".join(_uvarint(tag) + _uvarint(len(data)) + data for tag, data in tags)
    return bytes(out)


_TAG_DEFAULTS = {0: struct.pack(">q", -1), 1: struct.pack(">q", -1), 2: struct.pack(">h", 0)}


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(n: int, legacy_fmt: str, flexible: bool) -> bytes:
    """An array or string length: compact (n+1 as uvarint) when flexible."""
    return _uvarint(n + 1) if flexible else struct.pack(legacy_fmt, n)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data, self.pos, self.flexible = data, 0, flexible

    def unpack(self, fmt: str):
        try:
            values = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as exc:
            raise CorruptTxnRecord(f"record ends early at byte {self.pos}") from exc
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.unpack(">B")
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def length(self, legacy_fmt: str) -> int:
        """An array or string length: compact (n+1 as uvarint) when flexible; -1 means null."""
        return self.uvarint() - 1 if self.flexible else self.unpack(legacy_fmt)

    def string(self) -> str:
        n = self.length(">h")
        if n < 0:
            raise CorruptTxnRecord("null string where a name was expected")
        raw = self.unpack(f">{n}s")
        return raw.decode()

    def tags(self) -> dict[int, bytes]:
        """The tagged fields that follow (none before the flexible versions), by tag."""
        found = {}
        for _ in range(self.uvarint() if self.flexible else 0):
            tag = self.uvarint()
            found[tag] = self.unpack(f">{self.uvarint()}s")
        return found


def decode_key(data: bytes) -> str:
    r = _Reader(data)
    version = r.unpack(">h")
    if version != 0:
        raise CorruptTxnRecord(f"unknown TransactionLogKey version {version}")
    return r.string()


def decode_value(data: bytes | None) -> TxnLogValue | None:
    if data is None:
        return None
    version = _Reader(data).unpack(">h")
    if version not in (0, 1):
        raise CorruptTxnRecord(f"unknown TransactionLogValue version {version}")
    r = _Reader(data, flexible=version >= 1)
    r.pos = 2
    producer_id, epoch, timeout_ms, status = r.unpack(">qhib")
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptTxnRecord(f"unknown transaction status {status}") from None
    partitions = set()
    for _ in range(max(r.length(">i"), 0)):
        topic = r.string()
        for _ in range(max(r.length(">i"), 0)):
            partitions.add((topic, r.unpack(">i")))
        r.tags()
    last_update_ms, start_ms = r.unpack(">qq")
    tags = {**_TAG_DEFAULTS, **r.tags()}
    try:
        (previous,), (following,), (version,) = (struct.unpack(">q", tags[0]), struct.unpack(">q", tags[1]),
                                                 struct.unpack(">h", tags[2]))
    except struct.error as exc:
        raise CorruptTxnRecord(f"a tagged field of a TransactionLogValue has the wrong size: {exc}") from None
    return TxnLogValue(producer_id, epoch, timeout_ms, state, frozenset(partitions), last_update_ms, start_ms,
                       previous, following, version)
