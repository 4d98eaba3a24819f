"""The source's schema registry client: Avro schemas registered under their subjects (Confluent's REST API,
through confluent-kafka's SchemaRegistryClient), each (subject, schema) once per process, and what a
change the subject's compatibility forbids does (`schema_incompatible`)."""

from __future__ import annotations

import functools
import json
import logging
from typing import Literal

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from cdc.errors import CdcError
from common.schema_registry import SchemaRegistrySettings

log = logging.getLogger(__name__)
_INCOMPATIBLE = 409          # Confluent's status for a schema the subject's compatibility level refuses

Incompatible = Literal["stop", "new_subject_version_with_none"]


class SchemaIncompatible(CdcError):
    """A schema the subject's compatibility level refuses (one message argument: it crosses the source process's
    pipe pickled)."""

    @classmethod
    def of(cls, subject: str, latest: str, new: str, reason: str) -> "SchemaIncompatible":
        return cls(
            f"the schema registry refuses a new version of subject {subject}: {reason}\n"
            f"  latest registered: {latest}\n  new: {new}\n"
            f"Make the table change compatible with the subject's level (e.g. add columns as NULL), or relax the "
            f"subject's level (PUT /config/{subject}), or set schema_incompatible: new_subject_version_with_none "
            "to register it after setting the subject's compatibility to NONE; then restart the connector")


class Registrar:
    """Schema ids by (subject, schema), registered once per process; the registry returns an existing
    schema's id unchanged, so a restart re-registering what it had is a lookup."""

    def __init__(self, settings: SchemaRegistrySettings, on_incompatible: Incompatible) -> None:
        self.client = SchemaRegistryClient(settings.client_conf())
        self.url = settings.url
        self.on_incompatible = on_incompatible
        self._ids: dict[tuple[str, str], int] = {}

    def id_for(self, subject: str, schema: dict) -> int:
        text = json.dumps(schema, separators=(",", ":"))
        found = self._ids.get((subject, text))
        if found is None:
            found = self._ids[(subject, text)] = self._register(subject, text)
        return found

    def _register(self, subject: str, text: str) -> int:
        try:
            return self.client.register_schema(subject, Schema(text, "AVRO"))
        except SchemaRegistryError as exc:
            if exc.http_status_code != _INCOMPATIBLE:
                raise CdcError(f"the schema registry at {self.url} refused {subject}'s schema "
                               f"(HTTP {exc.http_status_code}, error {exc.error_code}): {exc.error_message}") from None
            reason = exc.error_message
        latest = self.client.get_latest_version(subject).schema.schema_str
        if self.on_incompatible == "stop":
            raise SchemaIncompatible.of(subject, latest, text, reason)
        log.warning("subject %s: the new schema is incompatible (%s); setting the subject's compatibility to NONE "
                    "(schema_incompatible: new_subject_version_with_none) and registering it", subject, reason)
        self.client.set_compatibility(subject, "NONE")
        return self.client.register_schema(subject, Schema(text, "AVRO"))


@functools.cache
def registrar(settings: SchemaRegistrySettings, on_incompatible: Incompatible) -> Registrar:
    """The process's registrar for these settings (a source process registers its tables through one)."""
    return Registrar(settings, on_incompatible)
