"""The Spark sink's YAML config (`binlake sink run CONFIG.yaml`), validated whole, every problem named.

    bootstrap_servers: 127.0.0.1:9092
    topics: [shop.shop.orders, shop.shop.customers]     # or topic_pattern: 'shop\\.shop\\..*'
    format: debezium                                     # or canal
    checkpoint: /var/lib/binlake/sink-checkpoint
    trigger: {processing_time: 2s}                       # or: trigger: available_now
    target: {delta: {path: /warehouse}}                  # or {jdbc: {url: ..., user: ..., password: ..., schema: shop}}
    mode: current                                        # or changelog | scd2
    tables: {shop.orders: sales.orders}                  # optional: source db.table -> target [db.]table
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from binlake import yamlfile
from binlake.kafka_security import KafkaSecurity

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1000}


def duration_ms(text: str | int | float) -> int:
    """`2s`, `500ms`, `7d`, or a number of seconds, in milliseconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r} (write e.g. 500ms, 2s, 5m, 7d)")
    return int(float(match.group(1)) * _UNITS_MS[match.group(2)])


class SinkConfigError(ValueError):
    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}\n"
                         + "\n".join(f"  {p}" for p in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaTarget(_Strict):
    path: str
    """Tables land at <path>/<db>/<table>."""
    catalog: str | None = None
    """Also register each table in the session catalog as <catalog><db>_<table> (a name prefix)."""
    optimize_every: int = Field(50, ge=0)
    """Compact each table's small files (OPTIMIZE) every this many batches that wrote to it; 0 = never."""


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
    """TLS and SASL for reaching the brokers (binlake/kafka_security.py)."""
    topics: list[str] | None = None
    topic_pattern: str | None = None
    format: Literal["debezium", "canal"] = "debezium"
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
        if self.format == "debezium" and self.resolved_schema_topic is None:
            raise ValueError("schema_topic: name the connector's schema-change topic (its `name`)")
        return self

    @property
    def resolved_schema_topic(self) -> str | None:
        if self.schema_topic:
            return self.schema_topic
        return self.topics[0].split(".")[0] if self.topics else None

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


def load(path: str | Path) -> SinkConfig:
    try:
        raw = yamlfile.load(path)
    except OSError as exc:
        raise SinkConfigError(str(path), [f"cannot read the file: {exc.strerror}"]) from None
    except yamlfile.YamlError as exc:
        raise SinkConfigError(str(path), [str(exc)]) from None
    if not isinstance(raw, dict):
        raise SinkConfigError(str(path), ["the file must be a YAML mapping: bootstrap_servers: ..., topics: ..."])
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
        raise SinkConfigError(source, problems) from None
