"""Avro's binary encoding of a field, compiled once from its Avro type into one Python function a value.

fastavro's `schemaless_writer` walks the schema for every record it writes (about 4 µs a call before the first
field, then each field by its type's name); a table's rows all have the same schema, so the connector compiles
each field's writer once (`field_writer`) and a row image is the concatenation of its fields' bytes. The
encoding is Avro 1.11's (zig-zag varints, IEEE doubles little-endian, length-prefixed bytes and UTF-8 strings,
a union's branch index before its value, arrays in one block) and the types are those cdc.formats.avro_types
writes; `tests/cdc/test_cdc_avro.py` checks every one of them byte for byte against fastavro's own writing.
A type it was not written for is refused when the table's writer is built, by its name.
"""

from __future__ import annotations

import struct
from typing import Callable

from cdc.errors import CdcError

Writer = Callable[[object], bytes]
_SMALL = [bytes([n]) for n in range(0x80)]       # a varint below 128 is that one byte
_NULL_BRANCH, _SECOND_BRANCH = b"\0", b"\2"     # a [null, T] union's branch index 0 or 1, zig-zag
_PRIMITIVE_NAMES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


def long_bytes(n: int) -> bytes:
    """An int or a long: zig-zag, then a varint of 7 bits a byte, low bits first."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes(value: bytes) -> bytes:
    return long_bytes(len(value)) + value


def _string(value: str) -> bytes:
    data = value.encode()
    return long_bytes(len(data)) + data


def _double(value) -> bytes:
    return struct.pack("<d", value)


def _boolean(value) -> bytes:
    return b"\1" if value else b"\0"


def _decimal(precision: int, scale: int) -> Writer:
    """Avro's decimal on bytes: the unscaled value, big-endian two's complement in as few bytes as hold it and its
    sign (fastavro's rule); a value with more digits than `precision` or a finer scale than `scale` is refused."""
    def write(value) -> bytes:
        sign, digits, exponent = value.as_tuple()
        if len(digits) > precision or exponent + scale < 0:
            raise ValueError(f"{value} does not fit DECIMAL({precision},{scale})")
        unscaled = int("".join(map(str, digits))) * 10 ** (exponent + scale)
        data = (-unscaled if sign else unscaled).to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
        return long_bytes(len(data)) + data
    return write


def _doubles(values) -> bytes:
    if not values:
        return b"\0"
    return long_bytes(len(values)) + struct.pack(f"<{len(values)}d", *values) + b"\0"


_WRITERS: dict[str, Writer] = {"boolean": _boolean, "int": long_bytes, "long": long_bytes, "double": _double,
                               "bytes": _bytes, "string": _string}


def field_writer(avro, named: dict[str, Writer], convert: Callable | None = None) -> Writer:
    """The writer of a value of Avro type `avro` (a name, a dict, or a [null, T] union), each non-null value
    passed through `convert` first. `named`: the record writers compiled so far by full name (a record type is
    defined once in a schema and then referred to by its name)."""
    if isinstance(avro, list):
        if len(avro) != 2 or avro[0] != "null":
            raise CdcError(f"no compiled Avro writer for the union {avro}: the connector writes [null, T]")
        inner = field_writer(avro[1], named, convert)
        return lambda value: _NULL_BRANCH if value is None else _SECOND_BRANCH + inner(value)
    if convert is not None:
        write = field_writer(avro, named)
        return lambda value: write(convert(value))
    if isinstance(avro, str):
        if avro in _WRITERS:
            return _WRITERS[avro]
        if avro in named:
            return named[avro]
        raise CdcError(f"no compiled Avro writer for the type {avro!r}")
    kind = avro["type"]
    if avro.get("logicalType") == "decimal" and kind == "bytes":
        return _decimal(int(avro["precision"]), int(avro.get("scale", 0)))
    if kind == "array" and avro["items"] == "double":
        return _doubles
    if kind == "record":
        fields = [(f["name"], field_writer(f["type"], named)) for f in avro["fields"]]
        full = f"{avro['namespace']}.{avro['name']}" if "namespace" in avro else avro["name"]

        def record(value: dict) -> bytes:
            return b"".join([write(value[name]) for name, write in fields])
        named[full] = record
        return record
    if kind in _PRIMITIVE_NAMES:
        return field_writer(kind, named)
    raise CdcError(f"no compiled Avro writer for the type {avro}")
