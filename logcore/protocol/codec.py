"""The kio wrapper: request decoding, response building and encoding, and the client side's request
encoding and response decoding. Only logcore/protocol/ imports kio: this module for its classes,
readers and writers (and `ErrorCode`, which everyone takes from here), schema.py for its field
introspection; the rest of logcore reaches kio through them.

Handlers never see a version-specific response class. They return neutral data (dicts, lists,
plain ints/strings, ErrorCode, FileRegion for record bytes) and `encode_response` writes the
negotiated version from it, dropping keys that version lacks and zero-filling fields the handler
left out; `build` makes the same version's kio dataclass from the same data by the same rules.

Record bytes that stay in a segment file travel as `FileRegion`s: `encode_response` returns the
frame as bytes chunks with the regions between them, so the server can `sendfile` the regions.
"""

from __future__ import annotations

import datetime
import enum
import io
import os
import struct
import uuid
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any, Callable

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._serialize import get_field_writer
from kio.static.constants import EntityType

from .bounds import check_request, compile_checks
from .schema import FieldPlan, field_plan
from .varint import uvarint as _uvarint

__all__ = ["ApiKey", "ErrorCode", "FileRegion", "build", "prepare", "request_class", "response_class"]

ApiKey = enum.IntEnum("ApiKey", {name.upper(): key for key, name in api_key_map.items()})


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `position` of an open file, to be sent without copying into Python."""

    fd: int
    position: int
    length: int

    def __len__(self) -> int:  # bytes on the wire, like the bytes chunks around it
        return self.length

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)


@cache
def request_class(api_key: int, version: int) -> type:
    """kio's request dataclass for (api_key, version); KeyError-like kio errors if it has none."""
    return _entity_class(api_key, version, EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type:
    return _entity_class(api_key, version, EntityType.response)


def _entity_class(api_key: int, version: int, kind: EntityType) -> type:
    module = load_payload_module(api_key, version, kind)
    name = api_key_map[api_key]
    suffix = "Request" if kind is EntityType.request else "Response"
    wanted = "".join(part.capitalize() for part in name.split("_")) + suffix
    for value in vars(module).values():
        if getattr(value, "__type__", None) is kind and getattr(value, "__api_key__", None) == api_key:
            if value.__name__.lower() == wanted.lower():
                return value
    raise LookupError(f"kio has no {kind.name} class for api {api_key} v{version}")


def prepare(api_key: int, version: int) -> None:
    """Load and compile all that serving (api_key, version) uses: its classes, their readers, the
    bounds checks and the response encoder. Each is built on first use and cached, and kio imports a
    version's schema module then too (tens of milliseconds, several times that on a busy machine),
    so the first request of a version waits for it, and every connection's requests behind it."""
    request_cls = request_class(api_key, version)
    header_cls = request_cls.__header_schema__
    compile_checks(header_cls, request_cls)
    _reader(header_cls)
    _reader(request_cls)
    _encoder(response_class(api_key, version))


def has_schema(api_key: int, version: int) -> bool:
    try:
        request_class(api_key, version)
        response_class(api_key, version)
    except Exception:
        return False
    return True


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def read_request(frame: memoryview, request_cls: type) -> tuple[Any, Any]:
    """(header, body) entities of one request frame (without its size prefix), with the header
    version this request class implies. MalformedRequest, before kio's native reader sees a byte,
    when a length overruns the frame or a null stands where the schema allows none (bounds.py)."""
    header_cls = request_cls.__header_schema__
    check_request(frame, header_cls, request_cls)
    header, used = _reader(header_cls)(frame, 0)
    body, _size = _reader(request_cls)(frame, used)
    return header, body


# ---------------------------------------------------------------------------------------------
# Building responses from neutral data


_ZERO = {
    "bool": False,
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
    "string": "", "bytes": b"", "records": None,
    "error_code": ErrorCode.none,
    "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": None,
}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _convert(kafka_type: str | None, value: Any) -> Any:
    if value is None:
        return None
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


class _Builder:
    def entity(self, cls: type, data: dict) -> Any:
        kwargs = {}
        for plan in field_plan(cls):
            if plan.name in data:
                kwargs[plan.name] = self.value(plan, data[plan.name])
            elif plan.default is MISSING:
                kwargs[plan.name] = self.zero(plan)
        return cls(**kwargs)

    def value(self, plan: FieldPlan, value: Any) -> Any:
        if value is None:
            return None if plan.optional or plan.is_array else self.zero(plan)
        if plan.nested is not None:
            if plan.is_array:
                return tuple(self.entity(plan.nested, item) for item in value)
            return self.entity(plan.nested, value)
        if plan.is_array:
            return tuple(_convert(plan.kafka_type, v) for v in value)
        if isinstance(value, FileRegion):
            raise ValueError("FileRegion values need encode_response")
        return _convert(plan.kafka_type, value)

    def zero(self, plan: FieldPlan) -> Any:
        if plan.is_array:
            return None if plan.optional else ()
        if plan.nested is not None:
            return None if plan.optional else self.entity(plan.nested, {})
        if plan.optional:
            return None
        return _ZERO[plan.kafka_type]  # type: ignore[index]


def build(cls: type, data: dict) -> Any:
    """Fill kio dataclass `cls` from neutral `data` (no FileRegions allowed)."""
    return _Builder().entity(cls, data)


# ---------------------------------------------------------------------------------------------
# Encoding responses straight from neutral data
#
# Building kio's dataclass tree and writing it with kio's validating writer cost more than most
# handlers (tens of µs for a produce response), so responses are written directly from the
# handler's data by encoders compiled once per class from the same kio schema: field order,
# kafka types, flexible versions and tags. They follow `build`'s rules for missing and None values
# and kio's wire format byte for byte (tests/test_codec_encoder.py holds them to both).


def response_header_flexible(api_key: int, response_cls: type) -> bool:
    # ApiVersions answers with header v0 always, so a client that asked too new a version can parse it.
    return response_cls.__flexible__ and api_key != ApiKey.API_VERSIONS


def encode_response(api_key: int, version: int, correlation_id: int, data: dict) -> list[bytes | FileRegion]:
    """The whole response frame (size prefix included) as bytes chunks and file regions."""
    cls = response_class(api_key, version)
    parts: list = [b"", _INT32.pack(correlation_id)]
    if response_header_flexible(api_key, cls):
        parts.append(b"\0")  # empty tagged fields of response header v1
    _encoder(cls)(parts, data)
    parts[0] = _INT32.pack(sum(map(len, parts)))
    chunks: list[bytes | FileRegion] = []
    start = 0
    for i in [i for i, part in enumerate(parts) if type(part) is FileRegion]:
        chunks += (b"".join(parts[start:i]), parts[i])
        start = i + 1
    chunks.append(b"".join(parts[start:]))
    return chunks


_INT32 = struct.Struct(">i")
Encoder = Callable[[list, Any], None]  # appends one value's bytes (and FileRegions) to a list of parts


@cache
def _encoder(cls: type) -> Encoder:
    """Writes one entity of `cls` from a dict of neutral data."""
    emitters = [_field_emitter(plan, cls.__flexible__) for plan in field_plan(cls) if plan.tag is None]
    tagged = [plan for plan in field_plan(cls) if plan.tag is not None]
    when_absent = _tagged_fields(cls, tagged, {})  # the usual case: the handler set no tagged field

    def encode(parts: list, data: dict) -> None:
        for emit in emitters:
            emit(parts, data)
        if tagged and any(plan.name in data for plan in tagged):
            parts.append(_tagged_fields(cls, tagged, data))
        elif cls.__flexible__:
            parts.append(when_absent)

    return encode


def _field_emitter(plan: FieldPlan, flexible: bool) -> Encoder:
    """Emits one field: the handler's value, or what `build` puts there when it is missing or None."""
    name, write = plan.name, _value_writer(plan, flexible)
    if plan.is_array:
        none = None
        absent = plan.default if plan.default is not MISSING else (None if plan.optional else ())
    elif plan.nested is not None:
        none = None if plan.optional else {}
        absent = plan.default if plan.default is not MISSING else none
    else:
        none = None if plan.optional else _ZERO[plan.kafka_type]
        absent = plan.default if plan.default is not MISSING else none

    def emit(parts: list, data: dict) -> None:
        value = data.get(name, absent)
        write(parts, none if value is None else value)

    return emit


def _value_writer(plan: FieldPlan, flexible: bool) -> Encoder:
    if plan.nested is not None:
        item = _encoder(plan.nested)
        if not plan.is_array and plan.optional:  # KIP-893 nullable struct: an int8 marker first
            def write_nullable(parts: list, value) -> None:
                if value is None:
                    parts.append(b"\xff")
                else:
                    parts.append(b"\x01")
                    item(parts, value)
            return write_nullable
    else:
        item = _primitive_writer(plan.kafka_type, flexible)
    if not plan.is_array:
        return item
    if flexible:
        def write_compact_array(parts: list, items) -> None:
            if items is None:
                parts.append(b"\0")
                return
            parts.append(_uvarint(len(items) + 1))
            for value in items:
                item(parts, value)
        return write_compact_array

    def write_legacy_array(parts: list, items) -> None:
        if items is None:
            parts.append(_INT32.pack(-1))
            return
        parts.append(_INT32.pack(len(items)))
        for value in items:
            item(parts, value)
    return write_legacy_array


_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint8": ">B", "uint16": ">H",
          "uint32": ">I", "uint64": ">Q", "float64": ">d", "bool": ">?", "error_code": ">h"}


