"""Canonical JSON values of MySQL types, shared by the binlog decoder and the snapshot.

One function per type family turns the binlog's binary form (cdc.rowdecoder) or the server's text form
(the snapshot) into the same value; docs/cdc.md has the table. Rules: integers exact (BIGINT UNSIGNED
too), DECIMAL as the server prints it, FLOAT as the shortest decimal that round-trips through float32,
temporal values as ISO-8601 text with exactly the column's fractional digits (TIMESTAMP in UTC with
"Z"), zero dates as null, binary strings as base64, BIT as an unsigned integer, GEOMETRY as
{"srid", "wkb"}, VECTOR as a list of float32 values. MySQL's binary JSON has a module of its own
(cdc.mysqljson).
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Callable

_F32 = struct.Struct("<f")
_F32_MIN_NORMAL = 2.0 ** -126
_D2B = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)          # bytes holding 0..9 decimal digits (MySQL decimal2bin)
_FRAC_UNIT = (0, 10000, 100, 1)                 # microseconds per stored unit, by bytes of fraction
# MySQL's latin1 is cp1252 except that five undefined bytes map to the C1 controls.
_LATIN1 = {i: ord(bytes([i]).decode("cp1252")) for i in range(0x80, 0xA0) if i not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def float32(x: float) -> float:
    """The shortest decimal that is the same float32 (what MySQL 8 prints; MariaDB prints 6 digits)."""
    packed = _F32.pack(x)
    # a normal float32 that has a form shorter than 6 digits is that form rounded to 6; a subnormal one
    # (below 2**-126) holds fewer digits, and its shortest form can be shorter than its 6-digit rounding
    for digits in range(6 if abs(x) >= _F32_MIN_NORMAL or not x else 1, 10):
        candidate = float("%.*g" % (digits, x))
        if _F32.pack(candidate) == packed:
            return candidate
    return x


def latin1(raw: bytes) -> str:
    return raw.decode("ascii") if raw.isascii() else raw.decode("latin-1").translate(_LATIN1)


def text_decoder(charset: str | None) -> Callable[[bytes], str]:
    """bytes → str for a column charset as pymysqlreplication names it (its Python codec)."""
    codec = (charset or "utf8").lower()
    if codec in ("cp1252", "latin1"):
        return latin1
    if codec in ("utf8", "utf8mb4", "utf8mb3", "utf-8"):
        return lambda raw: raw.decode("utf-8")
    return lambda raw: raw.decode(codec)


def vector(raw: bytes) -> list[float]:
    """MySQL 9's VECTOR: little-endian float32s, each as the shortest decimal that is the same float32."""
    return [float32(x) for x in struct.unpack(f"<{len(raw) // 4}f", raw)]


def geometry(raw: bytes) -> dict:
    """MySQL's internal geometry: 4-byte little-endian SRID, then WKB."""
    return {"srid": int.from_bytes(raw[:4], "little"), "wkb": b64(raw[4:])}


def fraction(micros: int, fsp: int) -> str:
    return "." + f"{micros:06d}"[:fsp] if fsp else ""


# --- binary (binlog) forms -------------------------------------------------------------------

class _Memo(dict):
    """Formatted date/time parts by their packed value; real data repeats days and times of day a lot."""

    def __init__(self, make: Callable[[int], str]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: int) -> str:
        if len(self) > 100_000:
            self.clear()
        value = self[key] = self.make(key)
        return value


def _ymd(ymd: int) -> str | None:
    year, month = divmod(ymd >> 5, 13)
    day = ymd & 31
    return f"{year:04d}-{month:02d}-{day:02d}" if month and day else None


def _hms(hms: int) -> str:
    return f"{hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"


def _packed_date(x: int) -> str | None:
    day, month, year = x & 31, (x >> 5) & 15, x >> 9
    return f"{year:04d}-{month:02d}-{day:02d}" if month and day else None


_DATES = _Memo(_packed_date)
_YMD = _Memo(_ymd)
_HMS = _Memo(_hms)
_DAYS = _Memo(lambda day: "%04d-%02d-%02dT" % time.gmtime(day * 86400)[:3])
_SECONDS = _Memo(lambda s: f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}")


def date_from_packed(x: int) -> str | None:
    return _DATES[x]


