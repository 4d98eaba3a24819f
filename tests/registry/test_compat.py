"""The registry's compatibility rules as pure functions (registry/compat.py, registry/avro_compat.py):
Avro's schema resolution under each level, and the JSON Schema and Protobuf rules; no server."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import timestamp_pb2

from registry.compat import is_compatible
from registry.errors import InvalidSchema
from registry.schemas import parse


def avro(*fields, name="User", **extra) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", **extra, "fields": list(fields)})


NAME = {"name": "name", "type": "string"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE = {"name": "age", "type": "int"}


def check(new: str, olds: list[str], level: str, schema_type: str = "AVRO") -> list[str]:
    """Reasons `new` may not follow `olds` (oldest first) under `level`."""
    parsed = [(n + 1, parse(schema_type, text)) for n, text in enumerate(olds)]
    return is_compatible(parse(schema_type, new), parsed[::-1], level)


@pytest.mark.parametrize("level, new, ok", [
    ("BACKWARD", avro(NAME, AGE_DEFAULT), True),      # the new reader fills age from its default
    ("BACKWARD", avro(NAME, AGE), False),             # ... and cannot without one
    ("FORWARD", avro(NAME, AGE), True),               # old readers ignore the new field
    ("FULL", avro(NAME, AGE), False),
    ("FULL", avro(NAME, AGE_DEFAULT), True),
    ("NONE", avro({"name": "name", "type": "int"}), True),
])
def test_adding_a_field_under_each_level(level, new, ok):
    assert (check(new, [avro(NAME)], level) == []) is ok


def test_removing_a_field_breaks_forward_unless_it_had_a_default():
    old = avro(NAME, AGE)
    assert check(avro(NAME), [old], "BACKWARD") == []
    [reason, *context] = check(avro(NAME), [old], "FORWARD")
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in reason and "'age'" in reason and "old schema" in reason
    assert "{oldSchemaVersion: 1}" in context and "{compatibility: 'FORWARD'}" in context
    assert check(avro(NAME), [avro(NAME, AGE_DEFAULT)], "FORWARD") == []


@pytest.mark.parametrize("writer, reader, ok", [
    ("int", "long", True), ("int", "double", True), ("long", "float", True), ("float", "double", True),
    ("string", "bytes", True), ("bytes", "string", True),
    ("long", "int", False), ("double", "float", False), ("string", "int", False),
    ("int", ["null", "long"], True), (["null", "int"], ["null", "long"], True),
    (["null", "int"], "int", False), (["int", "string"], ["null", "int"], False),
])
def test_promotions_and_unions(writer, reader, ok):
    old, new = avro({"name": "v", "type": writer}), avro({"name": "v", "type": reader})
    assert (check(new, [old], "BACKWARD") == []) is ok


def test_enum_symbols_and_names():
    def enum(*symbols, **extra):
        return avro({"name": "s", "type": {"type": "enum", "name": "Status", "symbols": list(symbols), **extra}})
    assert check(enum("A", "B", "C"), [enum("A", "B")], "BACKWARD") == []
    assert "MISSING_ENUM_SYMBOLS" in check(enum("A"), [enum("A", "B")], "BACKWARD")[0]
    assert check(enum("A", "Z", default="Z"), [enum("A", "B")], "BACKWARD") == []
    assert "NAME_MISMATCH" in check(avro(NAME, name="Customer"), [avro(NAME)], "BACKWARD")[0]
    assert check(avro(NAME, name="Customer", aliases=["shop.User"]), [avro(NAME)], "BACKWARD") == []


def test_fixed_sizes_arrays_maps_and_recursion():
    def field(t):
        return avro({"name": "f", "type": t})
    assert "FIXED_SIZE_MISMATCH" in check(field({"type": "fixed", "name": "H", "size": 8}),
                                          [field({"type": "fixed", "name": "H", "size": 16})], "BACKWARD")[0]
    assert check(field({"type": "array", "items": "long"}), [field({"type": "array", "items": "int"})],
                 "BACKWARD") == []
    assert check(field({"type": "map", "values": "int"}), [field({"type": "map", "values": "long"})],
                 "BACKWARD") != []
    node = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"},
                                                          {"name": "next", "type": ["null", "Node"]}]}
    assert check(json.dumps(node), [json.dumps(node)], "FULL") == []


def test_transitive_levels_check_every_version_and_the_others_only_the_latest():
    v1 = avro(NAME)
    v2 = avro(NAME, AGE_DEFAULT)
    v3 = avro({"name": "name", "type": "string", "default": ""}, AGE_DEFAULT)  # v3 reads v2 and v1
    v4 = avro(AGE_DEFAULT)  # drops name: reads v3 (a default there does not matter to a reader) ...
    assert check(v4, [v1, v2, v3], "FORWARD") == []                   # latest (v3) reads v4: name has a default
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in check(v4, [v1, v2, v3], "FORWARD_TRANSITIVE")[0]  # v1 cannot


def test_json_schema_rules():
    def obj(props, **extra):
        return json.dumps({"type": "object", "properties": props, **extra})
    closed = {"additionalProperties": False}
    assert check(obj({"a": {"type": "number"}}), [obj({"a": {"type": "integer"}})], "BACKWARD", "JSON") == []
    assert "TYPE_CHANGED" in check(obj({"a": {"type": "string"}}), [obj({"a": {"type": "integer"}})], "BACKWARD",
                                   "JSON")[0]
    assert "REQUIRED_ATTRIBUTE_ADDED" in check(obj({"a": {}}, required=["a"]), [obj({"a": {}})], "BACKWARD",
                                               "JSON")[0]
    # a property added to a closed model is backward compatible; to an open one it is not (Confluent's rule)
    assert check(obj({"a": {}, "b": {}}, **closed), [obj({"a": {}}, **closed)], "BACKWARD", "JSON") == []
    assert "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in check(obj({"a": {}, "b": {}}), [obj({"a": {}})], "BACKWARD",
                                                           "JSON")[0]


def test_protobuf_rules_on_text_and_on_descriptors():
    def proto(body):
        return f'syntax = "proto3"; package shop; {body}'
    assert check(proto("message M { int64 x = 1; string y = 2; }"), [proto("message M { int32 x = 1; }")],
                 "BACKWARD", "PROTOBUF") == []
    assert "FIELD_KIND_CHANGED" in check(proto("message M { double x = 1; }"), [proto("message M { int32 x = 1; }")],
                                         "BACKWARD", "PROTOBUF")[0]
    assert "MESSAGE_REMOVED" in check(proto("message N { int32 x = 1; }"), [proto("message M { int32 x = 1; }")],
                                      "BACKWARD", "PROTOBUF")[0]
    # the base64 FileDescriptorProto form, which confluent-kafka's ProtobufSerializer registers
    timestamp = parse("PROTOBUF", base64.b64encode(timestamp_pb2.DESCRIPTOR.serialized_pb).decode())
    assert timestamp.model.messages["google.protobuf.Timestamp"][1].type == "int64"


@pytest.mark.parametrize("schema_type, text", [
    ("AVRO", '{"type": "record", "name": "X", "fields": [{"name": "a", "type": "int", "default": "no"}]}'),
    ("AVRO", '{"type": "record", "name": "X", "fields": [{"name": "a", "type": "Missing"}]}'),
    ("AVRO", "{not json"),
    ("JSON", '{"type": 12}'),
    ("PROTOBUF", "message { int32 x = 1; }"),
    ("XML", "<a/>"),
])
def test_invalid_schemas_are_refused_with_the_reason(schema_type, text):
    with pytest.raises(InvalidSchema, match="Invalid schema"):
        parse(schema_type, text)


def test_protoc_resolves_types_and_imports_through_references():
    common = parse("PROTOBUF", 'syntax = "proto3"; package shop; message Money { int64 cents = 1; }')
    order = 'syntax = "proto3"; package shop; import "money.proto"; import "google/protobuf/timestamp.proto";\n' \
            "message Order { Money total = 1; google.protobuf.Timestamp at = 2; }"
    parsed = parse("PROTOBUF", order, [("money.proto", common)])
    assert parsed.model.messages["shop.Order"][1].type == "shop.Money"
    with pytest.raises(InvalidSchema, match="money.proto"):  # the import is not a reference
        parse("PROTOBUF", order)
    with pytest.raises(InvalidSchema, match='"Missing" is not defined'):
        parse("PROTOBUF", 'syntax = "proto3"; message M { Missing m = 1; }')


def test_json_schema_local_references_are_followed_and_other_subjects_compared_by_name():
    def doc(id_type, recursive=False):
        node = {"type": "object", "properties": {"id": {"type": id_type}}}
        if recursive:
            node["properties"]["next"] = {"$ref": "#/$defs/Node"}
        return json.dumps({"$defs": {"Node": node}, "$ref": "#/$defs/Node"})
    assert check(doc("number"), [doc("integer")], "BACKWARD", "JSON") == []
    [reason, *_] = check(doc("string"), [doc("integer")], "BACKWARD", "JSON")
    assert "TYPE_CHANGED" in reason and "#/properties/id" in reason
    assert check(doc("integer", True), [doc("integer", True)], "FULL", "JSON") == []   # recursion ends
    broken = json.dumps({"$ref": "#/$defs/Missing"})
    assert "REFERENCE_UNRESOLVED" in check(broken, [doc("integer")], "BACKWARD", "JSON")[0]
    assert "REFERENCE_CHANGED" in check(json.dumps({"$ref": "b.json"}), [json.dumps({"$ref": "a.json"})],
                                        "BACKWARD", "JSON")[0]
    assert check(json.dumps({"$ref": "a.json"}), [json.dumps({"$ref": "a.json"})], "BACKWARD", "JSON") == []