def _millis(value) -> int:
    """Neutral milliseconds, or the timedelta / datetime a kio entity would hold."""
    if isinstance(value, int):
        return value
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return round(value.timestamp() * 1000)


def _primitive_writer(kafka_type: str, flexible: bool) -> Encoder:
    if kafka_type in _FIXED:
        pack = struct.Struct(_FIXED[kafka_type]).pack
        return lambda parts, value: parts.append(pack(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64"):
        pack = struct.Struct(">i" if kafka_type == "timedelta_i32" else ">q").pack
        return lambda parts, value: parts.append(pack(-1 if value is None else _millis(value)))
    if kafka_type == "uuid":
        return lambda parts, value: parts.append((value or _ZERO["uuid"]).bytes)
    if kafka_type in ("string", "bytes", "records"):
        return _bytes_writer(flexible, 2 if kafka_type == "string" else 4)
    raise LookupError(f"no encoder for kafka type {kafka_type!r}")


def _bytes_writer(flexible: bool, legacy_length_size: int) -> Encoder:
    """Strings, bytes and record sets: a compact (uvarint length + 1) or legacy (int16 for strings,
    int32 for bytes) length, then the bytes; null is length 0 (compact) or -1 (legacy)."""
    legacy = struct.Struct(">h" if legacy_length_size == 2 else ">i").pack

    def write(parts: list, value) -> None:
        if value is None:
            parts.append(b"\0" if flexible else legacy(-1))
            return
        if type(value) is str:
            value = value.encode()
        parts.append(_uvarint(len(value) + 1) if flexible else legacy(len(value)))
        parts.append(value)

    return write


def _tagged_fields(cls: type, tagged: list[FieldPlan], data: dict) -> bytes:
    """Tagged fields that differ from their defaults, written by kio (they are rare, and this keeps
    kio's notion of each field's default)."""
    builder = _Builder()
    written = []
    for plan in tagged:
        if plan.name in data:
            value = builder.value(plan, data[plan.name])
        elif plan.default is MISSING:
            value = builder.zero(plan)
        else:
            continue
        default = plan.default if plan.default is not MISSING else _implicit_default(cls, plan.name)
        if value == default:
            continue
        buf = io.BytesIO()
        _tag_writer(cls, plan.name)(buf, value)
        written.append(_uvarint(plan.tag) + _uvarint(len(buf.getvalue())) + buf.getvalue())
    return _uvarint(len(written)) + b"".join(written)


@cache
def _tag_writer(cls: type, name: str):
    field = next(f for f in fields(cls) if f.name == name)
    return get_field_writer(field, flexible=True, is_request_header=False, is_tag=True)


@cache
def _implicit_default(cls: type, name: str) -> Any:
    return get_tagged_field_default(next(f for f in fields(cls) if f.name == name))


def encode_error_frame(correlation_id: int, code: ErrorCode) -> bytes:
    """Last-resort answer for a request whose response schema we do not have: correlation id and an
    error code, which is how every response's leading error field reads in the legacy versions."""
    payload = struct.pack(">ih", correlation_id, code.value)
    return struct.pack(">i", len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# The client side (client.py's ClientConnection; tests that write raw frames)


def encode_request(entity: Any, correlation_id: int, client_id: str | None = "binlake") -> bytes:
    """The whole request frame (size prefix included) for kio request `entity`."""
    header_cls = entity.__header_schema__
    header = header_cls(request_api_key=entity.__api_key__, request_api_version=entity.__version__,
                        correlation_id=correlation_id, client_id=client_id)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header)
    _writer(type(entity))(buf, entity)
    body = buf.getbuffer()
    struct.pack_into(">i", body, 0, len(body) - 4)
    return bytes(body)


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio response entity) from one response frame without its size prefix."""
    cls = response_class(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame)
    offset = 4
    if response_header_flexible(api_key, cls):
        offset += 1  # the header's tagged fields: none
    value, _size = _reader(cls)(memoryview(frame), offset)
    return correlation_id, value
