"""A distributed worker's config file (`binlake connect worker --config WORKER.yaml`).

Kafka Connect's distributed-mode keys, with their defaults, except where noted:

    group_id: binlake-connect
    bootstrap_servers: 127.0.0.1:9092
    rest: 127.0.0.1:8083
    config.storage.topic: binlake-connect-configs
    offset.storage.topic: binlake-offsets
    status.storage.topic: binlake-connect-status
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.kafka_security import KafkaSecurity

from .config import read_mapping, validate_model


class WorkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    group_id: str = Field("binlake-connect", min_length=1)
    """Workers with the same group_id share connectors; the group has protocol type "connect"."""
    bootstrap_servers: str | list[str]
    security: KafkaSecurity = KafkaSecurity()
    """How the worker's clients (and its connectors') reach the brokers (common/kafka_security.py)."""
    rest: str = "127.0.0.1:8083"
    """HOST:PORT of the REST API (port 0 picks a free one). Other workers forward requests here."""
    rest_advertised_url: str | None = Field(None, alias="rest.advertised.url")
    """The URL other workers reach this one at; default http://HOST:PORT as bound."""
    prometheus_listener: str | None = Field(None, alias="prometheus.listener")
    """HOST:PORT where the worker serves Prometheus metrics at /metrics (docs/operations.md)."""
    config_topic: str = Field("binlake-connect-configs", alias="config.storage.topic")
    offset_topic: str = Field("binlake-offsets", alias="offset.storage.topic")
    status_topic: str = Field("binlake-connect-status", alias="status.storage.topic")
    config_replication_factor: int | None = Field(None, ge=1, alias="config.storage.replication.factor")
    offset_replication_factor: int | None = Field(None, ge=1, alias="offset.storage.replication.factor")
    status_replication_factor: int | None = Field(None, ge=1, alias="status.storage.replication.factor")
    offset_partitions: int = Field(25, ge=1, alias="offset.storage.partitions")
    status_partitions: int = Field(5, ge=1, alias="status.storage.partitions")
    session_timeout_ms: int = Field(10_000, ge=1000, alias="session.timeout.ms")
    heartbeat_interval_ms: int = Field(3_000, ge=100, alias="heartbeat.interval.ms")
    rebalance_timeout_ms: int = Field(60_000, ge=1000, alias="rebalance.timeout.ms")
    scheduled_rebalance_max_delay_ms: int = Field(0, ge=0, alias="scheduled.rebalance.max.delay.ms")
    """How long a departed worker's connectors and tasks wait for it to come back before the others take
    them. Kafka Connect's default is 5 minutes; binlake's is 0, because a stopped binlog reader stops
    all capture: failover now beats waiting for a restart that may never come."""

    @field_validator("rest", "prometheus_listener")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:8083")
        return value

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> "WorkerConfig":
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be below session.timeout.ms "
                             f"({self.session_timeout_ms}), typically a third of it")
        return self

    @property
    def rest_address(self) -> tuple[str, int]:
        host, _, port = self.rest.rpartition(":")
        return host or "127.0.0.1", int(port)


def load(path: str | Path) -> WorkerConfig:
    """Read and validate a worker file; `ConfigError` lists every problem."""
    return validate_model(WorkerConfig, read_mapping(path, "group_id: ..., bootstrap_servers: ..., ..."),
                          str(path), os.environ)
