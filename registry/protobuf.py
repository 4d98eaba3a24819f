"""Protobuf schemas, compiled by protoc (grpcio-tools' protoc, in process): `.proto` text, or a base64
`FileDescriptorProto` (the form confluent-kafka's ProtobufSerializer registers). Both become the same
model: the file's descriptor, each message's fields by number and each enum's values, which the
compatibility rules compare.

protoc checks what a registry must: syntax, that every type a field names is defined in the file or
in an import, and that every import is a reference (Google's well-known types come with protoc).
References are handed to it as compiled descriptors under their reference names (the import paths),
their own imports with them. The normalized text is proto-schema-parser's printing of the file.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.resources
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidSchema

MAIN = "schema.proto"  # the name a schema is compiled under (its references keep their own)


@dataclass(frozen=True)
class ProtoField:
    name: str
    type: str        # scalar name, or the message/enum's full name
    label: str       # "", "optional", "repeated", "required"


@dataclass(frozen=True)
class ProtoModel:
    package: str
    messages: dict[str, dict[int, ProtoField]]   # full name -> field number -> field
    enums: dict[str, dict[str, int]]              # full name -> value name -> number
    descriptor: bytes                             # the serialized FileDescriptorProto
    files: dict[str, bytes]                       # every import, by import path -> its FileDescriptorProto
    normalized: str


def parse(text: str, references: list[tuple[str, "ProtoModel"]]) -> ProtoModel:
    """`text` as .proto text or base64 descriptor; `references`: (import path, model) of each reference."""
    from google.protobuf import descriptor_pb2
    files = {}
    for name, model in references:
        files.update(model.files)
        files[name] = _renamed(model.descriptor, name)
    raw = _base64_descriptor(text)
    if raw is not None:
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception as exc:  # protobuf's DecodeError, or a message it cannot build
            raise InvalidSchema(f"Invalid schema: not a serialized FileDescriptorProto ({exc})") from None
        if not proto.name and not proto.message_type and not proto.enum_type:
            raise InvalidSchema("Invalid schema: the base64 text decodes to an empty FileDescriptorProto")
        if missing := [d for d in proto.dependency if d not in files and not _well_known(d)]:
            raise InvalidSchema(f"Invalid schema: imports {missing} are not among its references")
        return _model(proto, files, text.strip())
    proto = _compile(text, files)
    return _model(proto, files, _printed(text))


def _base64_descriptor(text: str) -> bytes | None:
    stripped = text.strip()
    if "{" in stripped or ";" in stripped:
        return None
    try:
        return base64.b64decode(stripped, validate=True)
    except ValueError:
        return None


def _renamed(descriptor: bytes, name: str) -> bytes:
    from google.protobuf import descriptor_pb2
    proto = descriptor_pb2.FileDescriptorProto.FromString(descriptor)
    proto.name = name
    return proto.SerializeToString()


def _well_known(name: str) -> bool:
    return (importlib.resources.files("grpc_tools") / "_proto" / name).is_file()


def _compile(text: str, files: dict[str, bytes]):
    """protoc's FileDescriptorProto of `text`, its imports served from `files`; InvalidSchema with
    protoc's messages when it refuses."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc
    includes = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="registry-protoc-") as tmp:
        work = Path(tmp)
        (work / "src").mkdir()
        (work / "src" / MAIN).write_text(text)
        args = ["protoc", f"-I{work / 'src'}", f"-I{includes}", f"--descriptor_set_out={work / 'out.pb'}"]
        if files:
            known = descriptor_pb2.FileDescriptorSet(
                file=[descriptor_pb2.FileDescriptorProto.FromString(raw) for raw in files.values()])
            (work / "in.pb").write_bytes(known.SerializeToString())
            args.append(f"--descriptor_set_in={work / 'in.pb'}")
        with _stderr_to(work / "errors") as errors:
            status = protoc.main([*args, MAIN])
        if status != 0:
            reasons = errors.read_text().replace(str(work / "src") + "/", "").strip() or f"protoc exit {status}"
            raise InvalidSchema(f"Invalid schema: {reasons}")
        [proto] = descriptor_pb2.FileDescriptorSet.FromString((work / "out.pb").read_bytes()).file
        return proto


@contextlib.contextmanager
def _stderr_to(path: Path):
    """protoc (C++) writes its messages to file descriptor 2: catch them in `path` for the answer. The
    event loop's thread is the only one that writes to stderr, and it is inside this call."""
    saved = os.dup(2)
    with open(path, "w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield path
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _printed(text: str) -> str:
    """The normalized text: proto-schema-parser's printing of the file (layout and spacing made uniform);
    the text itself, stripped, where that parser does not follow syntax protoc accepted."""
    from proto_schema_parser.generator import Generator
    from proto_schema_parser.parser import Parser
    try:
        return Generator().generate(Parser(setup_lexer=_strict, setup_parser=_strict).parse(text))
    except _Unprintable:
        return text.strip()


class _Unprintable(Exception):
    pass


class _Raise:
    """An ANTLR error listener that stops at the first syntax error."""

    def syntaxError(self, recognizer, offending, line, column, msg, e):  # noqa: N802 (ANTLR's names)
        raise _Unprintable(f"line {line}:{column}: {msg}")

    def reportAmbiguity(self, *args):  # noqa: N802
        pass

    def reportAttemptingFullContext(self, *args):  # noqa: N802
        pass

    def reportContextSensitivity(self, *args):  # noqa: N802
        pass


def _strict(recognizer) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raise())


_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_LABELS = {1: "optional", 2: "required", 3: "repeated"}


def _model(proto, files: dict[str, bytes], normalized: str) -> ProtoModel:
    messages: dict[str, dict[int, ProtoField]] = {}
    enums: dict[str, dict[str, int]] = {}
    proto3 = proto.syntax == "proto3"
    prefix = f"{proto.package}." if proto.package else ""

    def walk(message_types, enum_types, scope: str) -> None:
        for enum in enum_types:
            enums[f"{scope}{enum.name}"] = {v.name: v.number for v in enum.value}
        for message in message_types:
            name = f"{scope}{message.name}"
            fields = {}
            for f in message.field:
                label = _LABELS.get(f.label, "")
                if proto3 and label == "optional" and not f.proto3_optional:
                    label = ""  # proto3's implicit presence: protoc labels it optional
                fields[f.number] = ProtoField(f.name, _SCALARS.get(f.type) or f.type_name.lstrip("."), label)
            messages[name] = fields
            walk(message.nested_type, message.enum_type, f"{name}.")
    walk(proto.message_type, proto.enum_type, prefix)
    return ProtoModel(proto.package, messages, enums, proto.SerializeToString(), files, normalized)
