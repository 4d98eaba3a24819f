"""The three schema languages, parsed and checked by their own libraries.

`parse(schema_type, text, references)` turns a schema as a client sends it into a `ParsedSchema`:
its text as the registry stores and returns it (`canonical`: compact JSON for Avro and JSON Schema,
the text as given for Protobuf), its normalized form (`normalized`, what `normalize=true` stores and
compares), and the model the compatibility rules read (`model`). `references` are the already
resolved schemas the text refers to, as (reference name, schema), in the order they were given.

- AVRO: fastavro's `parse_schema` (named types, defaults checked against their types); the model is
  the parsed schema with full names and the named types it may refer to.
- JSON: jsonschema's validator for the schema's `$schema` (draft 2020-12 when absent) and its
  `check_schema` (references must exist in the registry; the checks do not follow them).
- PROTOBUF: `.proto` text compiled by protoc (grpcio-tools' protoc: syntax, type names, imports
  served from the references), or a base64 `FileDescriptorProto` (the form confluent-kafka's
  ProtobufSerializer registers) decoded by protobuf (registry/protobuf.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidSchema

TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class ParsedSchema:
    schema_type: str
    canonical: str
    normalized: str
    model: Any = field(compare=False, repr=False)


def parse(schema_type: str, text: str, references: list[tuple[str, ParsedSchema]] | None = None) -> ParsedSchema:
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("Invalid schema: the request has no schema text")
    refs = references or []
    if schema_type == "AVRO":
        return _avro(text, refs)
    if schema_type == "JSON":
        return _json_schema(text)
    if schema_type == "PROTOBUF":
        return _protobuf(text, refs)
    raise InvalidSchema(f"Invalid schema type {schema_type!r}: this registry serves {', '.join(TYPES)}")


def _compact(obj: Any, sort: bool = False) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=sort, ensure_ascii=False)


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid schema {text[:200]}: {what} is not JSON: {exc}") from None


@dataclass(frozen=True)
class AvroModel:
    schema: Any                  # fastavro's parsed schema: full names, named types referred to by name
    named: dict[str, Any]        # every named type it may refer to (its own and its references')


def _avro(text: str, refs: list[tuple[str, ParsedSchema]]) -> ParsedSchema:
    from fastavro.schema import SchemaParseException, UnknownType, parse_schema
    obj = _load_json(text, "an Avro schema")  # (a primitive is a JSON string: "\"long\"")
    named: dict[str, Any] = {}
    for _name, ref in refs:
        if ref.schema_type != "AVRO":
            raise InvalidSchema(f"Invalid schema {text[:200]}: an Avro schema can only refer to Avro schemas")
        named.update(ref.model.named)
    try:
        parsed = parse_schema(obj, named_schemas=named, _write_hint=False)
    except UnknownType as exc:
        raise InvalidSchema(f"Invalid schema {text[:200]}, details: unknown type {exc.name!r} (a missing "
                            "reference?)") from None
    except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchema(f"Invalid schema {text[:200]}, details: {exc}") from None
    canonical = _compact(obj)
    if isinstance(obj, dict) and set(obj) == {"type"} and isinstance(obj["type"], str):
        canonical = json.dumps(obj["type"])  # {"type": "string"} is "string", as Avro prints it
    return ParsedSchema("AVRO", canonical, _compact(parsed, sort=True), AvroModel(parsed, named))


def _json_schema(text: str) -> ParsedSchema:
    import jsonschema
    obj = _load_json(text, "a JSON schema")
    if not isinstance(obj, (dict, bool)):
        raise InvalidSchema(f"Invalid schema {text[:200]}: a JSON schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(obj, default=jsonschema.Draft202012Validator).check_schema(obj)
    except jsonschema.SchemaError as exc:
        raise InvalidSchema(f"Invalid schema {text[:200]}, details: {exc.message}") from None
    return ParsedSchema("JSON", _compact(obj), _compact(obj, sort=True), obj)


def _protobuf(text: str, refs: list[tuple[str, ParsedSchema]]) -> ParsedSchema:
    from . import protobuf
    if any(ref.schema_type != "PROTOBUF" for _name, ref in refs):
        raise InvalidSchema("Invalid schema: a Protobuf schema can only import Protobuf schemas")
    model = protobuf.parse(text, [(name, ref.model) for name, ref in refs])
    return ParsedSchema("PROTOBUF", text.strip(), model.normalized, model)
