"""Record neutral events to JSON lines and replay them: tests and benchmarks without a server."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Iterable, Iterator

from cdc.binlog import events as ev

_TYPES = {cls.__name__: cls for cls in (ev.Rotate, ev.Gtid, ev.Begin, ev.Commit, ev.Query, ev.TableMap, ev.Rows,
                                        ev.Heartbeat)}


def _encode(event: ev.Event) -> dict:
    d = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, ev.Rows):
        d["data"] = base64.b64encode(event.data[event.begin:event.stop]).decode()
        d["begin"], d["stop"] = 0, event.stop - event.begin
    elif isinstance(event, ev.TableMap):
        d["columns"] = [dataclasses.asdict(c) for c in event.columns]
    return {"type": type(event).__name__, **d}


def _decode(d: dict) -> ev.Event:
    d = dict(d)
    cls = _TYPES[d.pop("type")]
    if cls is ev.Rows:
        d["data"] = base64.b64decode(d["data"])
    elif cls is ev.TableMap:
        d["columns"] = tuple(ev.BinlogColumn(**{**c, "values": tuple(c["values"])}) for c in d["columns"])
        d["primary_key"] = tuple(d["primary_key"])
    return cls(**d)


def record_events(events: Iterable[ev.Event], path: Path) -> int:
    count = 0
    with open(path, "w") as f:
        for event in events:
            f.write(json.dumps(_encode(event)) + "\n")
            count += 1
    return count


class ReplayClient:
    """A BinlogClient over recorded events (a JSON-lines file or a list)."""

    def __init__(self, source: Path | list[ev.Event]) -> None:
        self._source = source

    def events(self) -> Iterator[ev.Event]:
        if isinstance(self._source, list):
            yield from self._source
            return
        with open(self._source) as f:
            for line in f:
                yield _decode(json.loads(line))

    def close(self) -> None:
        pass
