"""Single-message transforms (Kafka Connect SMT style): pure functions over records.

Configured as a list under `transforms:`; each entry's `type` picks the transform. A transform
takes a record and returns a new record, or None to drop it. Field paths are dotted and rooted at
the record: `topic`, `key.id`, `value.after.status`, `value.items.0.sku` (digits index lists). A key
or value given as bytes is read as JSON text when a path looks inside it (cdc's records are).
"""

from __future__ import annotations

import copy
import json
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .api import SourceRecord

Transform = Callable[[SourceRecord], SourceRecord | None]
_MISSING = object()
ROOTS = ("topic", "key", "value", "partition", "timestamp_ms")


def _split(path: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    parts = tuple(path.split("."))
    if parts[0] not in roots or not all(parts):
        raise ValueError(f"field path {path!r} must start with one of {', '.join(roots)} "
                         "and separate names with single dots, e.g. value.after.status")
    return parts


def _parsed(data: Any) -> Any:
    """A key or value as JSON data: sources such as cdc hand over JSON already encoded as bytes."""
    if isinstance(data, bytes):
        try:
            return json.loads(data)
        except ValueError:
            return _MISSING
    return data


def _get(record: SourceRecord, parts: tuple[str, ...]) -> Any:
    node = getattr(record, parts[0])
    if len(parts) > 1:
        node = _parsed(node)
    for part in parts[1:]:
        if isinstance(node, dict):
            node = node.get(part, _MISSING)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
        if node is _MISSING:
            return node
    return node


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}


class FilterTransform(_Model):
    """Keep only the records whose `field` satisfies `op value`; drop the rest.

    A missing field satisfies only `ne`, `not_in` and `missing`; values that cannot be compared
    (a string against a number) do not satisfy `lt`/`le`/`gt`/`ge`.
    """

    type: Literal["filter"]
    field: str
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "matches", "exists", "missing"]
    value: Any = None

    @field_validator("field")
    @classmethod
    def _path(cls, v: str) -> str:
        _split(v, ROOTS)
        return v

    @model_validator(mode="after")
    def _operand(self) -> "FilterTransform":
        if self.op in ("exists", "missing"):
            if self.value is not None:
                raise ValueError(f"op {self.op!r} takes no value")
        elif self.op in ("in", "not_in"):
            if not isinstance(self.value, list):
                raise ValueError(f"op {self.op!r} needs a list value, e.g. value: [c, u]")
        elif self.op == "matches":
            try:
                re.compile(str(self.value))
            except re.error as exc:
                raise ValueError(f"value is not a regular expression: {exc}") from None
        elif self.value is None and self.op not in ("eq", "ne"):
            raise ValueError(f"op {self.op!r} needs a value")
        return self

    def build(self) -> Transform:
        parts, op, want = _split(self.field, ROOTS), self.op, self.value
        pattern = re.compile(str(want)) if op == "matches" else None

        def holds(got: Any) -> bool:
            if op in ("exists", "missing"):
                return (got is not _MISSING) == (op == "exists")
            if got is _MISSING:
                return op in ("ne", "not_in")
            if op == "in":
                return got in want
            if op == "not_in":
                return got not in want
            if pattern is not None:
                return got is not None and pattern.fullmatch(str(got)) is not None
            try:
                return bool(_COMPARE[op](got, want))
            except TypeError:
                return False

        return lambda record: record if holds(_get(record, parts)) else None


class RenameTopicTransform(_Model):
    """Route records to another topic: topics that fully match `regex` become `replacement`
    (Python `re` syntax: `\\1` or `\\g<name>` for groups); others pass unchanged."""

    type: Literal["rename_topic"]
    regex: str
    replacement: str

    @model_validator(mode="after")
    def _compiles(self) -> "RenameTopicTransform":
        try:
            pattern = re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"regex is not a regular expression: {exc}") from None
        # Expand against an empty match with the same groups, so a bad group reference fails now, not per record.
        names = {index: name for name, index in pattern.groupindex.items()}
        probe = "".join(f"(?P<{names[i]}>)" if i in names else "()" for i in range(1, pattern.groups + 1))
        try:
            re.fullmatch(probe, "").expand(self.replacement)
        except re.error as exc:
            raise ValueError(f"replacement does not fit the regex: {exc}") from None
        return self

    def build(self) -> Transform:
        pattern, template = re.compile(self.regex), self.replacement

        def rename(record: SourceRecord) -> SourceRecord:
            match = pattern.fullmatch(record.topic)
            return replace(record, topic=match.expand(template)) if match else record

        return rename


class DropFieldsTransform(_Model):
    """Remove fields from keys or values: `fields: [value.after.password, value.before.password]`.
    Missing fields are ignored; the input record is never modified."""

    type: Literal["drop_fields"]
    fields: list[str] = Field(min_length=1)

    @field_validator("fields")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for path in v:
            if len(_split(path, ("key", "value"))) < 2:
                raise ValueError(f"{path!r} names a whole {path}; name a field inside it, e.g. {path}.password")
        return v

    def build(self) -> Transform:
        paths = [_split(p, ("key", "value")) for p in self.fields]

        def drop(record: SourceRecord) -> SourceRecord:
            changes = {}
            for root in ("key", "value"):
                mine = [p[1:] for p in paths if p[0] == root]
                data = getattr(record, root)
                encoded = isinstance(data, bytes)
                if mine and isinstance(data := _parsed(data), dict):
                    if not encoded:
                        data = copy.deepcopy(data)
                    for parts in mine:
                        _delete(data, parts)
                    if encoded:
                        data = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
                    changes[root] = data
            return replace(record, **changes) if changes else record

        return drop


def _delete(node: Any, parts: tuple[str, ...]) -> None:
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


TransformConfig = Annotated[
    Union[FilterTransform, RenameTopicTransform, DropFieldsTransform], Field(discriminator="type")]


def chain(configs: Iterable[FilterTransform | RenameTopicTransform | DropFieldsTransform]) -> Transform:
    """Compose the configured transforms in order; a dropped record stops the chain."""
    steps = [c.build() for c in configs]

    def run(record: SourceRecord) -> SourceRecord | None:
        for step in steps:
            record = step(record)
            if record is None:
                return None
        return record

    return run
