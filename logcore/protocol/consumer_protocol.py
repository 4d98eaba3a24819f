"""The classic protocol's embedded consumer protocol (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, kio's classes): what a classic consumer puts in JoinGroup's protocol
metadata and reads from SyncGroup's assignment. The broker reads and writes them only where a
KIP-848 group serves classic members (an online upgrade); a classic group relays them untouched.

Each is an int16 version followed by that version's struct (non-flexible)."""

import io
import struct
from dataclasses import dataclass

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.static.primitive import i32

from .codec import _reader, _writer

SUBSCRIPTIONS = {0: SubscriptionV0, 1: SubscriptionV1, 2: SubscriptionV2, 3: SubscriptionV3}


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]  # topic name → partitions (v1+; empty before)
    rack_id: str | None


def decode_subscription(data: bytes) -> Subscription:
    """ValueError when `data` is not a ConsumerProtocolSubscription binlake can read."""
    if len(data) < 2:
        raise ValueError("a consumer protocol subscription needs at least its version")
    (version,) = struct.unpack_from(">h", data)
    cls = SUBSCRIPTIONS.get(min(version, 3))  # (a newer version starts with v3's fields, as Kafka reads it)
    if version < 0 or cls is None:
        raise ValueError(f"unknown consumer protocol subscription version {version}")
    try:
        value, _size = _reader(cls)(memoryview(data), 2)
    except Exception as exc:  # kio's reader raises what its parser meets
        raise ValueError(f"undecodable consumer protocol subscription v{version}: {exc}") from exc
    owned = {tp.topic: frozenset(tp.partitions) for tp in getattr(value, "owned_partitions", ()) if tp.partitions}
    return Subscription(tuple(value.topics), owned, getattr(value, "rack_id", None))


def encode_assignment(partitions: dict[str, frozenset[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 (every classic client reads it) of topic name → partitions."""
    value = ConsumerProtocolAssignment(assigned_partitions=tuple(
        TopicPartition(topic=topic, partitions=tuple(i32(p) for p in sorted(ps)))
        for topic, ps in sorted(partitions.items()) if ps), user_data=None)
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    _writer(ConsumerProtocolAssignment)(buf, value)
    return buf.getvalue()


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """Topic name → partitions of a ConsumerProtocolAssignment (every version has v0's fields first);
    empty bytes (a member that got nothing) is no partitions. ValueError when it cannot be read."""
    if not data:
        return {}
    (version,) = struct.unpack_from(">h", data)
    if version < 0:
        raise ValueError(f"unknown consumer protocol assignment version {version}")
    try:
        value, _size = _reader(ConsumerProtocolAssignment)(memoryview(data), 2)
    except Exception as exc:  # kio's reader raises what its parser meets
        raise ValueError(f"undecodable consumer protocol assignment v{version}: {exc}") from exc
    return {tp.topic: frozenset(tp.partitions) for tp in value.assigned_partitions if tp.partitions}
