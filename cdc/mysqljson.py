"""MySQL's binary JSON, decoded into a document tree and printed the way the server prints it.

A column value is a type byte and the value. Objects and arrays are a count, a byte size, key entries
(objects: offset + 2-byte length), then value entries (type + offset, or the value itself when it
fits: literals and 16-bit integers, also 32-bit ones in the large format); offsets count from the
container's first byte. Strings are a variable-length length (7 bits a byte) and UTF-8. Opaque
values are a MySQL field type byte, a variable-length length and the field's own bytes (DECIMAL,
DATE/TIME/DATETIME/TIMESTAMP, or anything else, printed as "base64:typeN:...").

The tree is what partial JSON updates (cdc.jsondiff) are applied to: a dict (unquoted key → node,
in MySQL's key order: by length, then bytewise) for an object, a list for an array, and for every
scalar a str holding its printed JSON text, so printing a document only joins text. What the
server prints (`SELECT col`, Json_wrapper::to_string): ", " and ": " separators, strings escaped
like JSON with `\\u00xx` for other control characters, doubles as MySQL's my_gcvt writes them (see
`_double`), decimals with their scale, dates quoted, times and datetimes quoted with six fractional
digits.
"""

from __future__ import annotations

import base64
import struct
from functools import lru_cache
from json.encoder import encode_basestring as quote  # C escaper: the same escapes as the server's

from cdc import values

Node = dict | list | str

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING, _OPAQUE = (
    0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0F)
_LITERALS = {0: "null", 1: "true", 2: "false"}
_SCALARS = {_INT16: struct.Struct("<h"), _UINT16: struct.Struct("<H"), _INT32: struct.Struct("<i"),
            _UINT32: struct.Struct("<I"), _INT64: struct.Struct("<q"), _UINT64: struct.Struct("<Q")}
_F64 = struct.Struct("<d")
_I64 = struct.Struct("<q")
_U16 = struct.Struct("<H")
# per container format: (count + size header, offset, types stored in the value entry itself)
_SMALL = (struct.Struct("<HH"), _U16, frozenset((_LITERAL, _INT16, _UINT16)))
_LARGE = (struct.Struct("<II"), struct.Struct("<I"), frozenset((_LITERAL, _INT16, _UINT16, _INT32, _UINT32)))
# MySQL field types that opaque values print specially
_NEWDECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP, _VAR_STRING = 246, 10, 11, 12, 7, 253
# my_gcvt(MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH): field width, and the decimal point range of 'f' format
_GCVT_WIDTH = 15 + 4 + 15
_MAX_DECPT_F = 15


class JsonBinaryError(ValueError):
    """The bytes are not valid MySQL binary JSON."""


def decode(raw: bytes) -> Node:
    """The document of a non-empty column value (its type byte, then the value)."""
    try:
        return _value(raw[0], raw, 1, len(raw))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise JsonBinaryError(f"truncated or invalid binary JSON ({exc})") from None


def column_text(raw: bytes) -> str:
    """A JSON column's value from a row image, as the server prints it. An empty value is JSON null:
    MySQL stores one for a NOT NULL JSON column added to existing rows, and prints `null`."""
    return to_text(decode(raw)) if raw else "null"


def to_text(node: Node) -> str:
    t = type(node)
    if t is str:
        return node
    if t is list:
        return "[" + ", ".join([to_text(x) for x in node]) + "]"
    return "{" + ", ".join([quote(k) + ": " + to_text(x) for k, x in node.items()]) + "}"


def key_order(key: str) -> tuple[int, bytes]:
    """Where MySQL keeps an object's key: shorter keys first, then bytewise."""
    encoded = key.encode("utf-8")
    return len(encoded), encoded


# --- decoding --------------------------------------------------------------------------------

def _value(t: int, b: bytes, pos: int, end: int) -> Node:
    """The value of type t whose data starts at b[pos]; `end` bounds the enclosing value."""
    if t <= _LARGE_ARRAY:
        return _container(b, pos, end, large=bool(t & 1), is_object=t <= _LARGE_OBJECT)
    if t == _STRING:
        n, pos = _varlen(b, pos)
        return quote(_slice(b, pos, n, end).decode("utf-8"))
    if t in _SCALARS:
        return str(_SCALARS[t].unpack_from(b, pos)[0])
    if t == _DOUBLE:
        return _double(_F64.unpack_from(b, pos)[0])
    if t == _LITERAL:
        return _literal(b[pos])
    if t == _OPAQUE:
        field_type = b[pos]
        n, pos = _varlen(b, pos + 1)
        return _opaque(field_type, _slice(b, pos, n, end))
    raise JsonBinaryError(f"unknown binary JSON type {t:#04x}")


