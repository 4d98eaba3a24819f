"""Configuration keys of the MySQL/MariaDB source (documented in docs/cdc.md)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdc.canal_fields import CanalFields
from cdc.canal_routing import CanalMq, Router, router_for
from cdc.schema_registry import Incompatible
from common.schema_registry import SchemaRegistrySettings


def check_regexes(patterns):
    """Table filters must compile; a pydantic validator's ValueError names the field."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    return patterns


def split_address(address: str, default_port: int) -> tuple[str, int]:
    """`host:port`, `host`, `[v6]:port` -> (host, port)."""
    host, colon, port = address.rpartition(":")
    if not colon or "]" in port or (host.count(":") and not host.startswith("[")):
        host, port = address, ""
    host = host.strip("[]")
    return host, int(port) if port else default_port


def check_address(address: str) -> str:
    host, colon, port = address.rpartition(":")
    if not address.strip() or (colon and port.isdigit() and not 0 < int(port) < 65536) or (
            colon and not port.isdigit() and "]" not in port and not host.count(":")):
        raise ValueError(f"{address!r} is not a server address: write host:port (or host, for the default port)")
    return address


def check_canal_outputs(format: str, outputs: dict, fields=None) -> None:
    """Canal's two outputs (`{key: its setting}`: MQ routing, entry log) write Canal's messages, one at a time;
    Canal's column filters (`fields`) shape those messages only."""
    given = [key for key, value in outputs.items() if value is not None]
    if given and format != "canal":
        raise ValueError(f"{given[0]} writes Canal's messages: set format: canal (not {format})")
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} are Canal's two server modes (kafka, tcp): set one")
    if fields is not None and not given:
        raise ValueError(f"canal_fields shapes Canal's messages: set {' or '.join(outputs)} too")


def check_avro(format: str, value_format: str, key_format: str, registry) -> None:
    """Avro keys or values are Debezium's, registered with a schema registry; a registry is for Avro."""
    avro = [key for key, kind in (("value_format", value_format), ("key_format", key_format)) if kind == "avro"]
    if avro and format != "debezium":
        raise ValueError(f"{avro[0]}: avro writes Debezium's envelope in Avro: set format: debezium (not {format})")
    if avro and registry is None:
        raise ValueError(f"{avro[0]}: avro registers its schemas: set schema_registry: {{url: http://HOST:PORT}}")
    if registry is not None and not avro:
        raise ValueError("schema_registry is used by Avro keys or values: set value_format: avro (or key_format: "
                         "avro), or drop schema_registry")


def check_start(start: "StartAt", snapshot: str, restart_by: str) -> None:
    """A start position replaces the snapshot's (no data is read), and a GTID set is followed by GTID set."""
    if snapshot != "no_data":
        raise ValueError(f"start streams from a chosen position without reading the tables: set snapshot: no_data "
                         f"(not {snapshot}), whose table structures are then recorded at that position")
    if start.gtids is not None and restart_by != "gtid":
        raise ValueError("start: {gtids: ...} streams by GTID set: set restart_by: gtid")


