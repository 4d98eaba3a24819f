"""Walks a request's bytes by its kio schema and bounds every length before kio's native reader runs.

kio's native reader sizes an array's storage from the array's length field before it has read a
single element, and a failed allocation aborts the whole process (a Rust `handle_alloc_error`,
not an exception). One compact array length of 0xFFFFFFFF asks for 32 GiB; see docs/broker.md,
"Bad input and limits". So no frame reaches it until this walk has checked, for every field of
the request's version, that each string, bytes and array length fits in the bytes left (an array
of n elements needs n × its element's smallest encoding), that each tagged field stays inside its
declared size, and that a null appears only where the schema allows one (Kafka answers those with
INVALID_REQUEST too; kio would pass the None on to handlers).

The walk builds nothing: one closure per entity class, compiled once from the same schema kio reads
with, so a produce request costs a few attribute reads per topic and partition and none per record.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Callable

from .schema import field_plan

__all__ = ["MalformedRequest", "check_request"]

Check = Callable[[bytes, int, int], int]  # (frame, position, end) → position after the value

_FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
          "uuid": 16}
_INT16 = struct.Struct(">h").unpack_from
_INT32 = struct.Struct(">i").unpack_from


class MalformedRequest(ValueError):
    """The request frames fine but breaks its schema: answer INVALID_REQUEST. `kind` groups such
    errors for logging; the message names the field and what is wrong with it."""

    def __init__(self, kind: str, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.kind = kind


def check_request(frame: bytes | memoryview, header_cls: type, body_cls: type) -> None:
    """MalformedRequest unless kio can read header and body of `frame` without an unbounded allocation."""
    end = len(frame)
    position = _entity_check(header_cls, True)(frame, 0, end)
    _entity_check(body_cls, False)(frame, position, end)


def compile_checks(header_cls: type, body_cls: type) -> None:
    """Compile (and cache) the checks `check_request` runs on frames of these classes."""
    _entity_check(header_cls, True)
    _entity_check(body_cls, False)


# ---------------------------------------------------------------------------------------------
# Primitive readers: each returns (value, position after it) or raises MalformedRequest


def _underflow(field: str, need: int, position: int, end: int) -> MalformedRequest:
    return MalformedRequest("buffer underflow", field, f"needs {need} byte(s) at {position}, frame ends at {end}")


def _uvarint(frame, position: int, end: int, field: str) -> tuple[int, int]:
    if position < end and frame[position] < 0x80:  # lengths below 127: one byte
        return frame[position], position + 1
    value = shift = 0
    for _ in range(5):
        if position >= end:
            raise _underflow(field, 1, position, end)
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise MalformedRequest("bad varint", field, "unsigned varint longer than 5 bytes")


Length = Callable[[bytes, int, int], tuple[int, int]]  # (frame, position, end) → (length, position after it)


def _length_reader(flexible: bool, size: int, field: str) -> Length:
    """A length prefix, -1 for null: compact (uvarint of length + 1) or legacy (int16/int32 by `size`).
    Callers take a one-byte compact length inline and call this for the rest."""
    if flexible:
        def compact(frame, position: int, end: int) -> tuple[int, int]:
            raw, position = _uvarint(frame, position, end, field)
            return raw - 1, position
        return compact
    unpack = _INT16 if size == 2 else _INT32

    def legacy(frame, position: int, end: int) -> tuple[int, int]:
        if position + size > end:
            raise _underflow(field, size, position, end)
        (raw,) = unpack(frame, position)
        if raw < -1:
            raise MalformedRequest("negative length", field, f"length {raw}")
        return raw, position + size
    return legacy


# ---------------------------------------------------------------------------------------------
# Compiling a check per field and per entity class


@cache
def _entity_check(cls: type, is_header: bool) -> Check:
    flexible = cls.__flexible__
    steps: list[Check] = []
    fixed = 0  # consecutive fixed-size fields are skipped in one step
    for plan in field_plan(cls):
        if plan.tag is not None:
            continue
        size = _FIXED.get(plan.kafka_type) if not plan.is_array and plan.nested is None else None
        if size is not None:
            fixed += size
            continue
        if fixed:
            steps.append(_skip(fixed, f"{cls.__name__} fixed fields"))
            fixed = 0
        # A request header writes client_id as a legacy nullable string even in its flexible version.
        steps.append(_field_check(plan, flexible and not is_header, f"{cls.__name__}.{plan.name}"))
    if fixed:
        steps.append(_skip(fixed, f"{cls.__name__} fixed fields"))
    if flexible:
        tagged = {plan.tag: _field_check(plan, True, f"{cls.__name__}.{plan.name}")
                  for plan in field_plan(cls) if plan.tag is not None}
        steps.append(_tagged_fields_check(tagged, cls.__name__))

    if len(steps) == 1:
        return steps[0]

    def check(frame, position: int, end: int) -> int:
        for step in steps:
            position = step(frame, position, end)
        return position

    return check


def _skip(size: int, field: str) -> Check:
    def skip(frame, position: int, end: int) -> int:
        if position + size > end:
            raise _underflow(field, size, position, end)
        return position + size
    return skip


def _field_check(plan, flexible: bool, field: str) -> Check:
    if plan.is_array:
        return _array_check(plan, flexible, field)
    if plan.nested is not None:
        inner = _entity_check(plan.nested, False)
        if not plan.optional:
            return inner

        def nullable_struct(frame, position: int, end: int) -> int:  # KIP-893: an int8 marker first
            if position >= end:
                raise _underflow(field, 1, position, end)
            return position + 1 if frame[position] == 0xFF else inner(frame, position + 1, end)
        return nullable_struct
    return _value_check(plan.kafka_type, plan.optional, flexible, field)


def _value_check(kafka_type: str, optional: bool, flexible: bool, field: str) -> Check:
    if kafka_type in _FIXED:
        return _skip(_FIXED[kafka_type], field)
    if kafka_type not in ("string", "bytes", "records"):
        raise LookupError(f"no bounds check for kafka type {kafka_type!r} ({field})")
    read_length = _length_reader(flexible, 2 if kafka_type == "string" else 4, field)

    def sized(frame, position: int, end: int) -> int:
        if flexible and position < end and frame[position] < 0x80:
            length, position = frame[position] - 1, position + 1
        else:
            length, position = read_length(frame, position, end)
        if length < 0:
            if not optional:
                raise MalformedRequest("null in a non-nullable field", field, "null where the schema allows none")
            return position
        if position + length > end:
            raise MalformedRequest("length past the end of the frame", field,
                                   f"{kafka_type} of {length} bytes, only {end - position} left")
        return position + length

    return sized


def _array_check(plan, flexible: bool, field: str) -> Check:
    if plan.nested is not None:
        item = _entity_check(plan.nested, False)
        smallest = _min_size(plan.nested)
    else:
        item = _value_check(plan.kafka_type, False, flexible, field + "[]")
        smallest = _FIXED.get(plan.kafka_type) or (1 if flexible else 2 if plan.kafka_type == "string" else 4)
    fixed_item = plan.nested is None and plan.kafka_type in _FIXED
    optional = plan.optional
    read_length = _length_reader(flexible, 4, field)

    def array(frame, position: int, end: int) -> int:
        if flexible and position < end and frame[position] < 0x80:
            count, position = frame[position] - 1, position + 1
        else:
            count, position = read_length(frame, position, end)
        if count < 0:
            if not optional:
                raise MalformedRequest("null in a non-nullable field", field, "null array where the schema allows none")
            return position
        if count * smallest > end - position:
            raise MalformedRequest("length past the end of the frame", field,
                                   f"array of {count} elements needs at least {count * smallest} bytes, "
                                   f"only {end - position} left")
        if fixed_item:
            return position + count * smallest
        for _ in range(count):
            position = item(frame, position, end)
        return position

    return array


def _tagged_fields_check(known: dict[int, Check], owner: str) -> Check:
    field = f"{owner} tagged fields"

    def tagged(frame, position: int, end: int) -> int:
        if position < end and frame[position] == 0:  # the usual case: no tagged fields
            return position + 1
        count, position = _uvarint(frame, position, end, field)
        if count > end - position:  # each takes at least two bytes
            raise MalformedRequest("length past the end of the frame", field, f"{count} tagged fields claimed")
        for _ in range(count):
            tag, position = _uvarint(frame, position, end, field)
            size, position = _uvarint(frame, position, end, field)
            if position + size > end:
                raise MalformedRequest("length past the end of the frame", field,
                                       f"tag {tag} of {size} bytes, only {end - position} left")
            if tag in known:  # kio reads a known tag with the field's reader: bound it by the tag's size
                known[tag](frame, position, position + size)
            position += size
        return position

    return tagged


@cache
def _min_size(cls: type) -> int:
    """Bytes of the smallest valid encoding of one `cls` (at least 1, so a count is always bounded)."""
    flexible = cls.__flexible__
    total = 1 if flexible else 0  # the tagged-field count
    for plan in field_plan(cls):
        if plan.tag is not None:
            continue
        if plan.is_array or plan.kafka_type in ("bytes", "records"):
            total += 1 if flexible else 4
        elif plan.nested is not None:
            total += 1 if plan.optional else _min_size(plan.nested)
        elif plan.kafka_type == "string":
            total += 1 if flexible else 2
        else:
            total += _FIXED[plan.kafka_type]
    return max(total, 1)