def _container(b: bytes, start: int, end: int, large: bool, is_object: bool) -> dict | list:
    header, offset, inline = _LARGE if large else _SMALL
    count, size = header.unpack_from(b, start)
    if start + size > end:
        raise JsonBinaryError(f"a JSON {'object' if is_object else 'array'} of {size} bytes overruns its value")
    end = start + size
    entries = start + header.size
    keys: list[str] = []
    if is_object:
        for at in range(entries, entries + count * (offset.size + 2), offset.size + 2):
            key_length = _U16.unpack_from(b, at + offset.size)[0]
            keys.append(_slice(b, start + offset.unpack_from(b, at)[0], key_length, end).decode("utf-8"))
        entries += count * (offset.size + 2)
    nodes = []
    for at in range(entries, entries + count * (1 + offset.size), 1 + offset.size):
        t = b[at]
        if t in inline:
            nodes.append(_value(t, b, at + 1, end))
        else:
            nodes.append(_value(t, b, start + offset.unpack_from(b, at + 1)[0], end))
    return dict(zip(keys, nodes)) if is_object else nodes


def _varlen(b: bytes, pos: int) -> tuple[int, int]:
    """A length of 7 bits a byte, low bits first, high bit set while more bytes follow."""
    n = shift = 0
    while True:
        byte = b[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return n, pos
        shift += 7
        if shift > 28:
            raise JsonBinaryError("a binary JSON length runs over 5 bytes")


def _slice(b: bytes, pos: int, n: int, end: int) -> bytes:
    if pos + n > end:
        raise JsonBinaryError(f"a binary JSON value of {n} bytes at {pos} overruns its container")
    return b[pos:pos + n]


def _literal(code: int) -> str:
    try:
        return _LITERALS[code]
    except KeyError:
        raise JsonBinaryError(f"unknown binary JSON literal {code:#04x}") from None


# --- printing scalars as the server does ---------------------------------------------------------

def _double(x: float) -> str:
    """MySQL's my_gcvt for a JSON double: the shortest round-trip digits (Python's repr has the same),
    in 'f' format when that fits the field and the decimal point is within ±15 places, else 'e'
    format without '+' or leading exponent zeros; a whole number in 'f' format gets '.0' (100.0, but
    1e20, 1e-20)."""
    text = repr(x)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    decpt = len(whole) - (len(all_digits) - len(digits)) + (int(exponent) if exponent else 0)
    digits = digits.rstrip("0")
    if not digits:                              # zero: dtoa gives "0" with the point after it
        return sign + "0.0"
    n = len(digits)
    width = _GCVT_WIDTH - len(sign)
    f_length = n - decpt + 2 if decpt <= 0 else n + 1 if decpt < n else decpt
    if f_length <= width and decpt >= 1 - _MAX_DECPT_F and (decpt <= _MAX_DECPT_F or n > decpt):
        if decpt <= 0:
            return sign + "0." + "0" * -decpt + digits
        if decpt < n:
            return sign + digits[:decpt] + "." + digits[decpt:]
        return sign + digits + "0" * (decpt - n) + ".0"
    e = decpt - 1
    return sign + digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(e)


_decimal_decoder = lru_cache(maxsize=256)(values.make_decimal)


def _decimal(data: bytes) -> str:
    """precision byte, scale byte, then the DECIMAL(precision, scale) binary form."""
    precision, scale = data[0], data[1]
    size, decode_decimal = _decimal_decoder(precision, scale)
    if len(data) != 2 + size:
        raise JsonBinaryError(f"a JSON DECIMAL({precision},{scale}) has {len(data) - 2} bytes, not {size}")
    return decode_decimal(data[2:])


def _temporal(field_type: int, data: bytes) -> str:
    """MySQL's packed 64-bit temporal value, printed by my_TIME_to_str with six fractional digits."""
    packed = _I64.unpack(data)[0]
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micros = packed & 0xFFFFFF
    whole = packed >> 24
    if field_type == _TIME:
        hms = whole
        return f'"{sign}{hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}.{micros:06d}"'
    ymd, hms = whole >> 17, whole & 0x1FFFF
    year, month = divmod(ymd >> 5, 13)
    date = f"{year:04d}-{month:02d}-{ymd & 31:02d}"
    if field_type == _DATE:
        return f'"{date}"'
    return f'"{date} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}.{micros:06d}"'


def _opaque(field_type: int, data: bytes) -> str:
    if field_type == _NEWDECIMAL:
        return _decimal(data)
    if field_type in (_DATE, _TIME, _DATETIME, _TIMESTAMP):
        if len(data) != 8:
            raise JsonBinaryError(f"a JSON temporal value (field type {field_type}) has {len(data)} bytes, not 8")
        return _temporal(field_type, data)
    if field_type == _VAR_STRING:                # the server prints these as plain strings
        return quote(data.decode("utf-8"))
    # MySQL's base64_encode breaks lines every 76 characters; the JSON string escapes them
    encoded = base64.b64encode(data).decode("ascii")
    lines = "\\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    return f'"base64:type{field_type}:{lines}"'
