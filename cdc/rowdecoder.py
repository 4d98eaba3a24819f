"""Per-table row decoders, generated from a table map and compiled once.

A ROWS event body is a sequence of row images: a null bitmap, then each non-null column's value in
its binary form. For each distinct column layout this module writes a Python function that decodes
a whole event body into dicts with straight-line code (runs of fixed-width columns read by one
struct), which is what makes decoding several times faster than interpreting column metadata per
value. The generated source is kept on the function (`__source__`) for debugging. PARTIAL_UPDATE_ROWS
events (MySQL's binlog_row_value_options=PARTIAL_JSON) get a decoder of their own, which applies
the JSON diffs of their after images (cdc.jsondiff).
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Callable

from pymysqlreplication.constants import FIELD_TYPE as T

from cdc import values as V
from cdc.binlog.events import BinlogColumn
from cdc.binlog.vector_tablemap import VECTOR
from cdc.errors import DecodeError
from cdc.jsondiff import apply_diffs
from cdc.mysqljson import column_text

_FIXED = {  # type → (struct code signed, struct code unsigned)
    T.TINY: ("b", "B"), T.SHORT: ("h", "H"), T.LONG: ("i", "I"), T.LONGLONG: ("q", "Q"),
    T.FLOAT: ("f", "f"), T.DOUBLE: ("d", "d"), T.YEAR: ("B", "B"),
}
_POST = {T.FLOAT: "_float32({v})", T.YEAR: "({v} + 1900 if {v} else 0)"}

RowsDecoder = Callable[[bytes, int, int], list]


class _Gen:
    """Accumulates the generated code and the helper objects it references."""

    def __init__(self) -> None:
        self.env: dict = {"_float32": V.float32, "_b64": V.b64, "_date": V.date_from_packed,
                          "_from_bytes": int.from_bytes, "_geometry": V.geometry, "_json": column_text,
                          "_datetime_old": V.datetime_from_packed, "_time_old": V.time_from_packed,
                          "_timestamp_old": V.timestamp_from_seconds, "_vector": V.vector}
        for codes in _FIXED.values():
            for code in codes:
                self.env[f"_unpack_{code}"] = struct.Struct("<" + code).unpack_from

    def helper(self, name: str, obj) -> str:
        self.env[name] = obj
        return name

    def length_prefixed(self, i: int, nbytes: int, convert: str) -> list[str]:
        if nbytes == 1:
            read = ["n = b[p]", "p += 1"]
        elif nbytes == 2:
            read = ["n = b[p] | b[p + 1] << 8", "p += 2"]
        else:
            read = [f"n = _from_bytes(b[p:p + {nbytes}], 'little')", f"p += {nbytes}"]
        return read + [f"v{i} = {convert.format(raw='b[p:p + n]')}", "p += n"]

    def column(self, i: int, c: BinlogColumn) -> list[str]:
        """Statements that decode column i at b[p] into v{i} and advance p."""
        t = c.type
        if t in _FIXED:
            code = _FIXED[t][c.unsigned]
            size = struct.calcsize("<" + code)
            post = _POST.get(t, "{v}").format(v="x")
            return [f"x = _unpack_{code}(b, p)[0]", f"v{i} = {post}", f"p += {size}"]
        if t == T.INT24:
            return [f"v{i} = _from_bytes(b[p:p + 3], 'little', signed={not c.unsigned})", "p += 3"]
        if t == T.NEWDECIMAL:
            size, fn = V.make_decimal(c.precision, c.scale)
            return [f"v{i} = {self.helper(f'_dec{i}', fn)}(b[p:p + {size}])", f"p += {size}"]
        if t in (T.DATETIME2, T.TIMESTAMP2, T.TIME2):
            make = {T.DATETIME2: V.make_datetime2, T.TIMESTAMP2: V.make_timestamp2, T.TIME2: V.make_time2}[t]
            size, fn = make(c.fsp)
            return [f"v{i} = {self.helper(f'_tm{i}', fn)}(b[p:p + {size}])", f"p += {size}"]
        if t == T.DATE:
            return [f"v{i} = _date(b[p] | b[p + 1] << 8 | b[p + 2] << 16)", "p += 3"]
        if t == T.DATETIME:
            return [f"v{i} = _datetime_old(_from_bytes(b[p:p + 8], 'little'))", "p += 8"]
        if t == T.TIMESTAMP:
            return [f"v{i} = _timestamp_old(_from_bytes(b[p:p + 4], 'little'))", "p += 4"]
        if t == T.TIME:
            return [f"v{i} = _time_old(_from_bytes(b[p:p + 3], 'little', signed=True))", "p += 3"]
        if t in (T.VARCHAR, T.STRING, T.VAR_STRING):
            nbytes = 1 if c.max_length < 256 else 2
            if c.charset == "binary":
                pad = f".ljust({c.max_length}, b'\\x00')" if t == T.STRING else ""
                return self.length_prefixed(i, nbytes, "_b64({raw}" + pad + ")")
            return self.length_prefixed(i, nbytes, self.helper(f"_text{i}", V.text_decoder(c.charset)) + "({raw})")
        if t == T.BLOB:
            convert = ("_b64({raw})" if c.charset == "binary"
                       else self.helper(f"_text{i}", V.text_decoder(c.charset)) + "({raw})")
            return self.length_prefixed(i, c.length_size, convert)
        if t == T.JSON:
            return self.length_prefixed(i, c.length_size, "_json({raw})")
        if t == T.GEOMETRY:
            return self.length_prefixed(i, c.length_size, "_geometry({raw})")
        if t == VECTOR:
            return self.length_prefixed(i, c.length_size, "_vector({raw})")
        if t == T.ENUM:
            members = self.helper(f"_enum{i}", ("",) + c.values)
            read = "b[p]" if c.size == 1 else f"_from_bytes(b[p:p + {c.size}], 'little')"
            return [f"v{i} = {members}[{read}]", f"p += {c.size}"]
        if t == T.SET:
            members = c.values

            def set_text(mask: int, members=members) -> str:
                return ",".join(m for bit, m in enumerate(members) if mask >> bit & 1)
            return [f"v{i} = {self.helper(f'_set{i}', set_text)}(_from_bytes(b[p:p + {c.size}], 'little'))",
                    f"p += {c.size}"]
        if t == T.BIT:
            n = (c.bits + 7) // 8
            return [f"v{i} = _from_bytes(b[p:p + {n}], 'big')", f"p += {n}"]
        raise DecodeError(f"column {c.name!r} has MySQL type code {t}, which binlake cannot decode")


def _fixed_run(gen: _Gen, columns: list[tuple[int, BinlogColumn]]) -> list[str]:
    """One struct read for consecutive fixed-width columns (the no-null fast path)."""
    fmt = "<" + "".join(_FIXED[c.type][c.unsigned] for _, c in columns)
    names = ", ".join(f"v{i}" for i, _ in columns) + ","
    unpack = gen.helper(f"_run{columns[0][0]}", struct.Struct(fmt).unpack_from)
    lines = [f"{names} = {unpack}(b, p)", f"p += {struct.calcsize(fmt)}"]
    for i, c in columns:
        if c.type in _POST:
            lines.append(f"v{i} = " + _POST[c.type].format(v=f"v{i}"))
    return lines


def _nullable(i: int, statements: list[str]) -> list[str]:
    """Column i's statements, run only when its null bit is clear."""
    return [f"if nulls >> {i} & 1:", f"    v{i} = None", "else:"] + ["    " + line for line in statements]


