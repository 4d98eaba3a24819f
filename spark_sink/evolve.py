"""What a target table must change to hold a source table's current columns: columns to add and
types to widen; anything else stops the job with the table, the column and the source position."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .changes import TableSchema

_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_INTEGRAL_DIGITS = {"int": 10, "bigint": 19}


class SchemaChangeError(RuntimeError):
    pass


@dataclass(frozen=True)
class Evolution:
    add: tuple[tuple[str, str], ...]  # (column, spark type)
    widen: tuple[tuple[str, str, str], ...]  # (column, from, to)

    def __bool__(self) -> bool:
        return bool(self.add or self.widen)


def evolution(existing: dict[str, str], schema: TableSchema) -> Evolution:
    """`existing`: the target's column → Spark type (simple strings: int, decimal(10,2), ...)."""
    add, widen = [], []
    for column in schema.columns:
        wanted = column.type.spark
        have = existing.get(column.name)
        if have is None:
            add.append((column.name, wanted))
        elif have != wanted:
            if not widens(have, wanted):
                raise SchemaChangeError(
                    f"table {schema.table}, column {column.name}: the source changed it from {have} to {wanted} "
                    f"(at {schema.position or 'an unknown position'}), which the target cannot take without "
                    f"rewriting it; recreate the target table, or map the table to a new one (tables: in the config)")
            widen.append((column.name, have, wanted))
    return Evolution(tuple(add), tuple(widen))


def widens(have: str, wanted: str) -> bool:
    """Whether every `have` value is a `wanted` value (Delta's type widening, and PostgreSQL's)."""
    if (have, wanted) in {("int", "bigint"), ("float", "double"), ("date", "timestamp_ntz")}:
        return True
    target = _DECIMAL.fullmatch(wanted)
    if not target:
        return False
    precision, scale = int(target.group(1)), int(target.group(2))
    if have in _INTEGRAL_DIGITS:
        return precision - scale >= _INTEGRAL_DIGITS[have]
    source = _DECIMAL.fullmatch(have)
    return bool(source) and scale >= int(source.group(2)) and precision - scale >= int(source.group(1)) - int(source.group(2))
