"""The registry's operations, as Confluent's REST resources define them, over the state and the store.

Reads answer from `RegistryState`. Writes run on the leader, one at a time (`_writing`): each is
computed against the state without changing it (parse, references, compatibility, the next id and
version), then its records are appended to `_schemas`, and the state changes only when the tail
replays them (`KafkaStore.append` returns after that).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from . import compat, schemas
from .errors import (MAX_VERSION, BadRequest, Incompatible, InvalidCompatibilityLevel, InvalidMode, InvalidSchema,
                     InvalidVersion, OperationNotPermitted, ReferenceExists, SchemaNotFound, SubjectConfigNotFound,
                     SubjectExists, SubjectModeNotFound, SubjectNotFound, SubjectNotSoftDeleted, SubjectSoftDeleted,
                     VersionNotFound, VersionNotSoftDeleted, VersionSoftDeleted)
from .records import Key, SchemaVersion, encode_value
from .schemas import ParsedSchema
from .state import RegistryState
from .store import KafkaStore

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
LATEST = -1


def parse_version(raw: str) -> int:
    """A version path segment: "latest" (or -1) is LATEST; otherwise 1..2^31-1."""
    if raw == "latest":
        return LATEST
    try:
        version = int(raw)
    except ValueError:
        raise InvalidVersion(raw) from None
    if version == LATEST or 1 <= version <= MAX_VERSION:
        return version
    raise InvalidVersion(raw)


class Registry:
    """The operations. Event loop only; writes hold `_writing` from their first check to the replay of
    their records, so two writes never compute against the same state."""

    def __init__(self, state: RegistryState, store: KafkaStore) -> None:
        self.state = state
        self.store = store
        self._writing = asyncio.Lock()

    # -- reads --------------------------------------------------------------------------------------

    def subjects(self, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        found = []
        for subject in sorted(self.state.subjects):
            if not subject.startswith(prefix):
                continue
            live = bool(self.state.versions(subject))
            if (deleted_only and not live) or (not deleted_only and (live or deleted)):
                found.append(subject)
        return found

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        found = [r.version for r in self.state.versions(subject, deleted)]
        if not found:
            raise SubjectNotFound(subject)
        return found

    def version(self, subject: str, raw: str, deleted: bool = False) -> SchemaVersion:
        version = parse_version(raw)
        records = self.state.versions(subject, deleted=True)
        if not records:
            raise SubjectNotFound(subject)
        if version == LATEST:
            live = [r for r in records if deleted or not r.deleted]
            if not live:
                raise VersionNotFound(subject, raw)
            return live[-1]
        record = next((r for r in records if r.version == version), None)
        if record is None or (record.deleted and not deleted):
            raise VersionNotFound(subject, version)
        return record

    def schema_by_id(self, schema_id: int) -> SchemaVersion:
        records = self.state.by_id(schema_id)
        if not records:
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return records[0]

    def schema_by_guid(self, guid: str) -> SchemaVersion:
        found = next((r for versions in self.state.subjects.values() for r in versions.values()
                      if self.state.guid(r) == guid), None)
        if found is None:
            raise SchemaNotFound(f"Schema {guid} not found")
        return found

    def schema_response(self, record: SchemaVersion, fmt: str | None = None) -> dict[str, Any]:
        return {**record.as_response(with_subject=False), **self._formatted(record, fmt),
                "guid": self.state.guid(record)}

    def version_response(self, record: SchemaVersion, fmt: str | None = None) -> dict[str, Any]:
        return {**record.as_response(), **self._formatted(record, fmt), "guid": self.state.guid(record)}

    def _formatted(self, record: SchemaVersion, fmt: str | None) -> dict[str, str]:
        """`format=serialized` of a Protobuf schema: its FileDescriptorProto in base64, as the
        ProtobufDeserializer asks. Other formats are served as stored (docs/registry.md)."""
        if fmt == "serialized" and record.schema_type == "PROTOBUF":
            return {"schema": base64.b64encode(self.state.parsed(record).model.descriptor).decode()}
        return {}

    def subjects_of(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        records = [r for r in self.state.by_id(schema_id) if deleted or not r.deleted]
        if not self.state.by_id(schema_id):
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return [{"subject": r.subject, "version": r.version} for r in sorted(records, key=lambda r: (r.subject,
                                                                                                    r.version))]

    def all_schemas(self, prefix: str = "", deleted: bool = False, latest_only: bool = False) -> list[dict]:
        found = []
        for subject in self.subjects(prefix, deleted):
            records = self.state.versions(subject, deleted)
            found += [self.version_response(r) for r in (records[-1:] if latest_only else records)]
        return found

    def referenced_by(self, subject: str, raw: str) -> list[int]:
        record = self.version(subject, raw, deleted=True)
        return self.state.referenced_by(subject, record.version)

    def lookup(self, subject: str, body: Any, normalize: bool, deleted: bool = False) -> dict[str, Any]:
        records = self.state.versions(subject, deleted)
        if not records:
            raise SubjectNotFound(subject)
        schema_type, text, references = _schema_body(body)
        parsed = self._parse(schema_type, text, references)
        match = self._matching(records, parsed, references, normalize)
        if match is None:
            raise SchemaNotFound("Schema not found")
        return self.version_response(match)

    def config(self, subject: str | None, default_to_global: bool) -> dict[str, str]:
        if subject is not None and subject not in self.state.configs and not default_to_global:
            raise SubjectConfigNotFound(subject)
        return {"compatibilityLevel": self.state.level(subject)}

    def mode(self, subject: str | None, default_to_global: bool) -> dict[str, str]:
        if subject is not None and subject not in self.state.modes and not default_to_global:
            raise SubjectModeNotFound(subject)
        return {"mode": self.state.mode(subject)}

    def test_compatibility(self, subject: str, raw_version: str | None, body: Any, normalize: bool,
                           verbose: bool) -> dict[str, Any]:
        schema_type, text, references = _schema_body(body)
        parsed = self._parse(schema_type, text, references)
        level = self.state.level(subject)
        if raw_version is None:
            olds = self._against(self.state.versions(subject), level)
        else:
            version = parse_version(raw_version)
            if version == LATEST and not self.state.versions(subject):
                olds = []
            else:
                record = self.version(subject, raw_version)
                olds = [(record.version, self.state.parsed(record))]
            level = level.removesuffix("_TRANSITIVE")
        reasons = compat.is_compatible(parsed, olds, level)
        return {"is_compatible": not reasons, **({"messages": reasons} if verbose else {})}

    # -- writes (on the leader) ---------------------------------------------------------------------

    async def register(self, subject: str, body: Any, normalize: bool, when_live: str = "register") -> dict[str, Any]:
        """`when_live`, what a subject with live versions gets (Apicurio's `ifExists`, registry/apicurio.py):
        "register" (Confluent's way), "fail" (SubjectExists) or "latest" (its latest version, unchanged)."""
        schema_type, text, references = _schema_body(body)
        asked_id, asked_version = body.get("id"), body.get("version")
        async with self._writing:
            mode = self.state.mode(subject)
            self._writable(subject, mode)
            if (live := self.state.versions(subject)) and when_live != "register":
                if when_live == "fail":
                    raise SubjectExists(subject)
                return {"id": live[-1].id, "version": live[-1].version, "guid": self.state.guid(live[-1])}
            if (asked_id is not None or asked_version is not None) and mode != "IMPORT":
                if asked_id not in (None, -1) or asked_version not in (None, -1):
                    raise OperationNotPermitted(f"a schema id or version is given only in IMPORT mode; subject "
                                                f"{subject} is in {mode} mode")
                asked_id = asked_version = None
            parsed = self._parse(schema_type, text, references)
            stored_text = parsed.normalized if normalize else parsed.canonical
            live = self.state.versions(subject)
            existing = self._matching(live, parsed, references, normalize)
            if existing is not None and asked_id in (None, existing.id):
                return {"id": existing.id, "version": existing.version, "guid": self.state.guid(existing)}
            if mode != "IMPORT":
                level = self.state.level(subject)
                if reasons := compat.is_compatible(parsed, self._against(live, level), level):
                    raise Incompatible(subject, reasons)
            record = SchemaVersion(subject, 0, 0, stored_text, schema_type, references)
            same = self.state.id_of(record.identity)
            record.id = asked_id if asked_id is not None else same if same is not None else self.state.max_id + 1
            known = self.state.versions(subject, deleted=True)
            record.version = asked_version or (known[-1].version + 1 if known else 1)
            if asked_version is not None and any(r.version == asked_version for r in known):
                raise OperationNotPermitted(f"Overwrite of version {asked_version} of subject {subject} is not "
                                            "permitted: it exists")
            if asked_id is not None and any(r.identity != record.identity for r in self.state.by_id(asked_id)):
                raise OperationNotPermitted(f"Overwrite new schema with id {asked_id} is not permitted: that id "
                                            "holds another schema")
            await self.store.append([(Key("SCHEMA", subject, record.version), record.encode())])
        return {"id": record.id, "version": record.version, "guid": self.state.guid(record)}

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        async with self._writing:
            self._writable(subject, self.state.mode(subject))
            known = self.state.versions(subject, deleted=True)
            if not known:
                raise SubjectNotFound(subject)
            live = [r for r in known if not r.deleted]
            if not permanent:
                if not live:
                    raise SubjectSoftDeleted(subject)
                self._not_referenced(subject, live)
                value = {"subject": subject, "version": live[-1].version}
                await self.store.append([(Key("DELETE_SUBJECT", subject), encode_value(value))])
                return [r.version for r in live]
            if live:
                raise SubjectNotSoftDeleted(subject)
            records = [(Key("SCHEMA", subject, r.version), None) for r in known]
            records.append((Key("DELETE_SUBJECT", subject), None))
            records += [(Key(kind, subject), None) for kind, table in (("CONFIG", self.state.configs),
                                                                        ("MODE", self.state.modes))
                        if subject in table]
            await self.store.append(records)
            return [r.version for r in known]

    async def delete_version(self, subject: str, raw: str, permanent: bool) -> int:
        async with self._writing:
            self._writable(subject, self.state.mode(subject))
            # "latest" is the latest live version, or for a permanent delete the latest soft-deleted one
            record = self.version(subject, raw, deleted=permanent or parse_version(raw) != LATEST)
            if not permanent:
                if record.deleted:
                    raise VersionSoftDeleted(subject, record.version)
                self._not_referenced(subject, [record])
                deleted = SchemaVersion(record.subject, record.version, record.id, record.schema, record.schema_type,
                                        record.references, deleted=True)
                await self.store.append([(Key("SCHEMA", subject, record.version), deleted.encode())])
            else:
                if not record.deleted:
                    raise VersionNotSoftDeleted(subject, record.version)
                await self.store.append([(Key("SCHEMA", subject, record.version), None)])
            return record.version

    async def set_config(self, subject: str | None, body: Any) -> dict[str, str]:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object such as {\"compatibility\": \"FULL\"}")
        raw = body.get("compatibility", body.get("compatibilityLevel"))
        level = raw.upper() if isinstance(raw, str) else raw
        if level not in compat.LEVELS:
            raise InvalidCompatibilityLevel(raw)
        async with self._writing:
            await self.store.append([(Key("CONFIG", subject), encode_value({"compatibilityLevel": level}))])
        return {"compatibility": level}

    async def delete_config(self, subject: str | None) -> dict[str, str]:
        async with self._writing:
            if subject is not None and subject not in self.state.configs:
                raise SubjectConfigNotFound(subject)
            previous = self.state.level(subject)
            await self.store.append([(Key("CONFIG", subject), None)])
        return {"compatibilityLevel": previous}

    async def set_mode(self, subject: str | None, body: Any, force: bool) -> dict[str, str]:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object such as {\"mode\": \"READONLY\"}")
        raw = body.get("mode")
        mode = raw.upper() if isinstance(raw, str) else raw
        if mode not in MODES:
            raise InvalidMode(raw)
        async with self._writing:
            if mode == "IMPORT" and not force:
                scope = [subject] if subject is not None else list(self.state.subjects)
                if any(self.state.versions(s) for s in scope):
                    raise OperationNotPermitted("Cannot import since found existing subjects (use force=true)")
            await self.store.append([(Key("MODE", subject), encode_value({"mode": mode}))])
        return {"mode": mode}

    async def delete_mode(self, subject: str) -> dict[str, str]:
        async with self._writing:
            if subject not in self.state.modes:
                raise SubjectModeNotFound(subject)
            previous = self.state.mode(subject)
            await self.store.append([(Key("MODE", subject), None)])
        return {"mode": previous}

    async def become_leader(self) -> None:
        """A new leader writes a NOOP and reads up to it, so it writes nothing from a stale state."""
        async with self._writing:
            await self.store.append([(Key("NOOP"), None)])

    # -- helpers ------------------------------------------------------------------------------------

    def _against(self, live: list[SchemaVersion], level: str) -> list[tuple[int, ParsedSchema]]:
        """(version, parsed schema) of the live versions `level` checks a new schema against, newest first."""
        if level == "NONE":
            return []
        checked = live if level.endswith("_TRANSITIVE") else live[-1:]
        return [(r.version, self.state.parsed(r)) for r in reversed(checked)]

    @staticmethod
    def _writable(subject: str, mode: str) -> None:
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise OperationNotPermitted(f"Subject {subject} is in read-only mode")

    def _parse(self, schema_type: str, text: str, references: list[dict]) -> ParsedSchema:
        try:
            resolved = [(ref["name"], self.state.parsed(self.state.resolve_reference(ref))) for ref in references]
        except SchemaNotFound as exc:
            raise InvalidSchema(f"Invalid schema {text[:200]}, details: {exc}") from None
        return schemas.parse(schema_type, text, resolved)

    def _matching(self, records: list[SchemaVersion], parsed: ParsedSchema, references: list[dict],
                  normalize: bool) -> SchemaVersion | None:
        for record in reversed(records):
            if record.schema_type != parsed.schema_type or record.references != references:
                continue
            if record.schema in (parsed.canonical, parsed.normalized):
                return record
            if normalize and self.state.parsed(record).normalized == parsed.normalized:
                return record
        return None

    def _not_referenced(self, subject: str, records: list[SchemaVersion]) -> None:
        for record in records:
            if users := self.state.referenced_by(subject, record.version):
                raise ReferenceExists(f"One or more references exist to the schema {{subject={subject}, version="
                                      f"{record.version}}}: schema ids {users}")


def _schema_body(body: Any) -> tuple[str, str, list[dict]]:
    """(schemaType, schema, references) of a registration, lookup or compatibility request body."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise InvalidSchema("Invalid schema: the body must be a JSON object with the schema as a string in "
                            "\"schema\"")
    schema_type = (body.get("schemaType") or "AVRO").upper()
    if schema_type not in schemas.TYPES:
        raise InvalidSchema(f"Invalid schema type {body.get('schemaType')!r}: one of {', '.join(schemas.TYPES)}")
    references = body.get("references") or []
    if not isinstance(references, list) or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("subject"), str)
            and isinstance(r.get("version"), int) for r in references):
        raise InvalidSchema("Invalid schema: references must be a list of {\"name\", \"subject\", \"version\"}")
    return schema_type, body["schema"], [{"name": r["name"], "subject": r["subject"], "version": r["version"]}
                                         for r in references]