def _names(columns: tuple[BinlogColumn, ...]) -> list[str]:
    return [c.name if c.name is not None else f"col{i}" for i, c in enumerate(columns)]


def _row(names: list[str]) -> str:
    """The dict literal of one decoded row."""
    return "{" + ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names)) + "}"


def _indent(level: int, lines: list[str]) -> list[str]:
    return ["    " * level + line for line in lines]


@lru_cache(maxsize=1024)
def compile_rows_decoder(columns: tuple[BinlogColumn, ...]) -> RowsDecoder:
    """decode(data, begin, stop) -> [row dict, ...] for a ROWS event body of this layout."""
    gen = _Gen()
    nb = (len(columns) + 7) // 8
    fast: list[str] = []
    run: list[tuple[int, BinlogColumn]] = []
    for i, c in enumerate(columns):
        if c.type in _FIXED:
            run.append((i, c))
            continue
        if run:
            fast += _fixed_run(gen, run)
            run = []
        fast += gen.column(i, c)
    if run:
        fast += _fixed_run(gen, run)
    slow: list[str] = []
    for i, c in enumerate(columns):
        slow += _nullable(i, gen.column(i, c))
    names = _names(columns)
    row = _row(names)
    lines = ["def decode(b, p, stop):", "    out = []", "    append = out.append", "    while p < stop:",
             f"        nulls = _from_bytes(b[p:p + {nb}], 'little')", f"        p += {nb}",
             "        if not nulls:"]
    lines += ["            " + line for line in fast or ["pass"]]
    lines += ["        else:"] + ["            " + line for line in slow or ["pass"]]
    lines += [f"        append({row})", "    return out"]
    source = "\n".join(lines)
    exec(compile(source, f"<rows decoder {','.join(names)[:60]}>", "exec"), gen.env)
    decode = gen.env["decode"]
    decode.__source__ = source
    return decode


