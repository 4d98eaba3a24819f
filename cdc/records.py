"""What the source hands the runtime: batches of records, each batch with the offset to store with it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One Kafka record. Not frozen: one is made per row change, and frozen dataclasses are slow to build.
    Has the attributes of connect's SourceRecord, so the runtime writes it as it is."""

    topic: str
    key: bytes | None
    value: bytes | None      # None = tombstone
    partition: int
    timestamp_ms: int | None = None   # None: the producer's clock
    headers: tuple = ()


@dataclass(frozen=True, slots=True)
class Batch:
    """One MySQL transaction (or a bounded slice of a large one, or one snapshot chunk) and the source
    offset after it. Write `records` and `offset` in one Kafka transaction, in order.

    `ends_transaction` is False for every slice of a large transaction but its last: keep the Kafka
    transaction open across them, so consumers see the MySQL transaction whole."""

    records: list[Record] = field(default_factory=list)
    offset: dict = field(default_factory=dict)
    ends_transaction: bool = True
