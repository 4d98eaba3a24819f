"""The registry's state: a replayable state machine over the `_schemas` topic.

`replay(key, value)` is the only mutator and is also the loading path (start-up reads the topic from
its start; afterwards every instance tails it). Everything else reads. Event loop only.
"""

from __future__ import annotations

import json
import logging
import uuid

from . import schemas
from .compat import DEFAULT_LEVEL
from .errors import SchemaNotFound
from .records import Key, SchemaVersion
from .schemas import ParsedSchema

log = logging.getLogger(__name__)
DEFAULT_MODE = "READWRITE"


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.configs: dict[str | None, str] = {}     # None: the global level
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self._parsed: dict[int, ParsedSchema] = {}   # by schema id, parsed on first use
        self._ids: dict[int, dict[tuple[str, int], SchemaVersion]] = {}   # id -> (subject, version) -> record
        self._identities: dict[tuple, int] = {}      # SchemaVersion.identity -> id

    # -- the only mutator -------------------------------------------------------------------------

    def replay(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        if raw_key is None:
            raise ValueError("a _schemas record without a key: this topic is not a schema registry's")
        key = Key.decode(raw_key)
        value = json.loads(raw_value) if raw_value is not None else None
        if key.keytype == "SCHEMA":
            versions = self.subjects.setdefault(key.subject, {})
            if (old := versions.pop(key.version, None)) is not None:
                self._unindex(old)
            if value is None:
                if not versions:
                    del self.subjects[key.subject]
                return
            record = SchemaVersion.decode(value)
            versions[record.version] = record
            self._ids.setdefault(record.id, {})[(record.subject, record.version)] = record
            self._identities[record.identity] = record.id
            self.max_id = max(self.max_id, record.id)
        elif key.keytype == "CONFIG":
            self._set(self.configs, key.subject, value and value.get("compatibilityLevel"))
        elif key.keytype == "MODE":
            self._set(self.modes, key.subject, value and value.get("mode"))
        elif key.keytype == "DELETE_SUBJECT":
            if value is not None:
                for record in self.subjects.get(key.subject, {}).values():
                    if record.version <= value["version"]:
                        record.deleted = True
        elif key.keytype == "CLEAR_SUBJECT":
            if value is not None:  # Confluent's permanent delete of a subject's soft-deleted versions at once
                versions = self.subjects.get(key.subject, {})
                for record in [r for r in versions.values() if r.deleted]:
                    self._unindex(versions.pop(record.version))
                if not versions:
                    self.subjects.pop(key.subject, None)
        elif key.keytype in ("NOOP", "CONTEXT"):  # a leader's marker; Confluent's context registrations
            return
        else:
            raise ValueError(f"_schemas record with keytype {key.keytype!r}, which this registry does not know: "
                             "is another kind of registry writing to this topic?")

    def _unindex(self, record: SchemaVersion) -> None:
        users = self._ids[record.id]
        del users[(record.subject, record.version)]
        if not users:
            del self._ids[record.id]
            self._identities.pop(record.identity, None)

    @staticmethod
    def _set(table: dict, subject: str | None, level: str | None) -> None:
        if level is None:
            table.pop(subject, None)
        else:
            table[subject] = level

    # -- reads ------------------------------------------------------------------------------------

    def level(self, subject: str | None) -> str:
        return self.configs.get(subject) or self.configs.get(None) or DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return self.modes.get(subject) or self.modes.get(None) or DEFAULT_MODE

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first (soft-deleted ones too when `deleted`)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def by_id(self, schema_id: int) -> list[SchemaVersion]:
        return list(self._ids.get(schema_id, {}).values())

    def id_of(self, identity: tuple) -> int | None:
        """The id of the schema with this identity, if some subject version holds it."""
        return self._identities.get(identity)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({r.id for versions in self.subjects.values() for r in versions.values() if not r.deleted
                       and any(ref.get("subject") == subject and ref.get("version") == version
                               for ref in r.references)})

    def guid(self, record: SchemaVersion) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "|".join(map(str, record.identity))))

    def parsed(self, record: SchemaVersion) -> ParsedSchema:
        """The version's schema parsed (its references first); cached by id."""
        if record.id not in self._parsed:
            refs = [(ref["name"], self.parsed(self.resolve_reference(ref))) for ref in record.references]
            self._parsed[record.id] = schemas.parse(record.schema_type, record.schema, refs)
        return self._parsed[record.id]

    def resolve_reference(self, ref: dict) -> SchemaVersion:
        """The schema version a reference {"name", "subject", "version"} names (-1: the latest)."""
        live = self.versions(ref.get("subject", ""), deleted=True)
        version = ref.get("version", -1)
        for record in reversed(live):
            if record.version == version or (version == -1 and not record.deleted):
                return record
        raise SchemaNotFound(f"the reference {ref.get('name')!r} names subject {ref.get('subject')!r} version "
                             f"{version}, which does not exist")
