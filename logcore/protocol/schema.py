"""What kio's generated dataclasses say about each field, read once per class: the plan that the
response encoder (codec) and the request bounds check (bounds) both walk, in wire order."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

__all__ = ["FieldPlan", "field_plan"]


@dataclass(frozen=True, slots=True)
class FieldPlan:
    name: str
    kafka_type: str | None
    nested: type | None  # entity class for entity / entity-tuple fields
    is_array: bool
    optional: bool  # nullable
    default: Any
    tag: int | None  # tagged field (flexible versions only)


@cache
def field_plan(cls: type) -> tuple[FieldPlan, ...]:
    plans = []
    for f in fields(cls):
        kind = classify_field(f)
        nested = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = MISSING
        plans.append(
            FieldPlan(
                name=f.name,
                kafka_type=f.metadata.get("kafka_type"),
                nested=nested,
                is_array=isinstance(kind, (EntityTupleField, PrimitiveTupleField)),
                optional=is_optional(f),
                default=default,
                tag=f.metadata.get("tag"),
            )
        )
    return tuple(plans)
