"""`format: debezium-avro`: the writer schemas a micro-batch's records name (Confluent's wire format: a registry id
each), from the schema registry: every version of the subscribed topics' value subjects (`<topic>-value`, the
connector's), listed when the job starts and again when a batch names an id that is not among them; and any id
by itself (`__call__`). Each id's schema is fetched once and kept for the job's life (an id names one schema for
ever)."""

from __future__ import annotations

import re

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.schema_registry import SchemaRegistrySettings

SUBJECT_NOT_FOUND = 40401


class SchemaNotFound(RuntimeError):
    """An id the registry cannot give an Avro schema for."""


class WriterSchemas:
    """Schema id → the writer schema's JSON text, for the topics the job reads (`topics`, or the topics matching
    `pattern`, as Spark's subscribePattern matches them). The driver's only (plain dicts)."""

    def __init__(self, settings: SchemaRegistrySettings, topics: list[str] | None = None,
                 pattern: str | None = None) -> None:
        self.client = SchemaRegistryClient(settings.client_conf())
        self.url = settings.url
        self.topics, self.pattern = topics, re.compile(pattern) if pattern is not None else None
        self._texts: dict[int, str] = {}

    def __call__(self, schema_id: int) -> str:
        text = self._texts.get(schema_id)
        if text is None:
            try:
                schema = self.client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                raise SchemaNotFound(f"the schema registry at {self.url} has no schema {schema_id} (HTTP "
                                     f"{exc.http_status_code}, error {exc.error_code}: {exc.error_message}): is "
                                     "schema_registry the registry the connector writes to?") from None
            if (schema.schema_type or "AVRO") != "AVRO":
                raise SchemaNotFound(f"schema {schema_id} in the registry at {self.url} is {schema.schema_type}, "
                                     "not AVRO: format: debezium-avro reads the connector's value_format: avro")
            text = self._texts[schema_id] = schema.schema_str
        return text

    def subscribed(self) -> dict[int, str]:
        """Id → schema text of every AVRO version registered now under the value subject of each topic the job
        reads: one listing of the registry (a few requests per subject), for whole batches."""
        found: dict[int, str] = {}
        for subject in self._subjects():
            try:
                versions = self.client.get_versions(subject)
            except SchemaRegistryError as exc:
                if exc.error_code == SUBJECT_NOT_FOUND:  # (no record of that topic written yet)
                    continue
                raise
            for version in versions:
                registered = self.client.get_version(subject, version)
                if (registered.schema.schema_type or "AVRO") == "AVRO":
                    found[registered.schema_id] = self._texts.setdefault(registered.schema_id,
                                                                         registered.schema.schema_str)
        return found

    def _subjects(self) -> list[str]:
        if self.topics is not None:
            return [f"{topic}-value" for topic in self.topics]
        return [s for s in self.client.get_subjects()
                if s.endswith("-value") and self.pattern.fullmatch(s.removesuffix("-value"))]