def make_decimal(precision: int, scale: int) -> tuple[int, Callable[[bytes], str]]:
    """(size in bytes, decoder) for DECIMAL(precision, scale) in MySQL's binary format.

    The value is big-endian groups of 9 digits in 4 bytes (a shorter leading/trailing group for the
    rest), sign in the top bit, all bits inverted when negative. The decoder is generated unrolled."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    fields = ([(_D2B[intg0x], intg0x)] if intg0x else []) + [(4, 9)] * intg0
    n_int = len(fields)
    fields += [(4, 9)] * frac0 + ([(_D2B[frac0x], frac0x)] if frac0x else [])
    size = sum(width for width, _ in fields)
    parts, shift = [], size * 8
    for width, digits in fields:
        shift -= width * 8
        parts.append((f"(v >> {shift}) & {(1 << width * 8) - 1:#x}", digits))
    ip = "0"
    for expr, digits in parts[:n_int]:
        ip = expr if ip == "0" else f"({ip}) * {10 ** digits} + ({expr})"
    text = "str(" + ip + ")"
    if scale:
        fp = "0"
        for expr, digits in parts[n_int:]:
            fp = expr if fp == "0" else f"({fp}) * {10 ** digits} + ({expr})"
        text = f"{text} + '.' + str({fp}).zfill({scale})"
    top, ones = 1 << (size * 8 - 1), (1 << size * 8) - 1
    source = (f"def decode(raw):\n"
              f"    v = int.from_bytes(raw, 'big')\n"
              f"    if v & {top:#x}:\n"
              f"        v ^= {top:#x}\n"
              f"        return {text}\n"
              f"    v ^= {top ^ ones:#x}\n"
              f"    return '-' + {text}\n")
    env: dict = {}
    exec(source, env)
    return size, env["decode"]


def make_datetime2(fsp: int) -> tuple[int, Callable[[bytes], str | None]]:
    k = (fsp + 1) // 2
    unit, fmask, fbits = _FRAC_UNIT[k], (1 << 8 * k) - 1, 8 * k
    ymds, hmss = _YMD, _HMS

    def decode(raw: bytes) -> str | None:
        v = int.from_bytes(raw, "big")
        ip = (v >> fbits) - 0x8000000000
        date = ymds[ip >> 17]
        if date is None:
            return None
        text = date + "T" + hmss[ip & 0x1FFFF]
        return text + fraction((v & fmask) * unit, fsp) if fsp else text

    return 5 + k, decode


def make_timestamp2(fsp: int) -> tuple[int, Callable[[bytes], str | None]]:
    k = (fsp + 1) // 2
    unit = _FRAC_UNIT[k]
    days, seconds = _DAYS, _SECONDS

    def decode(raw: bytes) -> str | None:
        v = int.from_bytes(raw[:4], "big")
        if fsp:
            frac = int.from_bytes(raw[4:], "big")
            if not v and not frac:
                return None
            return days[v // 86400] + seconds[v % 86400] + fraction(frac * unit, fsp) + "Z"
        return days[v // 86400] + seconds[v % 86400] + "Z" if v else None

    return 4 + k, decode


def make_time2(fsp: int) -> tuple[int, Callable[[bytes], str]]:
    k = (fsp + 1) // 2
    unit, offset, fbits = _FRAC_UNIT[k], 0x800000 << (8 * k), 8 * k
    hmss = _HMS

    def decode(raw: bytes) -> str:
        v = int.from_bytes(raw, "big") - offset
        sign = "-" if v < 0 else ""
        v = -v if v < 0 else v
        return sign + hmss[v >> fbits] + fraction((v & ((1 << fbits) - 1)) * unit, fsp)

    return 3 + k, decode


def datetime_from_packed(x: int) -> str | None:
    """Pre-5.6 DATETIME: YYYYMMDDhhmmss as an integer."""
    ymd, hms = divmod(x, 1000000)
    year, md = divmod(ymd, 10000)
    month, day = divmod(md, 100)
    if not month or not day:
        return None
    return f"{year:04d}-{month:02d}-{day:02d}T{hms // 10000:02d}:{hms // 100 % 100:02d}:{hms % 100:02d}"


def time_from_packed(x: int) -> str:
    """Pre-5.6 TIME: ±HHMMSS as an integer."""
    sign = "-" if x < 0 else ""
    x = abs(x)
    return f"{sign}{x // 10000:02d}:{x // 100 % 100:02d}:{x % 100:02d}"


def timestamp_from_seconds(seconds: int) -> str | None:
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % time.gmtime(seconds)[:6] if seconds else None


# --- text (snapshot) forms -------------------------------------------------------------------

def date_text(s: str) -> str | None:
    return None if s[5:7] == "00" or s[8:10] == "00" else s


def datetime_text(s: str) -> str | None:
    return None if s[5:7] == "00" or s[8:10] == "00" else s.replace(" ", "T", 1)


def timestamp_text(s: str) -> str | None:
    return None if s.startswith("0000") else s.replace(" ", "T", 1) + "Z"
