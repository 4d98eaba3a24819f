"""Where to restart (the offset context) and where one event came from (source info).

The offset is what the runtime stores with each batch, in the same Kafka transaction. It names the
binlog position to reconnect at, the GTID set executed before it, how many row changes of the
transaction that starts there were already emitted (`skip_rows`, so a large transaction can be
split over several batches), and while a snapshot runs, the last finished chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from cdc.gtid import MySqlGtidSet


@dataclass(frozen=True, slots=True, order=True)
class BinlogPosition:
    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True, slots=True)
class SnapshotProgress:
    """A snapshot in progress: tables finished, and the primary key of the last row of the last finished chunk."""

    done: tuple[str, ...] = ()
    table: str | None = None
    after: tuple | None = None

    def to_dict(self) -> dict:
        return {"done": list(self.done), "table": self.table, "after": None if self.after is None else list(self.after)}

    @classmethod
    def from_dict(cls, d: dict) -> "SnapshotProgress":
        after = d.get("after")
        return cls(tuple(d.get("done", ())), d.get("table"), None if after is None else tuple(after))


@dataclass(frozen=True, slots=True)
class Offset:
    """Restart position. Immutable: the streaming source derives a new one per step."""

    position: BinlogPosition
    gtids: str = ""
    skip_rows: int = 0
    snapshot: SnapshotProgress | None = None  # set while a snapshot is unfinished

    def to_dict(self) -> dict:
        d = {"file": self.position.file, "pos": self.position.pos, "gtids": self.gtids, "skip_rows": self.skip_rows}
        if self.snapshot is not None:
            d["snapshot"] = self.snapshot.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Offset":
        snap = d.get("snapshot")
        return cls(BinlogPosition(d["file"], int(d["pos"])), d.get("gtids", ""), int(d.get("skip_rows", 0)),
                   SnapshotProgress.from_dict(snap) if snap is not None else None)


@dataclass(slots=True)
class SourceInfo:
    """Where one change came from: the `source` block of a Debezium event. Mutated per event by one source."""

    name: str
    server_id: int = 0
    file: str = ""
    pos: int = 0
    row: int = 0
    gtid: str | None = None
    db: str = ""
    table: str = ""
    ts_ms: int = 0
    snapshot: str = "false"

    def to_dict(self) -> dict:
        return {"version": "binlake-0.1", "connector": "mysql", "name": self.name, "server_id": self.server_id,
                "file": self.file, "pos": self.pos, "row": self.row, "gtid": self.gtid, "db": self.db,
                "table": self.table, "ts_ms": self.ts_ms, "snapshot": self.snapshot}

    def event(self) -> "EventSource":
        return EventSource(self.to_dict())


class EventSource:
    """The source block shared by the rows of one event; only `row` differs, so the JSON is built once."""

    __slots__ = ("fields", "_prefix")

    def __init__(self, fields: dict) -> None:
        self.fields = fields
        self._prefix: bytes | None = None

    def json(self, row: int) -> bytes:
        return self.prefix() + b"%d}" % row

    def prefix(self) -> bytes:
        """The JSON up to the row number: `prefix() + b"%d}" % row` is `json(row)`."""
        if self._prefix is None:
            self._prefix = orjson.dumps({k: v for k, v in self.fields.items() if k != "row"})[:-1] + b',"row":'
        return self._prefix


class GtidSet:
    """Executed GTIDs, as MariaDB (`domain-server-seq` per domain) or MySQL (`uuid:1-5:tag:1-2,...`,
    cdc.gtid) spells them. Mutated by one owner."""

    def __init__(self, text: str = "") -> None:
        self._mariadb: dict[int, str] = {}
        mysql = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            if ":" in part:
                mysql.append(part)
            else:
                self._mariadb[int(part.split("-")[0])] = part
        self._mysql = MySqlGtidSet(",".join(mysql))

    def add(self, gtid: str) -> None:
        if ":" in gtid:
            self._mysql.add(gtid)
        else:
            self._mariadb[int(gtid.split("-")[0])] = gtid

    def missing_from(self, other: "GtidSet") -> str:
        """What of this set `other` lacks, as text ("" when it holds all of it). MariaDB: per domain, the
        last GTID of this set when `other`'s sequence number in that domain is lower."""
        parts = []
        for domain in sorted(self._mariadb):
            mine, theirs = self._mariadb[domain], other._mariadb.get(domain)
            if theirs is None or int(theirs.rsplit("-", 1)[1]) < int(mine.rsplit("-", 1)[1]):
                parts.append(mine)
        if missing := self._mysql.subtract(other._mysql):
            parts.append(str(missing))
        return ",".join(parts)

    def __bool__(self) -> bool:
        return bool(self._mariadb) or bool(self._mysql)

    def __str__(self) -> str:
        parts = [self._mariadb[d] for d in sorted(self._mariadb)]
        if self._mysql:
            parts.append(str(self._mysql))
        return ",".join(parts)
