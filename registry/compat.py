"""Compatibility levels, as Confluent's registry applies them: pure functions of parsed schemas.

`is_compatible(new, olds, level)` returns the reasons `new` may not follow `olds` (the subject's live
versions, newest first) under `level`; empty means compatible. BACKWARD: the new schema reads data
written with the latest version; FORWARD: the latest version reads data written with the new one;
FULL: both; the _TRANSITIVE forms: against every live version, not only the latest; NONE: nothing.

Avro follows Avro's schema resolution (`avro_compat`). JSON Schema and Protobuf follow the main rules
of Confluent's checkers (listed in docs/registry.md), not all of them.
"""

from __future__ import annotations

from typing import Any

from . import avro_compat
from .schemas import ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def is_compatible(new: ParsedSchema, olds: list[tuple[int, ParsedSchema]], level: str) -> list[str]:
    """`olds`: (version, schema) of the subject's live versions, newest first."""
    if level == "NONE" or not olds:
        return []
    against = olds if level.endswith("_TRANSITIVE") else olds[:1]
    base = level.removesuffix("_TRANSITIVE")
    reasons = []
    for version, old in against:
        if old.schema_type != new.schema_type:
            reasons.append(f"{{errorType:'TYPE_CHANGED', description:'The new schema is {new.schema_type} and "
                           f"version {version} is {old.schema_type}'}}")
            continue
        found = []
        if base in ("BACKWARD", "FULL"):
            found += _reasons(new, old, ("new schema", "old schema"))
        if base in ("FORWARD", "FULL"):
            found += _reasons(old, new, ("old schema", "new schema"))
        if found:
            reasons += found + [f"{{oldSchemaVersion: {version}}}", f"{{oldSchema: '{old.canonical}'}}",
                                f"{{compatibility: '{level}'}}"]
    return reasons


def _reasons(reader: ParsedSchema, writer: ParsedSchema, labels: tuple[str, str]) -> list[str]:
    """Why `reader` cannot read `writer`'s data; `labels` name them in the messages."""
    if reader.schema_type == "AVRO":
        return avro_compat.incompatibilities(reader.model.schema, writer.model.schema, reader.model.named,
                                             writer.model.named, labels)
    if reader.schema_type == "JSON":
        return _JsonChecker(reader.model, writer.model, *labels).check(reader.model, writer.model, "#")
    return _protobuf(reader.model, writer.model, *labels)


def _problem(error_type: str, description: str) -> str:
    return f"{{errorType:'{error_type}', description:'{description}'}}"


# JSON Schema: can a validator of `reader` accept every document `writer` accepts?

def _types(schema: dict) -> set[str] | None:
    t = schema.get("type")
    return None if t is None else {t} if isinstance(t, str) else set(t)


def _pointer(root: Any, ref: str) -> Any:
    """The subschema a local `$ref` ("#/definitions/X", JSON Pointer escapes) points at, or None."""
    node = root
    for part in ref[1:].lstrip("/").split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


