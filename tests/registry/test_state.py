"""The registry's state machine (registry/state.py) replaying `_schemas` records, as start-up and the
tail do: soft deletes in place, tombstones, the id index, configs and modes; no server."""

from __future__ import annotations

import pytest

from registry.records import Key, SchemaVersion, encode_value
from registry.state import RegistryState

A = '"string"'
B = '"long"'


def replay(state: RegistryState, key: Key, value: bytes | None) -> None:
    state.replay(key.encode(), value)


def version(subject: str, n: int, schema_id: int, schema: str, deleted: bool = False) -> tuple[Key, bytes]:
    return Key("SCHEMA", subject, n), SchemaVersion(subject, n, schema_id, schema, deleted=deleted).encode()


def test_versions_ids_and_deletes_replayed():
    state = RegistryState()
    for record in (version("s", 1, 1, A), version("s", 2, 2, B), version("t", 1, 1, A)):
        replay(state, *record)
    assert [r.subject for r in state.by_id(1)] == ["s", "t"]
    assert state.id_of(state.subjects["t"][1].identity) == 1
    replay(state, *version("s", 1, 1, A, deleted=True))                 # soft delete of a version
    assert [r.version for r in state.versions("s")] == [2]
    assert [r.version for r in state.versions("s", deleted=True)] == [1, 2]
    replay(state, Key("DELETE_SUBJECT", "s"), encode_value({"subject": "s", "version": 2}))
    assert state.versions("s") == [] and len(state.versions("s", deleted=True)) == 2
    replay(state, Key("SCHEMA", "s", 1), None)                          # hard deletes: tombstones
    replay(state, Key("SCHEMA", "s", 2), None)
    assert "s" not in state.subjects and state.by_id(2) == [] and [r.subject for r in state.by_id(1)] == ["t"]
    replay(state, Key("SCHEMA", "t", 1), None)
    assert state.id_of(("AVRO", A, "[]")) is None
    assert state.max_id == 2                                            # ids never go back while running


def test_confluents_clear_subject_drops_the_soft_deleted_versions():
    state = RegistryState()
    for record in (version("s", 1, 1, A, deleted=True), version("s", 2, 2, B)):
        replay(state, *record)
    replay(state, Key("CLEAR_SUBJECT", "s"), encode_value({"subject": "s"}))
    assert [r.version for r in state.versions("s", deleted=True)] == [2] and state.by_id(1) == []


def test_configs_and_modes_with_their_tombstones():
    state = RegistryState()
    assert (state.level("s"), state.mode("s")) == ("BACKWARD", "READWRITE")
    replay(state, Key("CONFIG"), encode_value({"compatibilityLevel": "FULL"}))
    replay(state, Key("CONFIG", "s"), encode_value({"compatibilityLevel": "NONE"}))
    replay(state, Key("MODE", "s"), encode_value({"mode": "READONLY"}))
    assert (state.level("s"), state.level("other"), state.mode("s")) == ("NONE", "FULL", "READONLY")
    replay(state, Key("CONFIG", "s"), None)
    replay(state, Key("MODE", "s"), None)
    replay(state, Key("NOOP"), None)
    assert (state.level("s"), state.mode("s")) == ("FULL", "READWRITE")


def test_a_record_of_an_unknown_kind_stops_the_replay_with_its_name():
    with pytest.raises(ValueError, match="keytype 'SOMETHING'"):
        RegistryState().replay(b'{"keytype":"SOMETHING","magic":0}', b"{}")
    with pytest.raises(ValueError, match="without a key"):
        RegistryState().replay(None, b"{}")


def test_keys_are_confluents_bytes():
    assert Key("SCHEMA", "s", 3).encode() == b'{"keytype":"SCHEMA","subject":"s","version":3,"magic":1}'
    assert Key("CONFIG").encode() == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert Key("NOOP").encode() == b'{"keytype":"NOOP","magic":0}'
