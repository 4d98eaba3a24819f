"""Signals: requests to a running source, in Debezium's shape, whichever channel brought them.

    {"id": "ad-hoc-1", "type": "execute-snapshot",
     "data": {"data-collections": ["shop.orders"], "type": "incremental",
              "additional-conditions": [{"data-collection": "shop.orders", "filter": "id > 100"}]}}

Channels, one meaning: rows inserted into the signal table (`signals: {table: db.t}`, read from the
binlog), records of the signal topic (`signals: {topic: NAME}`, Debezium's Kafka channel: key = the logical
server name, value = the JSON of `from_json`; read by the connector, cdc/connector.py), and the REST API /
`binlake connect signal` (the same JSON). `parse` turns any of them into a `Signal` or refuses it
with the reason (`SignalRefused`); a refused signal is logged and dropped, never fatal.

Rows of the signal table whose type is a watermark (`snapshot-window-open`, `snapshot-window-close`)
are the incremental snapshot's own bookkeeping (cdc/snapshot/incremental.py), not requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

EXECUTE = "execute-snapshot"
STOP = "stop-snapshot"
PAUSE = "pause-snapshot"
RESUME = "resume-snapshot"
TYPES = (EXECUTE, STOP, PAUSE, RESUME)
WINDOW_OPEN = "snapshot-window-open"
WINDOW_CLOSE = "snapshot-window-close"
WATERMARKS = (WINDOW_OPEN, WINDOW_CLOSE)
OFFSETS = "signal_offsets"     # in the source's offsets: the signal topic's partition -> the next offset to read


class SignalRefused(ValueError):
    """A signal that cannot be acted on; the message names the signal and why."""


@dataclass(frozen=True, slots=True)
class Signal:
    id: str
    type: str
    tables: tuple[str, ...] = ()             # data-collections, "db.table"
    filters: dict[str, str] = field(default_factory=dict)   # table -> SQL condition (additional-conditions)
    surrogate_key: str | None = None          # chunk key of a table without a primary key

    def to_dict(self) -> dict:
        data: dict = {}
        if self.tables:
            data["data-collections"] = list(self.tables)
        if self.type == EXECUTE:
            data["type"] = "incremental"
            if self.filters:
                data["additional-conditions"] = [{"data-collection": t, "filter": f} for t, f in self.filters.items()]
            if self.surrogate_key:
                data["surrogate-key"] = self.surrogate_key
        return {"id": self.id, "type": self.type, "data": data}


def parse(id_: str, type_: str, data: str | dict | None) -> Signal:
    """A signal from its three parts (data as JSON text or already decoded); raises SignalRefused."""
    where = f"signal {id_!r} ({type_})"
    if type_ not in TYPES:
        raise SignalRefused(f"{where}: unknown type; binlake knows {', '.join(TYPES)}")
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data) if data.strip() else {}
        except ValueError as exc:
            raise SignalRefused(f"{where}: data is not JSON: {exc}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SignalRefused(f"{where}: data must be a JSON object, not {type(data).__name__}")
    tables = data.get("data-collections") or ()
    if isinstance(tables, str):
        tables = (tables,)
    if not all(isinstance(t, str) and t.count(".") == 1 for t in tables):
        raise SignalRefused(f"{where}: data-collections must be a list of 'db.table' names: {tables!r}")
    tables = tuple(tables)
    if type_ != EXECUTE:
        return Signal(id_, type_, tables)
    if not tables:
        raise SignalRefused(f"{where}: data-collections names no table")
    kind = data.get("type", "incremental")
    if str(kind).lower() != "incremental":
        raise SignalRefused(f"{where}: snapshot type {kind!r}; a running source takes incremental snapshots only")
    filters: dict[str, str] = {}
    for condition in data.get("additional-conditions") or ():
        table = condition.get("data-collection") if isinstance(condition, dict) else None
        text = condition.get("filter") if isinstance(condition, dict) else None
        if table not in tables or not isinstance(text, str) or not text.strip():
            raise SignalRefused(f"{where}: an additional condition needs a data-collection of the signal and a "
                                f"filter: {condition!r}")
        filters[table] = text
    surrogate = data.get("surrogate-key")
    if surrogate is not None and not isinstance(surrogate, str):
        raise SignalRefused(f"{where}: surrogate-key must be a column name: {surrogate!r}")
    return Signal(id_, type_, tables, filters, surrogate)


def from_json(value: bytes | str | dict, default_id: str = "") -> Signal:
    """A signal as a record value or REST body: {"id"?, "type", "data"}."""
    try:
        body = json.loads(value) if isinstance(value, (bytes, str)) else value
    except ValueError as exc:
        raise SignalRefused(f"a signal that is not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise SignalRefused(f"a signal needs a JSON object with a type: {str(value)[:200]!r}")
    return parse(str(body.get("id") or default_id), body["type"], body.get("data"))
