"""Protobuf schemas: `.proto` text (proto-schema-parser's ANTLR grammar) or a base64 `FileDescriptorProto`
(protobuf's decoder), both reduced to the same model: each message's fields by number, each enum's
values, which is what the compatibility rules compare.

The text parser checks syntax and structure; it does not resolve type names or imports (protoc
would): a field of an unknown message type is accepted, as the first registration of a file whose
imports are registered later would need.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidSchema


@dataclass(frozen=True)
class ProtoField:
    name: str
    type: str        # scalar name, or the message/enum name as written
    label: str       # "", "optional", "repeated", "required", "map"


@dataclass(frozen=True)
class ProtoModel:
    package: str
    messages: dict[str, dict[int, ProtoField]]   # full name -> field number -> field
    enums: dict[str, dict[str, int]]              # full name -> value name -> number
    normalized: str


class _Raise:
    """An ANTLR error listener that stops at the first syntax error."""

    def syntaxError(self, recognizer, offending, line, column, msg, e):  # noqa: N802 (ANTLR's name)
        raise InvalidSchema(f"Invalid schema: .proto syntax error at line {line}:{column}: {msg}")

    def reportAmbiguity(self, *args):  # noqa: N802
        pass

    def reportAttemptingFullContext(self, *args):  # noqa: N802
        pass

    def reportContextSensitivity(self, *args):  # noqa: N802
        pass


def _strict(recognizer) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raise())


def parse_text(text: str) -> ProtoModel:
    from proto_schema_parser import ast
    from proto_schema_parser.generator import Generator
    from proto_schema_parser.parser import Parser
    tree = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    package = next((e.name for e in tree.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, ProtoField]] = {}
    enums: dict[str, dict[str, int]] = {}

    def walk(elements, prefix: str) -> None:
        for element in elements:
            if isinstance(element, ast.Message):
                name = f"{prefix}{element.name}"
                fields: dict[int, ProtoField] = {}
                for item in element.elements:
                    for f in item.elements if isinstance(item, ast.OneOf) else [item]:
                        if isinstance(f, ast.Field):
                            label = f.cardinality.value.lower() if f.cardinality else ""
                            fields[f.number] = ProtoField(f.name, f.type, label)
                        elif isinstance(f, ast.MapField):
                            fields[f.number] = ProtoField(f.name, f"map<{f.key_type},{f.value_type}>", "map")
                messages[name] = fields
                walk(element.elements, f"{name}.")
            elif isinstance(element, ast.Enum):
                enums[f"{prefix}{element.name}"] = {v.name: v.number for v in element.elements
                                                    if isinstance(v, ast.EnumValue)}
    walk(tree.file_elements, f"{package}." if package else "")
    return ProtoModel(package, messages, enums, Generator().generate(tree))


_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_LABELS = {1: "optional", 2: "required", 3: "repeated"}


def parse_descriptor(raw: bytes, text: str) -> ProtoModel:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except DecodeError as exc:
        raise InvalidSchema(f"Invalid schema: neither .proto text nor a serialized FileDescriptorProto ({exc})")
    if not proto.name and not proto.message_type and not proto.enum_type:
        raise InvalidSchema("Invalid schema: the base64 text decodes to an empty FileDescriptorProto")
    messages: dict[str, dict[int, ProtoField]] = {}
    enums: dict[str, dict[str, int]] = {}
    proto3 = proto.syntax == "proto3"

    def walk(message_types, enum_types, prefix: str) -> None:
        for enum in enum_types:
            enums[f"{prefix}{enum.name}"] = {v.name: v.number for v in enum.value}
        for message in message_types:
            name = f"{prefix}{message.name}"
            fields = {}
            for f in message.field:
                type_name = f.type_name.lstrip(".").removeprefix(f"{proto.package}.") if f.type_name else ""
                label = _LABELS.get(f.label, "")
                if proto3 and label == "optional" and not f.proto3_optional:
                    label = ""
                fields[f.number] = ProtoField(f.name, _SCALARS.get(f.type) or type_name, label)
            messages[name] = fields
            walk(message.nested_type, message.enum_type, f"{name}.")
    package = proto.package
    walk(proto.message_type, proto.enum_type, f"{package}." if package else "")
    return ProtoModel(package, messages, enums, text.strip())
