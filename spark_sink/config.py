"""The Spark sink's YAML config (`binlake sink run CONFIG.yaml`), validated whole, every problem named.

    bootstrap_servers: 127.0.0.1:9092
    topics: [shop.shop.orders, shop.shop.customers]     # or topic_pattern: 'shop\\.shop\\..*'
    format: debezium                                     # or debezium-avro, canal
    checkpoint: /var/lib/binlake/sink-checkpoint
    trigger: {processing_time: 2s}                       # or: trigger: available_now
    schema_registry: {url: http://127.0.0.1:8081}        # debezium-avro: where the writer schemas are
    target: {delta: {path: /warehouse}}                  # or {jdbc: {url: ..., user: ..., password: ..., schema: shop}}
    mode: current                                        # or changelog | scd2
    tables: {shop.orders: sales.orders}                  # optional: source db.table -> target [db.]table
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from common import yamlfile
from common.kafka_security import KafkaSecurity
from common.schema_registry import SchemaRegistrySettings

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1000}


def duration_ms(text: str | int | float) -> int:
    """`2s`, `500ms`, `7d`, or a number of seconds, in milliseconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r} (write e.g. 500ms, 2s, 5m, 7d)")
    return int(float(match.group(1)) * _UNITS_MS[match.group(2)])


class SinkConfigError(ValueError):
    """The problems of one or more config files, every one of them, by file."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{source}: {len(found)} problem{'s' if len(found) != 1 else ''}\n"
                                   + "\n".join(f"  {p}" for p in found) for source, found in problems.items()))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaTarget(_Strict):
    path: str
    """Tables land at <path>/<db>/<table>."""
    catalog: str | None = None
    """Also register each table in the session catalog as <catalog><db>_<table> (a name prefix)."""
    optimize_every: int = Field(50, ge=0)
    """Compact each table's small files (OPTIMIZE) every this many batches that wrote to it; 0 = never."""
    type_widening: Literal["rewrite", "feature"] = "rewrite"
    """How a column widened in MySQL is widened in Delta: `rewrite` the table's files with the column
    cast, in one commit (every Delta reader opens the table), or Delta's type-widening `feature`, in
    place (readers without it, e.g. delta-rs and what builds on it, cannot open the table any more)."""


class JdbcTarget(_Strict):
    url: str
    """jdbc:postgresql://host:port/database"""
    user: str
    password: SecretStr = SecretStr("")
    schema_: str = Field("public", alias="schema")

    @field_validator("url")
    @classmethod
    def _postgres(cls, url: str) -> str:
        if not url.startswith("jdbc:postgresql://"):
            raise ValueError("only PostgreSQL is supported: jdbc:postgresql://host:port/database")
        return url

    @property
    def dsn(self) -> str:
        """The same server as a libpq connection string, for the driver's transactions."""
        rest = self.url.removeprefix("jdbc:postgresql://")
        address, _, database = rest.partition("/")
        host, _, port = address.partition(":")
        return (f"host={host} port={port or 5432} dbname={database.split('?')[0]} user={self.user} "
                f"password={self.password.get_secret_value()}")


class Target(_Strict):
    delta: DeltaTarget | None = None
    jdbc: JdbcTarget | None = None

    @model_validator(mode="after")
    def _one(self) -> "Target":
        if (self.delta is None) == (self.jdbc is None):
            raise ValueError("give exactly one of delta: {path: ...} or jdbc: {url: ..., user: ..., schema: ...}")
        return self


class Errors(_Strict):
    tolerance: Literal["none", "all"] = "none"
    """none: stop at a record that cannot be applied; all: put it in the dead-letter table and go on."""


