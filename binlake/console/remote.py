"""The console's other sources: a connect runtime's REST API (connectors, their tasks' state and
snapshot progress; restarts when writes are allowed) and the Spark sink's Prometheus endpoint (each
query's batches, rows merged per table, time per phase, offsets behind)."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .cluster import ConsoleError

TIMEOUT = aiohttp.ClientTimeout(total=10)


async def connectors(connect_url: str) -> list[dict]:
    found = await _get_json(f"{connect_url}/connectors?expand=status&expand=info", "the connect runtime")
    return [{"name": name, "type": body["status"]["type"], "state": body["status"]["connector"]["state"],
             "worker": body["status"]["connector"].get("worker_id"),
             "plugin": body["info"]["config"].get("connector"), "tasks": body["status"]["tasks"]}
            for name, body in sorted(found.items())]


async def sources(connect_url: str) -> list[dict]:
    """Each connector as the pipeline view shows it: its state, the records its tasks wrote, the binlog
    lag they report, the database server it reads and its active topics (KIP-558)."""
    found = await _get_json(f"{connect_url}/connectors?expand=status&expand=info", "the connect runtime")
    topics = await asyncio.gather(*(_get_json(f"{connect_url}/connectors/{name}/topics", "the connect runtime")
                                    for name in sorted(found)))
    shown = []
    for (name, body), active in zip(sorted(found.items()), topics):
        tasks = body["status"]["tasks"]
        database = body["info"]["config"].get("database") or {}
        lags = [t["source"] for t in tasks if "binlog_lag_seconds" in t.get("source", {})]
        shown.append({"name": name, "state": body["status"]["connector"]["state"],
                      "server": f"{database['host']}:{database.get('port', 3306)}" if "host" in database else None,
                      "records": sum(t.get("records", 0) for t in tasks),
                      "lag_seconds": max((s["binlog_lag_seconds"] for s in lags), default=None),
                      "lag_bytes": max((s.get("binlog_lag_bytes", 0) for s in lags), default=None),
                      "topics": active[name]["topics"]})
    return shown


async def restart(connect_url: str, name: str) -> dict:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.post(f"{connect_url}/connectors/{name}/restart",
                                params={"includeTasks": "true"}) as response:
            body = await response.json(content_type=None)
            if response.status >= 300:
                raise ConsoleError(f"the connect runtime refused the restart of {name}: "
                                   f"{body.get('message', response.status)}")
            return body


async def sink(metrics_url: str) -> list[dict]:
    """Per streaming query: batches, rows per table, mean seconds per phase, offsets behind, and each
    table's freshness ({table: {"0.5": s, "0.99": s}}: over the sink's window, none for a table
    without changes in it)."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        try:
            async with session.get(metrics_url) as response:
                text = await response.text()
        except aiohttp.ClientError as exc:
            raise ConsoleError(f"cannot reach the sink's metrics at {metrics_url}: {exc}") from None
    queries: dict[str, dict] = {}

    def query(name: str) -> dict:
        return queries.setdefault(name, {"query": name, "batches": 0, "rows": {}, "seconds": {}, "behind": None,
                                             "freshness": {}})
    sums: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            if s.name == "binlake_sink_batches_total":
                query(labels["query"])["batches"] = int(s.value)
            elif s.name == "binlake_sink_rows_total":
                query(labels["query"])["rows"][labels["table"]] = int(s.value)
            elif s.name == "binlake_sink_offsets_behind":
                query(labels["query"])["behind"] = int(s.value)
            elif s.name == "binlake_sink_freshness_seconds":
                query(labels["query"])["freshness"].setdefault(labels["table"], {})[labels["quantile"]] = s.value
            elif s.name == "binlake_sink_batch_seconds_sum":
                sums[(labels["query"], labels["phase"])] = s.value
    for (name, phase), total in sums.items():
        batches = query(name)["batches"]
        query(name)["seconds"][phase] = round(total / batches, 3) if batches else None
    return sorted(queries.values(), key=lambda q: q["query"])


async def _get_json(url: str, what: str):
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        try:
            async with session.get(url) as response:
                if response.status >= 300:
                    raise ConsoleError(f"{what} answered {response.status} for {url}")
                return await response.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise ConsoleError(f"cannot reach {what} at {url}: {exc}") from None
