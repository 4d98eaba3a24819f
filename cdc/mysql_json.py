"""MySQL's binary JSON (a JSON column in the binlog) as the text MySQL prints for it (`SELECT col`).

The snapshot reads that text from the server, so the binlog's value must be the same string. MySQL
prints (sql-common/json_dom.cc, wrapper_to_string): members in stored order (keys sorted by length,
then bytes) as `{"k": v, "k2": v2}` and `[a, b]`; strings with `"` `\\` `\\b` `\\f` `\\n` `\\r` `\\t`
escaped and other control characters as `\\u00xx`, everything else raw UTF-8; integers exact; doubles
in `my_gcvt` form (shortest round-trip digits, fixed notation for decimal exponents -14..15, else
`1e300`; `.0` added when neither `.` nor `e` appears); and opaque values (a MySQL type inside JSON)
by that type: DECIMAL as its digits (`12.50`), DATE/TIME/DATETIME/TIMESTAMP quoted with six fraction
digits, VAR_STRING as a string, anything else as `"base64:type<code>:<base64>"`.

Binary layout (sql-common/json_binary.h): a type byte, then the value. Objects and arrays hold a
count and a size (2 bytes each when small, 4 when large), key entries (offset, 2-byte length), and
value entries (type byte + offset, or the value itself when it fits: literals and 16-bit integers,
32-bit integers too in the large format); offsets count from the container's first byte.
"""

from __future__ import annotations

import base64
import json
import struct
from functools import lru_cache

from cdc.errors import DecodeError
from cdc.values import make_decimal

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY, _LITERAL = 0, 1, 2, 3, 4
_INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING, _OPAQUE = 5, 6, 7, 8, 9, 10, 11, 12, 15
_SCALARS = {_INT16: struct.Struct("<h"), _UINT16: struct.Struct("<H"), _INT32: struct.Struct("<i"),
            _UINT32: struct.Struct("<I"), _INT64: struct.Struct("<q"), _UINT64: struct.Struct("<Q")}
_DOUBLE_AT = struct.Struct("<d").unpack_from
_LITERALS = {0: "null", 1: "true", 2: "false"}
_OFFSETS = {False: struct.Struct("<H").unpack_from, True: struct.Struct("<I").unpack_from}
_KEY_LENGTH = struct.Struct("<H").unpack_from
_PACKED = struct.Struct("<q").unpack_from
# field types of opaque values that MySQL prints as what they are
_TIMESTAMP, _DATE, _TIME, _DATETIME, _NEWDECIMAL, _VAR_STRING = 7, 10, 11, 12, 246, 253
_quote = json.JSONEncoder(ensure_ascii=False).encode   # the same escapes as MySQL's double_quote()


def json_text(raw: bytes) -> str:
    """The text of a JSON column's binlog value; an empty value is JSON null (MySQL stores one for a
    NOT NULL JSON column added to existing rows, and prints `null`)."""
    if not raw:
        return "null"
    out: list[str] = []
    _value(out, raw, raw[0], 1)
    return "".join(out)


def _value(out: list[str], data: bytes, kind: int, at: int) -> None:
    """Append the text of the value of type `kind` whose bytes start at data[at]."""
    if kind <= _LARGE_ARRAY:
        _container(out, data, at, large=kind in (_LARGE_OBJECT, _LARGE_ARRAY), is_object=kind <= _LARGE_OBJECT)
    elif kind == _STRING:
        length, at = _varlen(data, at)
        out.append(_quote(data[at:at + length].decode("utf-8")))
    elif kind == _DOUBLE:
        out.append(double_text(_DOUBLE_AT(data, at)[0]))
    elif kind in _SCALARS:
        out.append(str(_SCALARS[kind].unpack_from(data, at)[0]))
    elif kind == _LITERAL:
        out.append(_LITERALS[data[at]])
    elif kind == _OPAQUE:
        length, start = _varlen(data, at + 1)
        out.append(_opaque(data[at], data[start:start + length]))
    else:
        raise DecodeError(f"binary JSON value of unknown type {kind}")


def _container(out: list[str], data: bytes, at: int, large: bool, is_object: bool) -> None:
    offset = _OFFSETS[large]
    width = 4 if large else 2
    count = offset(data, at)[0]
    keys = at + 2 * width
    values = keys + (count * (width + 2) if is_object else 0)
    inline = (_LITERAL, _INT16, _UINT16, _INT32, _UINT32) if large else (_LITERAL, _INT16, _UINT16)
    out.append("{" if is_object else "[")
    for i in range(count):
        if i:
            out.append(", ")
        if is_object:
            entry = keys + i * (width + 2)
            start = at + offset(data, entry)[0]
            out.append(_quote(data[start:start + _KEY_LENGTH(data, entry + width)[0]].decode("utf-8")))
            out.append(": ")
        entry = values + i * (1 + width)
        kind = data[entry]
        _value(out, data, kind, entry + 1 if kind in inline else at + offset(data, entry + 1)[0])
    out.append("}" if is_object else "]")


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    """A length in 7-bit groups, low group first, high bit = more follow; returns (length, next position)."""
    length = shift = 0
    while True:
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, at
        shift += 7


def _opaque(field_type: int, payload: bytes) -> str:
    if field_type == _NEWDECIMAL:
        return _decimal(payload[0], payload[1])(payload[2:])
    if field_type in (_DATETIME, _TIMESTAMP, _DATE, _TIME):
        return '"' + _packed_temporal(field_type, _PACKED(payload)[0]) + '"'
    if field_type == _VAR_STRING:
        return _quote(payload.decode("utf-8"))
    return _quote(f"base64:type{field_type}:{_mysql_base64(payload)}")


@lru_cache(maxsize=256)
def _decimal(precision: int, scale: int):
    return make_decimal(precision, scale)[1]


def _packed_temporal(field_type: int, packed: int) -> str:
    """MySQL's packed date/time (my_time.h: integer part << 24 | microseconds) as my_TIME_to_str(t, 6)."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micros, whole = packed & 0xFFFFFF, packed >> 24
    if field_type == _TIME:
        return f"{sign}{whole >> 12 & 0x3FF:02d}:{whole >> 6 & 63:02d}:{whole & 63:02d}.{micros:06d}"
    ymd, hms = whole >> 17, whole & 0x1FFFF
    year, month = divmod(ymd >> 5, 13)
    date = f"{year:04d}-{month:02d}-{ymd & 31:02d}"
    if field_type == _DATE:
        return date
    return f"{date} {hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}.{micros:06d}"


def _mysql_base64(raw: bytes) -> str:
    """MySQL's base64_encode: a line break after every 76 characters."""
    text = base64.b64encode(raw).decode("ascii")
    return "\n".join(text[i:i + 76] for i in range(0, len(text), 76))


def double_text(d: float) -> str:
    """A double as MySQL prints it in JSON: my_gcvt(d, MY_GCVT_ARG_DOUBLE, width 34) plus `.0` when the
    text shows neither a point nor an exponent."""
    text = repr(d)
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    # decimal point position as dtoa reports it: d = 0.DIGITS x 10^point
    point = len(whole) - (len(whole + frac) - len(digits)) + int(exponent or 0)
    digits = digits.rstrip("0")
    if not digits:
        return sign + "0.0"
    if -14 <= point and (point <= 15 or len(digits) > point):     # 'f' format (MAX_DECPT_FOR_F_FORMAT 15)
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point < len(digits):
            text = digits[:point] + "." + digits[point:]
        else:
            text = digits + "0" * (point - len(digits)) + ".0"
    else:
        text = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + f"e{point - 1}"
    return sign + text