class StartAt(BaseModel):
    """Where a source with no stored offset streams from (snapshot: no_data): a binlog `file` and `pos` (moved back
    to the start of the transaction it falls in), an executed GTID set `gtids` (restart_by: gtid), or
    `timestamp_ms`: the first transaction begun at or after that time (in `file` only, when given). cdc/start.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = None
    pos: int | None = Field(default=None, ge=4)
    gtids: str | None = None
    timestamp_ms: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_place(self) -> "StartAt":
        if self.gtids is not None and (self.file, self.pos, self.timestamp_ms) != (None, None, None):
            raise ValueError("start: give gtids alone, or a file with pos or timestamp_ms, or timestamp_ms")
        if self.pos is not None and (self.file is None or self.timestamp_ms is not None):
            raise ValueError("start: pos needs file (and no timestamp_ms)")
        if self.gtids is None and self.pos is None and self.timestamp_ms is None:
            raise ValueError("start: give file and pos, gtids, or timestamp_ms")
        return self


class SourceConfig(BaseModel):
    """Validated source settings; unknown keys are refused so typos surface at startup."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="logical server name, the topic prefix")
    host: str = "127.0.0.1"
    port: int = 3306
    # Servers of one replication topology, tried in order when the connection is lost (cdc/failover.py);
    # "host:port" or "host" (then `port`). Empty: `host` and `port` only.
    hosts: tuple[str, ...] = ()
    failover_catch_up_s: float = Field(default=30.0, ge=0)
    user: str
    password: str = ""
    server_id: int = Field(ge=1, lt=2**32, description="replica server id; unique among the server's replicas")
    format: Literal["debezium", "canal"] = "debezium"
    # Avro keys and values (Debezium's envelope, Confluent's wire format), registered with a schema registry
    value_format: Literal["json", "avro"] = "json"
    key_format: Literal["json", "avro"] = "json"
    schema_registry: SchemaRegistrySettings | None = None
    schema_incompatible: Incompatible = "stop"
    decimal_handling_mode: Literal["precise", "string"] = "precise"    # DECIMAL in Avro: Connect's Decimal, or text
    snapshot: Literal["initial", "initial_only", "when_needed", "no_data", "always"] = "initial"
    restart_by: Literal["position", "gtid"] = "position"
    snapshot_chunk_rows: int = Field(default=10_000, ge=1)
    snapshot_progress: bool = False
    table_include: tuple[str, ...] = ()
    table_exclude: tuple[str, ...] = ()
    topic_template: str = "{name}.{db}.{table}"
    topic_partitions: int = Field(default=1, ge=1)
    tombstones_on_delete: bool = True
    transaction_metadata: bool = False
    heartbeat_interval_s: float = Field(default=10.0, ge=0)
    heartbeat_query: str | None = None     # run on the source at each heartbeat while idle (cdc/heartbeat_query.py)
    max_batch_records: int = Field(default=10_000, ge=1)
    max_batch_bytes: int = Field(default=8 << 20, ge=1)   # keys + values of one batch (a slice of a transaction)
    ddl_skip_unparseable: bool = False
    # TLS to the server, Debezium's database.ssl.mode: disabled (caching_sha2_password then authenticates
    # with the server's RSA key) | preferred (TLS when the server offers it) | required (encrypted, the
    # server unverified) | verify_ca | verify_identity
    ssl_mode: Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"] = "preferred"
    ssl_ca: str | None = None      # CA file (PEM) for verify_ca / verify_identity
    ssl_cert: str | None = None    # client certificate and key (PEM), for users created REQUIRE X509
    ssl_key: str | None = None
    # Signals and incremental snapshots (docs/cdc.md): the signal table `db.table` (read from the binlog; the
    # incremental snapshot's watermarks are written to it)
    signal_table: str | None = Field(default=None, pattern=r"^[^.`]+\.[^.`]+$")
    # Canal's MQ routing and batching (format: canal only): topics, partitions and FlatMessages as Canal's
    canal_mq: CanalMq | None = None
    # Canal's change entries (protobuf), all on one partition of this topic: a Canal destination's entry log,
    # served to Canal's TCP clients by canal/ (format: canal only)
    canal_entries: str | None = None
    # Canal's event filters (canal.instance.filter.dml.*, filter.query.ddl, filter.rows): what its outputs leave out
    canal_skip: tuple[Literal["insert", "update", "delete", "ddl"], ...] = ()
    # Canal's column filters (canal.instance.filter.field, filter.black.field), for Canal's outputs only
    canal_fields: CanalFields | None = None
    # Where to stream from when no offset is stored (cdc/start.py); a stored offset wins
    start: StartAt | None = None

    @model_validator(mode="after")
    def _start_streams_without_snapshot(self) -> "SourceConfig":
        if self.start is not None:
            check_start(self.start, self.snapshot, self.restart_by)
        return self

    @model_validator(mode="after")
    def _avro_registers(self) -> "SourceConfig":
        check_avro(self.format, self.value_format, self.key_format, self.schema_registry)
        return self

    @model_validator(mode="after")
    def _canal_outputs_need_canal(self) -> "SourceConfig":
        check_canal_outputs(self.format, {"canal_mq": self.canal_mq, "canal_entries": self.canal_entries},
                            self.canal_fields)
        return self

    # the signal topic (read by the connector, cdc/connector.py): without a signal table binlake writes nothing
    # to the source, and the incremental snapshot's watermarks are the server's GTID sets (read-only)
    signal_topic: str | None = None

    @property
    def read_only_snapshots(self) -> bool:
        """Incremental snapshots with GTID-set watermarks: a signal topic and no signal table to write to."""
        return self.signal_topic is not None and self.signal_table is None

    @model_validator(mode="after")
    def _tls_files_fit_the_mode(self) -> "SourceConfig":
        if self.ssl_mode.startswith("verify") and not self.ssl_ca:
            raise ValueError(f"ssl_mode {self.ssl_mode} verifies the server's certificate: set ssl_ca to its CA file")
        if (self.ssl_cert is None) != (self.ssl_key is None):
            raise ValueError("ssl_cert and ssl_key go together: set both, or neither")
        if self.ssl_mode in ("disabled", "preferred") and (self.ssl_ca or self.ssl_cert):
            raise ValueError(f"TLS files are set but ssl_mode is {self.ssl_mode}: set ssl_mode (required, verify_ca "
                             "or verify_identity) or remove them")
        return self

    @model_validator(mode="after")
    def _failover_follows_gtids(self) -> "SourceConfig":
        if len(self.hosts) > 1 and self.restart_by != "gtid":
            raise ValueError(f"{len(self.hosts)} hosts are given but restart_by is {self.restart_by}: another server "
                             "of the topology has other binlog files and positions, so following a failover needs "
                             "restart_by: gtid (GTIDs on: gtid_mode=ON on MySQL; MariaDB always has them)")
        for address in self.hosts:
            check_address(address)
        return self

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The servers to try, in order."""
        return [split_address(a, self.port) for a in self.hosts] or [(self.host, self.port)]

    @field_validator("table_include", "table_exclude")
    @classmethod
    def _regexes_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return check_regexes(patterns)

    @property
    def heartbeat_topic(self) -> str:
        return f"__binlake-heartbeat.{self.name}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.name}.transaction"

    @property
    def schema_change_topic(self) -> str:
        return self.name

    def topic_for(self, db: str, table: str) -> str:
        if self.canal_entries is not None:
            return self.canal_entries
        if self.canal_mq is not None:
            return self._router.topic(db, table)
        return self.topic_template.format(name=self.name, db=db, table=table)

    def partitions_to_create(self, topic: str) -> int:
        """The partitions of `topic` when the connector creates it."""
        if self.canal_mq is not None:
            return max(self.topic_partitions, self._router.partitions_needed(topic))
        return self.topic_partitions

    @property
    def _router(self) -> Router:
        return router_for(self.canal_mq)
