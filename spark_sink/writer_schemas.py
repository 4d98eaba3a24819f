"""`format: debezium-avro`: the writer schemas of a micro-batch's records, by the registry id each record names
(Confluent's wire format), fetched from the schema registry once per id and kept for the job's life (an id
names one schema for ever)."""

from __future__ import annotations

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.schema_registry import SchemaRegistrySettings


class SchemaNotFound(RuntimeError):
    """An id the registry cannot give an Avro schema for."""


class WriterSchemas:
    """Schema id → the writer schema's JSON text. The driver's only (a plain dict)."""

    def __init__(self, settings: SchemaRegistrySettings) -> None:
        self.client = SchemaRegistryClient(settings.client_conf())
        self.url = settings.url
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