class SinkConfig(_Strict):
    bootstrap_servers: str
    security: KafkaSecurity = KafkaSecurity()
    """TLS and SASL for reaching the brokers (common/kafka_security.py)."""
    topics: list[str] | None = None
    topic_pattern: str | None = None
    format: Literal["debezium", "debezium-avro", "canal"] = "debezium"
    schema_registry: SchemaRegistrySettings | None = None
    """debezium-avro: the schema registry the connector registers its schemas in (url, basic_auth_user,
    basic_auth_password, ca_file)."""
    schema_topic: str | None = None
    """Debezium: the connector's schema-change topic (its `name`); default: the first topic's prefix before '.'."""
    checkpoint: str
    trigger: Literal["available_now"] | dict[Literal["processing_time"], str] = {"processing_time": "2s"}
    target: Target
    mode: Literal["current", "changelog", "scd2"] = "current"
    tables: dict[str, str] = {}
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    tombstone_retention: str = "7d"
    """How long a delete's tombstone keeps a late older event from resurrecting the row."""
    errors: Errors = Errors()

    @model_validator(mode="after")
    def _check(self) -> "SinkConfig":
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("give exactly one of topics: [...] or topic_pattern: '...'")
        if self.topic_pattern is not None:
            re.compile(self.topic_pattern)
        if isinstance(self.trigger, dict):
            duration_ms(self.trigger["processing_time"])
        duration_ms(self.tombstone_retention)
        for source in self.tables:
            if source.count(".") != 1:
                raise ValueError(f"tables: {source!r} should name a source table as db.table")
        if self.format == "debezium-avro" and self.schema_registry is None:
            raise ValueError("format: debezium-avro reads each record's writer schema from the schema registry: set "
                             "schema_registry: {url: http://HOST:PORT} (the connector's)")
        if self.format != "debezium-avro" and self.schema_registry is not None:
            raise ValueError(f"schema_registry is read by format: debezium-avro only (format is {self.format}): "
                             "set format: debezium-avro for the connector's value_format: avro, or drop schema_registry")
        if self.debezium and self.resolved_schema_topic is None:
            told_from = f"topic {self.topics[0]!r}, not named <name>.<db>.<table>" if self.topics else \
                f"topic_pattern {self.topic_pattern!r}, which does not start with '<name>\\.'"
            raise ValueError(f"schema_topic: name the connector's schema-change topic (its `name`); it cannot be "
                             f"told from {told_from}")
        return self

    @property
    def debezium(self) -> bool:
        """Debezium's envelope, in JSON or Avro: the tables' structure comes from the schema-change topic."""
        return self.format in ("debezium", "debezium-avro")

    @property
    def resolved_schema_topic(self) -> str | None:
        """schema_topic, else the connector's name as its topics show it (`<name>.<db>.<table>`): the
        first topic's part before '.', or the part of topic_pattern's literal start before '\\.'."""
        if self.schema_topic:
            return self.schema_topic
        first = self.topics[0] if self.topics else literal_start(self.topic_pattern or "")
        name, dot, _ = first.partition(".")
        return name if dot and name else None

    @property
    def tombstone_retention_ms(self) -> int:
        return duration_ms(self.tombstone_retention)

    def target_name(self, table: str) -> tuple[str, str]:
        """(db, table) where source `db.table` lands."""
        db, _, name = table.partition(".")
        mapped = self.tables.get(table)
        if mapped is None:
            return db, name
        return tuple(mapped.split(".", 1)) if "." in mapped else (db, mapped)  # type: ignore[return-value]


_REGEX_SYNTAX = set(".^$*+?{}[]|()")


def literal_start(pattern: str) -> str:
    """What every topic `pattern` matches starts with: its text up to the first regex syntax, escapes
    resolved (`shop\\.shop\\..*` → `shop.shop.`); nothing for an alternation."""
    if "|" in pattern:
        return ""
    text, escaped = [], False
    for char in pattern:
        if escaped:
            if char.isalnum():  # \d, \w, ...: a class, not a literal
                break
            text.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in _REGEX_SYNTAX:
            if char in "*?{" and text:  # the character before may be absent
                text.pop()
            break
        else:
            text.append(char)
    return "".join(text)


def load_all(paths: list[str | Path]) -> list[SinkConfig]:
    """Every file's config; a SinkConfigError lists the problems of every file that has some."""
    configs, problems = [], {}
    for path in paths:
        try:
            configs.append(load(path))
        except SinkConfigError as exc:
            problems.update(exc.problems)
    if problems:
        raise SinkConfigError(problems)
    return configs


def load(path: str | Path) -> SinkConfig:
    try:
        raw = yamlfile.load(path)
    except OSError as exc:
        raise SinkConfigError({str(path): [f"cannot read the file: {exc.strerror}"]}) from None
    except yamlfile.YamlError as exc:
        raise SinkConfigError({str(path): [str(exc)]}) from None
    if not isinstance(raw, dict):
        raise SinkConfigError({str(path): ["the file must be a YAML mapping: bootstrap_servers: ..., topics: ..."]})
    return validate(raw, str(path))


def validate(raw: dict, source: str = "sink config") -> SinkConfig:
    try:
        return SinkConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        raise SinkConfigError({source: problems}) from None
