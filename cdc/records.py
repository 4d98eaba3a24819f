"""What the source hands the runtime: batches of records, each batch with the offset to store with it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One Kafka record. Not frozen: one is made per row change, and frozen dataclasses are slow to build."""

    topic: str
    key: bytes | None
    value: bytes | None      # None = tombstone
    partition: int


@dataclass(frozen=True, slots=True)
class Batch:
    """One MySQL transaction (or a bounded slice of a large one, or one snapshot chunk) and the source
    offset after it. Write `records` and `offset` in one Kafka transaction, in order."""

    records: list[Record] = field(default_factory=list)
    offset: dict = field(default_factory=dict)
