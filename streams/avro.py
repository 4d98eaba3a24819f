"""A faust codec for Avro in Confluent's wire format (a magic byte 0, the schema's 4-byte registry id, the Avro
body), its schemas in a schema registry: a processor reads the connector's `value_format: avro` records (or
any registered Avro) as typed values and writes its own.

    from streams.avro import registry_avro

    orders = app.topic("shop.shop.orders", value_serializer=registry_avro(REGISTRY))
    totals = app.topic("order-totals", value_serializer=registry_avro(REGISTRY, subject="order-totals-value",
                                                                      schema=TOTALS))

Reading takes the writer's schema by the id each record names (fetched once per id) and gives what fastavro
gives: dicts, Decimal for Avro's decimal, bytes, ints (Debezium's io.debezium.time.* are numbers; their
`connect.name` tells what they count). Writing registers `schema` under `subject` once, when the codec
first writes, and fails with the registry's reason if the subject's compatibility refuses it.
"""

from __future__ import annotations

import io
import json

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from faust.serializers import codecs


class RegistryAvro(codecs.Codec):
    """Confluent-framed Avro; `conf`: confluent-kafka SchemaRegistryClient's settings (`url`, `basic.auth.user.info`,
    `ssl.ca.location`). The event loop's thread only: the caches are plain dicts."""

    def __init__(self, conf: dict, subject: str | None = None, schema: dict | None = None) -> None:
        if (subject is None) != (schema is None):
            raise ValueError("registry_avro writes with a schema registered under a subject: give both, or neither "
                             "(a codec that only reads)")
        super().__init__(conf=conf, subject=subject, schema=schema)
        self._client: SchemaRegistryClient | None = None
        self._readers: dict[int, dict] = {}
        self._writer: tuple[bytes, dict] | None = None

    @property
    def client(self) -> SchemaRegistryClient:
        if self._client is None:
            self._client = SchemaRegistryClient(self.kwargs["conf"])
        return self._client

    def _loads(self, data: bytes):
        if len(data) < 5 or data[0] != 0:
            raise ValueError(f"not Confluent's Avro framing: {len(data)} bytes starting {data[:5].hex() or 'nothing'}"
                             "; a registry Avro record starts with byte 0 and a 4-byte schema id")
        schema_id = int.from_bytes(data[1:5], "big")
        parsed = self._readers.get(schema_id)
        if parsed is None:
            text = self.client.get_schema(schema_id).schema_str
            parsed = self._readers[schema_id] = fastavro.parse_schema(json.loads(text))
        return fastavro.schemaless_reader(io.BytesIO(memoryview(data)[5:]), parsed, None)

    def _dumps(self, value) -> bytes:
        if self._writer is None:
            subject, schema = self.kwargs["subject"], self.kwargs["schema"]
            if subject is None:
                raise ValueError("this registry_avro codec only reads: give it a subject and a schema to write with")
            schema_id = self.client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
            self._writer = b"\0" + schema_id.to_bytes(4, "big"), fastavro.parse_schema(schema)
        header, parsed = self._writer
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, parsed, value)
        return out.getvalue()


def registry_avro(url: str, subject: str | None = None, schema: dict | None = None, **conf: str) -> RegistryAvro:
    """A codec for `value_serializer=` / `key_serializer=`: reads any registered Avro schema; with `subject` and
    `schema`, writes with that schema. `conf`: other SchemaRegistryClient settings, dots as underscores
    (`basic_auth_user_info="user:password"`, `ssl_ca_location=...`)."""
    return RegistryAvro({"url": url, **{k.replace("_", "."): v for k, v in conf.items()}}, subject, schema)
