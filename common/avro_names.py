"""Names as Avro allows them (letters, digits and `_`, not starting with a digit), made from MySQL's: the
connector's Avro schemas name records and fields this way, and the Spark sink finds a column's field by it."""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str) -> str:
    """A name Avro accepts, as Debezium's `schema.name.adjustment.mode=avro` makes it: other characters become
    `_`, and a leading digit gets a `_` before it."""
    name = _INVALID.sub("_", name)
    return "_" + name if not name or name[0].isdigit() else name
