"""Avro schema resolution as a pure function: can data written with `writer` be read with `reader`?

The rules are the Avro specification's (and Java Avro's `SchemaCompatibility`, which Confluent's
registry runs): unions branch by branch, named types matched by name or alias, reader fields missing
from the writer need a default, enum symbols the reader lacks need the reader's enum default, fixed
sizes equal, and the numeric and string/bytes promotions. Schemas are fastavro's parsed form (full
names; a named type met again is its name, looked up in `named`).
"""

from __future__ import annotations

from typing import Any

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def incompatibilities(reader: Any, writer: Any, named_reader: dict, named_writer: dict,
                      labels: tuple[str, str] = ("reader", "writer")) -> list[str]:
    """Why `reader` cannot read what `writer` wrote: one line per problem, empty when it can. `labels`
    name the two in the messages (Confluent says "the new schema" and "the old schema")."""
    return _Checker(named_reader, named_writer, labels).check(reader, writer, "", set())


def _short(name: str) -> str:
    return name.rpartition(".")[2]


class _Checker:
    def __init__(self, named_reader: dict, named_writer: dict, labels: tuple[str, str]) -> None:
        self.named_reader, self.named_writer = named_reader, named_writer
        self.r, self.w = labels

    def _resolve(self, schema: Any, named: dict) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return named[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] not in (
                "record", "error", "enum", "fixed", "array", "map"):
            return self._resolve(schema["type"], named)  # {"type": "long", "logicalType": ...} reads as long
        return schema

    @staticmethod
    def _kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        if isinstance(schema, str):
            return schema
        return "record" if schema["type"] == "error" else schema["type"]

    def check(self, reader: Any, writer: Any, path: str, seen: set) -> list[str]:
        reader, writer = self._resolve(reader, self.named_reader), self._resolve(writer, self.named_writer)
        key = (id(reader), id(writer))
        if key in seen:
            return []  # a recursive type: this pair is being checked further up
        seen = seen | {key}
        rk, wk = self._kind(reader), self._kind(writer)
        if wk == "union":
            return [problem for n, branch in enumerate(writer)
                    for problem in self.check(reader, branch, f"{path}/{n}", seen)]
        if rk == "union":
            if any(not self.check(branch, writer, path, seen) for branch in reader):
                return []
            return [_problem("MISSING_UNION_BRANCH", f"The {self.r}'s union at path '{path or '/'}' has no "
                             f"branch that reads the {self.w}'s {_describe(writer)}", path)]
        if rk != wk:
            if rk in _PROMOTIONS.get(wk, ()):
                return []
            return [_problem("TYPE_MISMATCH", f"The type at path '{path or '/'}' is {rk} in the {self.r} and {wk} in "
                             f"the {self.w}: no promotion reads one as the other", path)]
        if rk in ("record", "enum", "fixed") and not _same_name(reader, writer):
            return [_problem("NAME_MISMATCH", f"The type at path '{path or '/'}' is named {reader['name']} in the "
                             f"{self.r} and {writer['name']} in the {self.w} (and no alias matches)", path)]
        if rk == "record":
            return self._record(reader, writer, path, seen)
        if rk == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [_problem("MISSING_ENUM_SYMBOLS", f"The {self.r}'s enum {reader['name']} at path "
                                 f"'{path or '/'}' lacks the {self.w}'s symbols {missing} and has no default",
                                 path)]
            return []
        if rk == "fixed" and reader["size"] != writer["size"]:
            return [_problem("FIXED_SIZE_MISMATCH", f"The fixed {reader['name']} at path '{path or '/'}' is "
                             f"{reader['size']} bytes in the {self.r} and {writer['size']} in the {self.w}", path)]
        if rk == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items", seen)
        if rk == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values", seen)
        return []

    def _record(self, reader: dict, writer: dict, path: str, seen: set) -> list[str]:
        problems = []
        by_name = {f["name"]: f for f in writer["fields"]}
        for n, field in enumerate(reader["fields"]):
            names = [field["name"], *field.get("aliases", [])]
            written = next((by_name[name] for name in names if name in by_name), None)
            where = f"{path}/fields/{n}"
            if written is not None:
                problems += self.check(field["type"], written["type"], f"{where}/type", seen)
            elif "default" not in field:
                problems.append(_problem(
                    "READER_FIELD_MISSING_DEFAULT_VALUE", f"The field '{field['name']}' at path '{where}' in the "
                    f"{self.r} has no default value and is missing in the {self.w}", field["name"]))
        return problems


def _same_name(reader: dict, writer: dict) -> bool:
    names = {reader["name"], _short(reader["name"])} | set(reader.get("aliases", []))
    names |= {_short(a) for a in reader.get("aliases", [])}
    return writer["name"] in names or _short(writer["name"]) in names


def _describe(schema: Any) -> str:
    kind = _Checker._kind(schema)
    return f"{kind} {schema['name']}" if kind in ("record", "enum", "fixed") else kind


def _problem(error_type: str, description: str, info: str) -> str:
    return f"{{errorType:'{error_type}', description:'{description}', additionalInfo:'{info}'}}"
