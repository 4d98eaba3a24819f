"""Partial JSON updates: the diffs of a JSON column in a PARTIAL_UPDATE_ROWS event, applied to its before value.

A column's diffs (MySQL's Json_diff_vector) are a sequence of: an operation byte (0 REPLACE, 1 INSERT,
2 REMOVE); the path as text (a packed-integer length, then Json_path::to_string, e.g.
`$.a[3]."k y"[last-1]`); for REPLACE and INSERT, the new value (a packed-integer length, then
binary JSON). They are applied the way the server applies them (apply_json_diffs): REPLACE needs
the path to exist; INSERT needs its parent, a new member name in an object or an index in an array
(past the end appends); REMOVE needs the path. Anything else means the diffs do not describe the
document the binlog holds, and stops with JsonDiffError rather than guess.
"""

from __future__ import annotations

import json
import re

from cdc import mysqljson

REPLACE, INSERT, REMOVE = 0, 1, 2
_OPERATIONS = {REPLACE: "REPLACE", INSERT: "INSERT", REMOVE: "REMOVE"}
# One leg of a path as the server prints it: ."quoted member" | .member | [N] | [last] | [last-N]
_LEG = re.compile(r'\.(?:"((?:[^"\\]|\\.)*)"|([^."\[\]*\s]+))|\[(?:(\d+)|last(?:-(\d+))?)\]')
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")

Leg = str | int  # a member name, or an array index (negative counts from the end: last = -1)


class JsonDiffError(ValueError):
    """Diffs that cannot be read or applied; the message names the column and the path."""

    def __init__(self, column: str, path: str, reason: str) -> None:
        super().__init__(f"column {column!r}, path {path}: {reason}")
        self.column, self.path = column, path


def apply_diffs(before: bytes | None, diffs: bytes, column: str) -> str:
    """The after value of JSON column `column` as the server prints it: its before value (binary JSON
    from the before image) with `diffs` (the diff list without its length) applied."""
    reader = _DiffReader(diffs, column)
    if not before:
        raise JsonDiffError(column, reader.first_path(), "the column had no value before the update to apply it to")
    try:
        doc = mysqljson.decode(before)
    except mysqljson.JsonBinaryError as exc:
        raise JsonDiffError(column, "$", f"the before value is not valid binary JSON: {exc}") from None
    for operation, path, value in reader:
        _apply(doc, operation, path, value, column)
    return mysqljson.to_text(doc)


def parse_path(path: str) -> list[Leg]:
    """The legs of a path the server wrote; ValueError for anything else (wildcards, ranges, junk)."""
    if not path.startswith("$"):
        raise ValueError("a path starts with $")
    legs: list[Leg] = []
    at = 1
    while at < len(path):
        m = _LEG.match(path, at)
        if m is None:
            raise ValueError(f"cannot read the path from character {at}")
        quoted, plain, index, from_end = m.groups()
        if quoted is not None:
            legs.append(json.loads(f'"{quoted}"'))
        elif plain is not None:
            legs.append(plain)
        elif index is not None:
            legs.append(int(index))
        else:
            legs.append(-1 - int(from_end or 0))
        at = m.end()
    return legs


class _DiffReader:
    """Iterates (operation, path text, value node) over a column's diffs."""

    def __init__(self, diffs: bytes, column: str) -> None:
        self.diffs, self.column = diffs, column
        self.path = "(before the first diff)"

    def first_path(self) -> str:
        for _, path, _ in self:
            return path
        return self.path

    def __iter__(self):
        b, pos, end = self.diffs, 0, len(self.diffs)
        while pos < end:
            operation = b[pos]
            if operation not in _OPERATIONS:
                raise self.error(f"the next diff has an unknown operation {operation}")
            n, pos = self._packed(pos + 1)
            self.path = self._take(pos, n, "path").decode("utf-8", errors="replace")
            pos += n
            value = None
            if operation != REMOVE:
                n, pos = self._packed(pos)
                try:
                    value = mysqljson.decode(self._take(pos, n, "value"))
                except mysqljson.JsonBinaryError as exc:
                    raise self.error(f"the {_OPERATIONS[operation]} value is not valid binary JSON: {exc}") from None
                pos += n
            yield operation, self.path, value

    def error(self, reason: str) -> JsonDiffError:
        return JsonDiffError(self.column, self.path, reason)

    def _take(self, pos: int, n: int, what: str) -> bytes:
        if pos + n > len(self.diffs):
            raise self.error(f"the diff's {what} ({n} bytes at {pos}) runs past the {len(self.diffs)} bytes of diffs")
        return self.diffs[pos:pos + n]

    def _packed(self, pos: int) -> tuple[int, int]:
        """MySQL's packed integer (net_field_length): one byte below 251, else 252/253/254 + 2/3/8 bytes."""
        b = self.diffs
        if pos >= len(b):
            raise self.error("the diffs end inside a diff")
        first = b[pos]
        if first < 251:
            return first, pos + 1
        size = {252: 2, 253: 3, 254: 8}.get(first)
        if size is None or pos + 1 + size > len(b):
            raise self.error(f"bad length prefix {first} in the diffs")
        return int.from_bytes(b[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def _apply(doc: mysqljson.Node, operation: int, path: str, value, column: str) -> None:
    def fail(reason: str) -> JsonDiffError:
        return JsonDiffError(column, path, f"cannot {_OPERATIONS[operation]}: {reason}")

    try:
        legs = parse_path(path)
    except ValueError as exc:
        raise fail(f"unreadable path ({exc})") from None
    if not legs:
        raise fail("the server never writes a diff of the whole document")
    parent = doc
    for depth, leg in enumerate(legs[:-1]):
        parent = _child(parent, leg)
        if parent is None:
            raise fail(f"{_path_text(legs[:depth + 1])} does not exist in the before value")
    last = legs[-1]
    if type(parent) is dict and type(last) is str:
        if operation == INSERT:
            if last in parent:
                raise fail(f"member {last!r} exists already")
            parent[last] = value
            ordered = sorted(parent.items(), key=lambda item: mysqljson.key_order(item[0]))
            parent.clear()
            parent.update(ordered)
        elif last not in parent:
            raise fail(f"no member {last!r}")
        elif operation == REPLACE:
            parent[last] = value
        else:
            del parent[last]
    elif type(parent) is list and type(last) is int:
        size = len(parent)
        position = last if last >= 0 else size + last
        if operation == INSERT:
            parent.insert(min(max(position, 0), size), value)
        elif not 0 <= position < size:
            raise fail(f"index {position} is outside the array of {size}")
        elif operation == REPLACE:
            parent[position] = value
        else:
            del parent[position]
    else:
        kind = {dict: "an object", list: "an array"}.get(type(parent), "a scalar")
        raise fail(f"the parent is {kind}, which has no {'member' if type(last) is str else 'index'} to change")


def _child(node: mysqljson.Node, leg: Leg) -> mysqljson.Node | None:
    if type(node) is dict and type(leg) is str:
        return node.get(leg)
    if type(node) is list and type(leg) is int:
        position = leg if leg >= 0 else len(node) + leg
        return node[position] if 0 <= position < len(node) else None
    return None


def _path_text(legs: list[Leg]) -> str:
    """Legs written back as a path, for error messages."""
    text = "$"
    for leg in legs:
        if type(leg) is str:
            text += "." + (leg if _IDENTIFIER.fullmatch(leg) else json.dumps(leg, ensure_ascii=False))
        else:
            text += f"[{leg}]" if leg >= 0 else "[last]" if leg == -1 else f"[last-{-1 - leg}]"
    return text
