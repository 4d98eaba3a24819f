"""The console's pipeline view: MySQL → connector → log → processors → sink, one stage each, drawn from
what the other pages read (the connect runtime, the cluster, the sink's metrics) and joined by topic:
a connector's active topics (KIP-558) are the log's part of the pipeline, and the consumer groups that
commit offsets on them are its processors. Totals only; the page turns successive totals into rates."""

from __future__ import annotations

import asyncio

from . import remote
from .cluster import Cluster


async def pipeline(cluster: Cluster, connect_url: str | None, sink_url: str | None) -> dict:
    sources = await remote.sources(connect_url) if connect_url else []
    mine = {topic for source in sources for topic in source["topics"]}
    topics, groups = await asyncio.gather(asyncio.to_thread(cluster.topics), asyncio.to_thread(cluster.groups))
    log = [t for t in topics if t["name"] in mine]
    processors = [g for g in groups if any(p["topic"] in mine for p in g["partitions"])]
    sinks = await remote.sink(sink_url) if sink_url else []
    return {
        "mysql": [{"connector": s["name"], "server": s["server"], "lag_seconds": s["lag_seconds"],
                   "lag_bytes": s["lag_bytes"]} for s in sources if s["server"]],  # (datagen reads none)
        "connectors": [{"name": s["name"], "state": s["state"], "records": s["records"]} for s in sources],
        "log": {"topics": sorted(mine), "messages": sum(t["messages"] for t in log),
                "end": sum(p["end"] or 0 for t in log for p in t["partitions"]),
                "size": sum(t["size"] or 0 for t in log) if all(t["size"] is not None for t in log) else None,
                "under_replicated": sum(p["under_replicated"] for t in log for p in t["partitions"])},
        "processors": [{"group": g["group"], "state": g["state"], "members": len(g["members"]), "lag": g["lag"],
                        "committed": sum(p["committed"] for p in g["partitions"] if p["topic"] in mine)}
                       for g in processors],
        "sinks": [{"query": q["query"], "rows": sum(q["rows"].values()), "behind": q["behind"],
                   "freshness_p99": max((f.get("0.99", 0) for f in q["freshness"].values()), default=None)}
                  for q in sinks],
    }
