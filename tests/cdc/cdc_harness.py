"""A harness that runs the real source against throwaway MariaDB and MySQL servers (sandbox.sql) for
tests, and what the two kinds print differently."""

from __future__ import annotations

import itertools
import json

from sandbox.sql import SqlServer

GTID = {"mariadb": r"0-1-\d+", "mysql": r"[0-9a-f-]{36}:\d+"}    # one transaction's GTID, by server kind


def int_type(server: SqlServer, unsigned: bool = False) -> str:
    """INT as SHOW CREATE TABLE declares it: MariaDB keeps a display width, MySQL 8.0.19+ dropped it."""
    if server.kind == "mysql":
        return "int unsigned" if unsigned else "int"
    return "int(10) unsigned" if unsigned else "int(11)"


class Capture:
    """Runs the real source against a test server and decodes what it emits."""

    _server_ids = itertools.count(100)

    def __init__(self, server: SqlServer) -> None:
        self.server = server
        self.stores: dict[int, object] = {}     # schema history per source (server_id), kept across runs

    def config(self, db: str, **overrides) -> dict:
        base = self.server.settings(name="srv", server_id=next(self._server_ids), table_include=[rf"{db}\..*"],
                                    heartbeat_interval_s=0)
        return {**base, **overrides}

    def run(self, config: dict, offset: dict | None = None, store=None, limit: int | None = None, **kwargs):
        """Batches until the source has read everything the server has (or `limit` batches)."""
        from cdc.schema.history import MemoryHistoryStore
        from cdc.source import MySqlSource

        if store is None:
            store = self.stores.setdefault(config["server_id"], MemoryHistoryStore())
        source = MySqlSource(config, store, offset, follow=False, **kwargs)
        batches = []
        for batch in source.batches():
            batches.append(batch)
            if limit is not None and len(batches) >= limit:
                break
        return batches

    @staticmethod
    def records(batches) -> list[dict]:
        return [{"topic": r.topic, "key": json.loads(r.key) if r.key else None,
                 "value": json.loads(r.value) if r.value is not None else None, "partition": r.partition}
                for b in batches for r in b.records]

    @classmethod
    def changes(cls, batches, topic_suffix: str | None = None) -> list[dict]:
        """Debezium change values (no tombstones, no schema changes), optionally for one table topic."""
        return [r["value"] for r in cls.records(batches)
                if r["value"] is not None and "op" in r["value"]
                and (topic_suffix is None or r["topic"].endswith(topic_suffix))]
