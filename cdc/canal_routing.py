"""Canal's MQ routing rules, as Canal 1.1.x applies them (MQMessageUtils, CanalKafkaProducer): which topic a
table's messages go to, how many partitions that topic is hashed over, and which partition each row lands on.

    canal.mq.topic                    the default topic
    canal.mq.dynamicTopic             `topic:regex` or `regex` items (`,` or `;` between them); a bare
                                      `db.table` or `db` item routes to a topic of that name, lowercased
    canal.mq.partition                the partition when no hash is configured
    canal.mq.partitionsNum            the modulus of the hash
    canal.mq.partitionHash            `db.table:col1^col2`, `regex:$pk$` (the primary key), or `db.table`
                                      (the table name's hash: one partition per table)
    canal.mq.dynamicTopicPartitionNum `topic:N` items: a topic's own modulus
    canal.mq.database.hash            mix the database name's hash into a row's hash

Names with none of `*?+|(){}[]\\$^` compare as plain names, case-insensitively; the others are regexes that must
match the whole (lowercased) name. Hashes are Java's `String.hashCode`, combined with XOR, and folded with
`Math.abs` before and after the remainder, as Canal does, so a row lands on the partition Canal would put it on.
With a dynamic topic, every topic name has its dots replaced by underscores (Canal's producer does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_WILDCARD = frozenset("*?+|(){}[]\\$^")


class CanalMq(BaseModel):
    """The routing keys of one Canal destination, as written in its instance.properties (see the module's doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1)
    dynamic_topic: str = ""
    partition: int = Field(default=0, ge=0)
    partitions_num: int | None = Field(default=None, ge=1)
    partition_hash: str = ""
    dynamic_topic_partition_num: str = ""
    database_hash: bool = True
    flat_message_rows: Literal["event", "row"] = "event"
    """event: Canal's batching, every row of a binlog event (of one partition) in one message's `data`;
    row: one message per row."""
    flat_message: bool = True
    """canal.mq.flatMessage: FlatMessages (JSON); false: Canal's protobuf Messages (cdc/formats/canal_mq_messages.py)."""
    transaction_entries: bool = True
    """With flat_message false: the Messages hold TRANSACTIONBEGIN and TRANSACTIONEND entries where no dynamic topic
    or partition hash drops them (canal.instance.filter.transaction.entry false)."""

    @model_validator(mode="after")
    def _rules_compile(self) -> "CanalMq":
        try:
            Router(self)
        except re.error as exc:
            raise ValueError(f"{exc.pattern!r} is not a regular expression: {exc}") from None
        return self


def java_hash(text: str) -> int:
    """Java's `String.hashCode`: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(hash_code: int, partitions: int) -> int:
    """Canal's `Math.abs(Math.abs(hash) % n)` in Java's ints: `Math.abs(MIN_VALUE)` stays negative and `%`
    truncates, so the outer abs gives 2**31 % n for it, which is Python's `abs(hash) % n` for every hash."""
    return abs(hash_code) % partitions


def _items(rules: str) -> list[str]:
    """Canal's `StringUtils.split(replace(rules, ",", ";"), ";")`: empty items dropped, no trimming."""
    return [item for item in rules.replace(",", ";").split(";") if item]


def _is_wildcard(name: str) -> bool:
    return any(c in _WILDCARD for c in name)


class _Name:
    """A plain name (case-insensitive equality) or a regex (a whole-name match of the lowercased name)."""

    __slots__ = ("plain", "regex")

    def __init__(self, text: str) -> None:
        self.plain = None if _is_wildcard(text) else text.lower()
        self.regex = re.compile(text, re.IGNORECASE) if self.plain is None else None

    def matches(self, name: str) -> bool:
        if self.plain is not None:
            return self.plain == name.lower()
        return self.regex.fullmatch(name.lower()) is not None


@dataclass(frozen=True, slots=True)
class HashMode:
    """How a table's rows are spread: by the table name's hash, by the primary key, or by named columns."""

    table: bool = False
    primary_key: bool = False
    columns: tuple[str, ...] = ()


class Router:
    """The routing of one destination. Pure: tables in, topics and partitions out; results cached per table."""

    def __init__(self, settings: CanalMq) -> None:
        self.settings = settings
        self._dynamic = [self._dynamic_item(item) for item in _items(settings.dynamic_topic)]
        self._hashes = [self._hash_item(item) for item in _items(settings.partition_hash)]
        self._topic_partitions = [(_Name(t), int(n)) for t, _, n in
                                  (item.rpartition(":") for item in _items(settings.dynamic_topic_partition_num))
                                  if t and n.isdigit()]
        self.topic = lru_cache(maxsize=None)(self._topic)
        self.hash_mode = lru_cache(maxsize=None)(self._hash_mode)

    # --- topics ------------------------------------------------------------------------------
    @staticmethod
    def _dynamic_item(item: str) -> tuple[str | None, tuple[_Name, bool]]:
        """(the item's topic, or None: the matched name; the pattern, and whether it is a table pattern)."""
        colon = item.find(":")
        topic, pattern = (item[:colon].strip(), item[colon + 1:].strip()) if colon > -1 else (None, item)
        return topic, (_Name(pattern), not _is_wildcard(pattern) or "\\." in pattern)

    def _match(self, name: str) -> str | None:
        """Canal's matchTopics: the first item whose pattern matches `name` gives the topic."""
        for topic, (pattern, table_pattern) in self._dynamic:
            if pattern.plain is not None:
                hit = pattern.matches(name)
            else:
                hit = table_pattern == ("." in name) and pattern.matches(name)
            if hit:
                return topic if topic is not None else name.lower()
        return None

    def _topic(self, db: str, table: str) -> str:
        if not self._dynamic:
            return self.settings.topic
        topic = None
        if db and table:
            topic = self._match(f"{db}.{table}") or self._match(db)
        return (topic or self.settings.topic).replace(".", "_")

    def partitions(self, topic: str) -> int:
        """The modulus of `topic`'s hash: its dynamicTopicPartitionNum, else partitionsNum, else 1."""
        for name, count in self._topic_partitions:
            if name.matches(topic):
                return count
        return self.settings.partitions_num or 1

    def partitions_needed(self, topic: str) -> int:
        """How many partitions `topic` must have for every message routed to it."""
        return self.partitions(topic) if self._hashes else self.settings.partition + 1

    # --- partitions --------------------------------------------------------------------------
    @staticmethod
    def _hash_item(item: str) -> tuple[_Name, HashMode]:
        colon = item.rfind(":")
        if colon > 0:
            columns = item[colon + 1:]
            mode = HashMode(primary_key=True) if columns.lower() == "$pk$" else \
                HashMode(columns=tuple(c for c in columns.split("^") if c))
            return _Name(item[:colon]), mode
        return _Name(item), HashMode(table=True)

    def _hash_mode(self, db: str, table: str) -> HashMode | None:
        name = f"{db}.{table}"
        for pattern, mode in self._hashes:
            if pattern.matches(name):
                return mode
        return None

    @property
    def hashed(self) -> bool:
        return bool(self._hashes)

    def split(self, db: str, table: str, topic: str, primary_key: list[str] | None,
              rows: list[dict]) -> list[tuple[int, list[int]]]:
        """Canal's messagePartition of one flat message: (partition, indexes of its rows), by partition.
        `rows` are the message's `data` (values as text)."""
        if not self._hashes:
            return [(self.settings.partition, list(range(len(rows))))]
        mode = self.hash_mode(db, table)
        if mode is None or not rows:
            return [(0, list(range(len(rows))))]
        n = self.partitions(topic)
        if mode.table:
            return [(java_partition(java_hash(table), n), list(range(len(rows))))]
        columns = (primary_key or ()) if mode.primary_key else mode.columns
        seed = java_hash(db) if self.settings.database_hash else 0
        groups: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            h = seed
            for column in columns:
                value = row.get(column)
                h ^= java_hash(value if value is not None else "")
            groups.setdefault(java_partition(h, n), []).append(i)
        return sorted(groups.items())


@lru_cache(maxsize=16)
def router_for(settings: CanalMq) -> Router:
    """The router of `settings`, built once (settings are frozen, so they key a cache)."""
    return Router(settings)
