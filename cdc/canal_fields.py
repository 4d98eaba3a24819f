"""Canal's column filters (canal.instance.filter.field, filter.black.field): which columns of a table Canal's
messages and entries carry, as Canal's LogEventConvert.needField decides.

    CanalFields(include={"shop.orders": ["id", "qty"]}).kept("shop", "orders", ["id", "item", "qty"])  # ("id", "qty")

Tables and columns are named exactly (no patterns), case-insensitively. A table with columns to include carries
those only; else one with columns to exclude carries the others; else all (None). A primary-key column is not
kept for being one: left out, it is gone from the message's data, its `pkNames` (Canal derives them from the
columns it carries) and the entries' columns, as in Canal. Kept columns keep their index in the table.
"""

from __future__ import annotations

from typing import Iterable

from pydantic import BaseModel, ConfigDict, field_validator


class CanalFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    include: dict[str, tuple[str, ...]] = {}
    """`db.table` -> the columns its messages carry (canal.instance.filter.field)."""
    exclude: dict[str, tuple[str, ...]] = {}
    """`db.table` -> the columns its messages leave out (canal.instance.filter.black.field)."""

    @field_validator("include", "exclude")
    @classmethod
    def _named_exactly(cls, tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for name, columns in tables.items():
            if name.count(".") != 1 or not all(name.split(".")) or not columns or not all(columns):
                raise ValueError(f"{name}: {'/'.join(columns)}: write db.table with at least one column")
        return {name.upper(): tuple(c.upper() for c in columns) for name, columns in tables.items()}

    def kept(self, db: str, table: str, columns: Iterable[str]) -> tuple[str, ...] | None:
        """The columns of `db.table` (of `columns`, in their order) its messages carry; None: all of them."""
        name = f"{db}.{table}".upper()
        if wanted := self.include.get(name):
            return tuple(c for c in columns if c.upper() in wanted)
        if unwanted := self.exclude.get(name):
            return tuple(c for c in columns if c.upper() not in unwanted)
        return None