class RowImageError(ValueError):
    """A row image the decoder cannot read; the streaming source says which event it was."""


@lru_cache(maxsize=1024)
def compile_partial_update_decoder(columns: tuple[BinlogColumn, ...]) -> RowsDecoder:
    """decode(data, begin, stop) -> [before, after, ...] for a PARTIAL_UPDATE_ROWS event body of this layout.

    Each row is its before image; the value options (a packed integer: 0, or 1 = PARTIAL_JSON) and
    with PARTIAL_JSON one bit per JSON column, set when the after image holds that column as diffs
    (a 4-byte length, then cdc.jsondiff's diff list) instead of a whole document; then the after
    image. The diffs are applied to the before value, so the after row carries whole documents. A
    JSON column the statement left alone comes as an empty diff list: its before value.
    """
    gen = _Gen()
    gen.env.update(_apply_diffs=apply_diffs, _RowImageError=RowImageError)
    json_bits = {i: bit for bit, i in enumerate(i for i, c in enumerate(columns) if c.type == T.JSON)}
    nb, nj = (len(columns) + 7) // 8, (len(json_bits) + 7) // 8
    names = _names(columns)
    before: list[str] = []
    after: list[str] = []
    for i, c in enumerate(columns):
        if i not in json_bits:
            before += _nullable(i, gen.column(i, c))
            after += _nullable(i, gen.column(i, c))
            continue
        # the before value's bytes (j) and text (w) stay for the after image
        before += [f"if nulls >> {i} & 1:", f"    j{i} = w{i} = v{i} = None", "else:",
                   f"    n = _from_bytes(b[p:p + {c.length_size}], 'little')", f"    p += {c.length_size}",
                   f"    j{i} = b[p:p + n]", f"    w{i} = v{i} = _json(j{i})", "    p += n"]
        diffs = ["n = _from_bytes(b[p:p + 4], 'little')", "p += 4",
                 f"v{i} = _apply_diffs(j{i}, b[p:p + n], {names[i]!r}) if n else w{i}", "p += n"]
        after += [f"if nulls >> {i} & 1:", f"    v{i} = None", f"elif partial >> {json_bits[i]} & 1:"]
        after += _indent(1, diffs) + ["else:"] + _indent(1, gen.column(i, c))
    shared = ["options = b[p]", "p += 1",
              "if options == 1:", f"    partial = _from_bytes(b[p:p + {nj}], 'little')", f"    p += {nj}",
              "elif options:", "    raise _RowImageError(f'value options {options}: only PARTIAL_JSON (1) is known')",
              "else:", "    partial = 0"]
    read_nulls = [f"nulls = _from_bytes(b[p:p + {nb}], 'little')", f"p += {nb}"]
    body = read_nulls + before + [f"append({_row(names)})"] + shared + read_nulls + after + [f"append({_row(names)})"]
    lines = ["def decode(b, p, stop):", "    out = []", "    append = out.append", "    while p < stop:"]
    lines += _indent(2, body) + ["    return out"]
    source = "\n".join(lines)
    exec(compile(source, f"<partial update decoder {','.join(names)[:60]}>", "exec"), gen.env)
    decode = gen.env["decode"]
    decode.__source__ = source
    return decode
