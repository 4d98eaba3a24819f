"""MySQL/MariaDB character set names: of a collation, of a collation id, and as a Python codec.

The names and ids are pymysqlreplication's table (the one it decodes FULL row metadata with), so a
column described from the schema history decodes exactly as one the binlog described itself.
"""

from __future__ import annotations

from functools import lru_cache

from pymysqlreplication.constants.CHARSET import charset_by_id, charset_by_name

_DBMS = ("mysql", "mariadb")
_ALIASES = {"utf8": "utf8mb3"}   # MySQL and MariaDB both mean utf8mb3 by utf8


def _first(lookup, key):
    """The entry of the first server kind that has one (names and ids agree across MySQL and MariaDB)."""
    return next((c for dbms in _DBMS if (c := lookup(key, dbms)) is not None), None)


@lru_cache(maxsize=None)
def charset_of_collation(collation: str) -> str | None:
    """`utf8mb4_0900_ai_ci` → utf8mb4, `latin1_bin` → latin1, `binary` → binary; None if unknown. Every
    collation is named after its character set, so the longest known prefix before an `_` is it (new
    collations, such as MariaDB 11's `utf8mb4_uca1400_ai_ci`, need no table entry)."""
    collation = collation.lower()
    if collation == "binary":
        return "binary"
    parts = collation.split("_")
    for n in range(len(parts) - 1, 0, -1):
        prefix = "_".join(parts[:n])
        if _first(charset_by_name, prefix) is not None:
            return _ALIASES.get(prefix, prefix)
    return None


def charset_of_collation_id(collation_id: int | None) -> str | None:
    """The character set of a collation id as status variables carry it (ids agree across servers)."""
    found = _first(charset_by_id, collation_id) if collation_id is not None else None
    return found.name if found is not None else None


def codec(charset: str) -> str:
    """The decoder's name for a character set: what pymysqlreplication gives a FULL table map's column
    (`utf8` for utf8mb3/utf8mb4, `cp1252` for latin1, `binary` for binary strings)."""
    found = _first(charset_by_name, charset)
    if found is None:
        raise ValueError(f"unknown character set {charset!r}")
    return found.encoding
