"""The records of the `_schemas` topic, shaped as Confluent Schema Registry writes them.

Keys (JSON, fields in Confluent's order, so the same key is the same bytes and compaction keeps the
last value):

    {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}       value: the schema version, or null (hard delete)
    {"keytype":"CONFIG","subject":null|"s","magic":0}              value: {"compatibilityLevel": ...} or null
    {"keytype":"MODE","subject":null|"s","magic":0}                value: {"mode": ...} or null
    {"keytype":"DELETE_SUBJECT","subject":"s","magic":0}           value: {"subject","version"}: soft delete up to version
    {"keytype":"NOOP","magic":0}                                   value: null; a new leader reads up to it

Read but never written: CLEAR_SUBJECT ({"subject"}: Confluent's permanent delete of a subject's
soft-deleted versions in one record) and CONTEXT (Confluent's contexts, not served here).

A SCHEMA value: {"subject","version","id","schema","schemaType","references","deleted"}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None

    def encode(self) -> bytes:
        if self.keytype == "SCHEMA":
            body = {"keytype": "SCHEMA", "subject": self.subject, "version": self.version, "magic": 1}
        elif self.keytype == "NOOP":
            body = {"keytype": "NOOP", "magic": 0}
        else:
            body = {"keytype": self.keytype, "subject": self.subject, "magic": 0}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "Key":
        body = json.loads(raw)
        return cls(body["keytype"], body.get("subject"), body.get("version"))


@dataclass
class SchemaVersion:
    """One version of one subject. Mutated only by `state.RegistryState.replay`."""
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: list[dict] = field(default_factory=list)
    deleted: bool = False

    def encode(self) -> bytes:
        return json.dumps({"subject": self.subject, "version": self.version, "id": self.id, "schema": self.schema,
                           "schemaType": self.schema_type, "references": self.references,
                           "deleted": self.deleted}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: dict) -> "SchemaVersion":
        return cls(body["subject"], body["version"], body["id"], body["schema"], body.get("schemaType") or "AVRO",
                   list(body.get("references") or []), bool(body.get("deleted", False)))

    @property
    def identity(self) -> tuple:
        """What makes two registrations the same schema (and so the same id)."""
        return (self.schema_type, self.schema, json.dumps(self.references, sort_keys=True))

    def as_response(self, with_subject: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id} if with_subject else {}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references
        body["schema"] = self.schema
        return body


def encode_value(value: dict | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()