class _JsonChecker:
    """Compares two JSON schemas, following each one's local `$ref`s within its own document; `r`, `w`
    name the reader and the writer in the messages."""

    def __init__(self, reader_root: Any, writer_root: Any, r: str, w: str) -> None:
        self.roots = {"r": reader_root, "w": writer_root}
        self.r, self.w = r, w

    def _deref(self, schema: Any, side: str, path: str) -> Any:
        hops = 0
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#"):
            target = _pointer(self.roots[side], schema["$ref"])
            hops += 1
            if not isinstance(target, (dict, bool)) or hops > 32:
                raise _Unresolvable(f"At {path} the {self.r if side == 'r' else self.w}'s $ref "
                                    f"{schema['$ref']!r} points at no schema")
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = target if not siblings or isinstance(target, bool) else {**target, **siblings}
        return schema

    def check(self, reader: Any, writer: Any, path: str, seen: frozenset = frozenset()) -> list[str]:
        try:
            reader, writer = self._deref(reader, "r", path), self._deref(writer, "w", path)
        except _Unresolvable as exc:
            return [_problem("REFERENCE_UNRESOLVED", str(exc))]
        if (id(reader), id(writer)) in seen:
            return []  # a recursive definition: this pair is being compared further up
        seen = seen | {(id(reader), id(writer))}
        r, w = self.r, self.w
        if reader is True or reader == {} or writer is False:
            return []
        if reader is False:
            return [_problem("SCHEMA_NARROWED", f"At {path} the {r} accepts nothing")]
        if writer is True:
            writer = {}
        refs = (reader.get("$ref"), writer.get("$ref"))
        if refs != (None, None) and refs[0] != refs[1]:
            return [_problem("REFERENCE_CHANGED", f"At {path} the {r} refers to {refs[0]!r} and the {w} to "
                                                  f"{refs[1]!r}: schemas of other subjects are not compared")]
        problems = []
        rt, wt = _types(reader), _types(writer)
        if rt is not None:
            if wt is None:
                problems.append(_problem("TYPE_NARROWED", f"At {path} the {r} requires type {sorted(rt)} and the "
                                         f"{w} allowed any type"))
            elif lost := {t for t in wt if t not in rt and not (t == "integer" and "number" in rt)}:
                problems.append(_problem("TYPE_CHANGED", f"At {path} the {r} does not accept type {sorted(lost)}"))
        if "enum" in reader:
            if "enum" not in writer or any(v not in reader["enum"] for v in writer["enum"]):
                problems.append(_problem("ENUM_ARRAY_NARROWED", f"At {path} the {r}'s enum lacks values the {w} "
                                         "allowed"))
        if added := set(reader.get("required", [])) - set(writer.get("required", [])):
            problems.append(_problem("REQUIRED_ATTRIBUTE_ADDED", f"At {path} the {r} requires {sorted(added)}, "
                                     f"which the {w} did not"))
        r_props, w_props = reader.get("properties", {}), writer.get("properties", {})
        r_closed = reader.get("additionalProperties", True) is False
        w_open = writer.get("additionalProperties", True) is not False
        for name in sorted(set(r_props) | set(w_props)):
            where = f"{path}/properties/{name}"
            if name in r_props and name in w_props:
                problems += self.check(r_props[name], w_props[name], where, seen)
            elif name in w_props and r_closed:
                problems.append(_problem("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{where} is gone from a "
                                         f"{r} that allows no other property"))
            elif name in r_props and w_open:
                problems.append(_problem("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{where} is new in the {r}, "
                                         f"and the {w} allowed any value under that name"))
        if r_closed and w_open:
            problems.append(_problem("ADDITIONAL_PROPERTIES_REMOVED", f"At {path} the {r} allows no additional "
                                     f"properties and the {w} did"))
        if isinstance(reader.get("items"), (dict, bool)) and isinstance(writer.get("items"), (dict, bool)):
            problems += self.check(reader["items"], writer["items"], f"{path}/items", seen)
        return problems


class _Unresolvable(Exception):
    pass


# Protobuf: can a parser of `reader`'s messages read bytes written with `writer`'s?

_WIRE_COMPATIBLE = [{"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"},
                    {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}, {"string", "bytes"}]


def _same_wire(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in _WIRE_COMPATIBLE)


def _protobuf(reader, writer, r: str, w: str) -> list[str]:
    problems = []
    for name, w_fields in writer.messages.items():
        r_fields = reader.messages.get(name)
        if r_fields is None:
            problems.append(_problem("MESSAGE_REMOVED", f"The message {name} is gone from the {r}"))
            continue
        for number, rf in r_fields.items():
            wf = w_fields.get(number)
            if wf is None:
                if rf.label == "required":
                    problems.append(_problem("REQUIRED_FIELD_ADDED", f"{name}.{rf.name} ({number}) is required by "
                                             f"the {r} and the {w} never wrote it"))
                continue
            if not _same_wire(rf.type, wf.type):
                problems.append(_problem("FIELD_KIND_CHANGED", f"{name} field {number} is {wf.type} in the {w} "
                                         f"and {rf.type} in the {r}"))
            elif (rf.label in ("repeated", "map")) != (wf.label in ("repeated", "map")):
                problems.append(_problem("FIELD_LABEL_CHANGED", f"{name} field {number} is {wf.label or 'singular'}"
                                         f" in the {w} and {rf.label or 'singular'} in the {r}"))
    return problems
