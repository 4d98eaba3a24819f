"""The one module that talks to kio: request decoding, response building and encoding.

Handlers never see a version-specific response class. They return neutral data (dicts, lists,
plain ints/strings, ErrorCode, FileRegion for record bytes) and `build` fills the negotiated
version's frozen dataclass, dropping keys that version lacks and zero-filling fields the handler
left out.

Record bytes that stay in a segment file travel as `FileRegion`s: the response is serialized with a
short unique marker in place of each region, and `encode_response` splits the output around the
markers so the server can `sendfile` the regions between the bytes kio wrote.
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
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional
from kio.static.constants import EntityType

__all__ = ["ApiKey", "ErrorCode", "FileRegion", "build", "request_class", "response_class"]

ApiKey = enum.IntEnum("ApiKey", {name.upper(): key for key, name in api_key_map.items()})


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `position` of an open file, to be sent without copying into Python."""

    fd: int
    position: int
    length: int

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


def read_request_header(frame: memoryview, request_cls: type) -> tuple[Any, int]:
    """(header entity, bytes consumed) using the header version this request class implies."""
    return _reader(request_cls.__header_schema__)(frame, 0)


def read_request_body(frame: memoryview, offset: int, request_cls: type) -> Any:
    value, _size = _reader(request_cls)(frame, offset)
    return value


# ---------------------------------------------------------------------------------------------
# Building responses from neutral data


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kafka_type: str | None
    nested: type | None  # entity class for entity / entity-tuple fields
    is_array: bool
    optional: bool
    default: Any


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plans = []
    for f in fields(cls):
        kind = classify_field(f)
        nested = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = MISSING
        plans.append(
            _FieldPlan(
                name=f.name,
                kafka_type=f.metadata.get("kafka_type"),
                nested=nested,
                is_array=isinstance(kind, (EntityTupleField, PrimitiveTupleField)),
                optional=is_optional(f),
                default=default,
            )
        )
    return tuple(plans)


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
    def __init__(self) -> None:
        self.regions: list[FileRegion] = []

    def entity(self, cls: type, data: dict) -> Any:
        kwargs = {}
        for plan in _plan(cls):
            if plan.name in data:
                kwargs[plan.name] = self.value(plan, data[plan.name])
            elif plan.default is MISSING:
                kwargs[plan.name] = self.zero(plan)
        return cls(**kwargs)

    def value(self, plan: _FieldPlan, value: Any) -> Any:
        if value is None:
            return None if plan.optional or plan.is_array else self.zero(plan)
        if plan.nested is not None:
            if plan.is_array:
                return tuple(self.entity(plan.nested, item) for item in value)
            return self.entity(plan.nested, value)
        if plan.is_array:
            return tuple(_convert(plan.kafka_type, v) for v in value)
        if isinstance(value, FileRegion):
            self.regions.append(value)
            return _marker(len(self.regions) - 1)
        return _convert(plan.kafka_type, value)

    def zero(self, plan: _FieldPlan) -> Any:
        if plan.is_array:
            return None if plan.optional else ()
        if plan.nested is not None:
            return None if plan.optional else self.entity(plan.nested, {})
        if plan.optional:
            return None
        return _ZERO[plan.kafka_type]  # type: ignore[index]


def build(cls: type, data: dict) -> Any:
    """Fill kio dataclass `cls` from neutral `data` (no FileRegions allowed)."""
    builder = _Builder()
    entity = builder.entity(cls, data)
    if builder.regions:
        raise ValueError("FileRegion values need encode_response")
    return entity


# ---------------------------------------------------------------------------------------------
# Encoding

_MARKER_TAG = b"\x00\xffbinlake-rec" + os.urandom(4)  # 17 bytes, then a 4-byte index


def _marker(index: int) -> bytes:
    return _MARKER_TAG + struct.pack(">I", index)


_MARKER_LEN = len(_marker(0))


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def response_header_flexible(api_key: int, response_cls: type) -> bool:
    # ApiVersions answers with header v0 always, so a client that asked too new a version can parse it.
    return response_cls.__flexible__ and api_key != ApiKey.API_VERSIONS


def encode_response(api_key: int, version: int, correlation_id: int, data: dict) -> list[bytes | FileRegion]:
    """The whole response frame (size prefix included) as bytes chunks and file regions."""
    cls = response_class(api_key, version)
    builder = _Builder()
    entity = builder.entity(cls, data)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(struct.pack(">i", correlation_id))
    if response_header_flexible(api_key, cls):
        buf.write(b"\0")  # empty tagged fields of response header v1
    _writer(cls)(buf, entity)
    body = buf.getbuffer()
    if not builder.regions:
        struct.pack_into(">i", body, 0, len(body) - 4)
        return [bytes(body)]
    return _splice_regions(bytes(body), builder.regions, cls.__flexible__)


def _splice_regions(body: bytes, regions: list[FileRegion], flexible: bool) -> list[bytes | FileRegion]:
    chunks: list[bytes | FileRegion] = []
    start = 4
    total = 0
    prefix_len = 1 if flexible else 4  # a marker's compact length fits one uvarint byte; legacy is int32
    for index, region in enumerate(regions):
        at = body.index(_marker(index), start)
        chunks.append(body[start : at - prefix_len])
        chunks.append(_uvarint(region.length + 1) if flexible else struct.pack(">i", region.length))
        chunks.append(region)
        start = at + _MARKER_LEN
    chunks.append(body[start:])
    for chunk in chunks:
        total += chunk.length if isinstance(chunk, FileRegion) else len(chunk)
    return [struct.pack(">i", total), *chunks]


def encode_error_frame(correlation_id: int, code: ErrorCode) -> bytes:
    """Last-resort answer for a request whose response schema we do not have: correlation id and an
    error code, which is how every response's leading error field reads in the legacy versions."""
    payload = struct.pack(">ih", correlation_id, code.value)
    return struct.pack(">i", len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# The client side, for tools and tests that speak the raw protocol


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
