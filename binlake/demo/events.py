"""Change events as the demo shows them: one neutral shape for both output formats, and the table
contents rebuilt from them (to compare with what MySQL holds)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

CANAL_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}


@dataclass(frozen=True)
class Change:
    """One record of a change topic. `op`: r c u d (row changes), ddl, or tombstone."""

    topic: str
    op: str
    table: str | None = None                 # "shop.orders"
    key: tuple | None = None                 # primary-key values, in key order
    before: dict | None = None
    after: dict | None = None
    position: str = ""                       # where in the binlog it came from
    ddl: str | None = None


def parse(topic: str, key: bytes | None, value: bytes | None, fmt: str) -> Change:
    """A consumed record in `fmt` ("debezium" or "canal") as a Change."""
    if value is None:
        return Change(topic, "tombstone", key=_json_key(key))
    body = json.loads(value)
    return _canal(topic, body) if fmt == "canal" else _debezium(topic, _json_key(key), body)


def _json_key(key: bytes | None) -> tuple | None:
    """The connector's keys are JSON objects of the primary key's columns."""
    return tuple(json.loads(key).values()) if key else None


def _debezium(topic: str, key: tuple | None, body: dict) -> Change:
    source = body.get("source") or {}
    table = f"{source.get('db')}.{source.get('table')}" if source.get("table") else None
    position = f"{source.get('file')}:{source.get('pos')}"
    if "ddl" in body:
        changes = body.get("tableChanges") or [{}]
        return Change(topic, "ddl", table=changes[0].get("id", table), position=position, ddl=body["ddl"])
    return Change(topic, body["op"], table, key, body.get("before"), body.get("after"), position)


def _canal(topic: str, body: dict) -> Change:
    """(the key from the message's own pkNames: a processor's derived messages have plain-text keys)"""
    table = f"{body['database']}.{body['table']}"
    position = f"pos {body['id']}" if body.get("id") else ""  # (a processor's message has no binlog position)
    if body["isDdl"]:
        return Change(topic, "ddl", table=table, position=position, ddl=body["sql"])
    row = body["data"][0]
    key = tuple(row[k] for k in body.get("pkNames") or ())
    op = CANAL_OPS[body["type"]]
    if op == "c":
        return Change(topic, op, table, key, None, row, position)
    if op == "d":
        return Change(topic, op, table, key, row, None, position)
    return Change(topic, op, table, key, {**row, **body["old"][0]}, row, position)


@dataclass
class TableState:
    """Per table: how many events of each op arrived, and the rows (by primary key) after them."""

    ops: Counter = field(default_factory=Counter)
    rows: dict[tuple, dict] = field(default_factory=dict)

    @property
    def keys(self) -> set[tuple]:
        return set(self.rows)

    def apply(self, change: Change) -> None:
        self.ops[change.op] += 1
        if change.op in ("r", "c", "u"):  # (an update's key is its row's: a key change is a delete and a create)
            self.rows[normalized(change.key)] = change.after
        elif change.op == "d":
            self.rows.pop(normalized(change.key), None)


def normalized(key: tuple) -> tuple[str, ...]:
    """Keys compare as text: Canal's values are strings, MySQL's and Debezium's typed."""
    return tuple(str(v) for v in key)
