"""Confluent Schema Registry's REST API over aiohttp.

Paths, verbs, bodies, status codes and error bodies (`{"error_code": N, "message": ...}`) are
Confluent's, so its clients work unchanged. Requests that change something run on the elected
leader: another instance forwards them there (with `X-Binlake-Forwarded`, so a request is forwarded
at most once) and relays the answer. GET /metrics serves Prometheus metrics. Apicurio's v2 API, the
part its serdes call, is served beside (registry/apicurio.py).
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import time

import aiohttp
from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector,
                               generate_latest)

from . import apicurio, schemas
from .election import Election
from .errors import BadRequest, ForwardingFailed, RegistryError, SchemaNotFound, UnknownLeader
from .service import Registry

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED = "X-Binlake-Forwarded"
MAX_BODY_BYTES = 16 * 1024 * 1024  # a schema with its references stays far below
ELECTION_WAIT_S = 15.0  # a write that arrives before the first election waits for it this long


def _json(body, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE)


class Metrics:
    def __init__(self, registry: Registry, election: Election) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("binlake_registry_requests", "REST requests served", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("binlake_registry_request_seconds", "REST request latency", ["method", "route"],
                                 registry=self.registry)
        Gauge("binlake_registry_subjects", "subjects with a live version", registry=self.registry).set_function(
            lambda: len(registry.subjects()))
        Gauge("binlake_registry_max_schema_id", "the highest schema id", registry=self.registry).set_function(
            lambda: registry.state.max_id)
        Gauge("binlake_registry_leader", "1 when this instance is the elected leader",
              registry=self.registry).set_function(lambda: int(election.is_leader))
        ProcessCollector(registry=self.registry)


def _flag(request: web.Request, name: str, default: bool = False) -> bool:
    value = request.query.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise BadRequest(f"{name} must be true or false (got {value!r})")
    return value.lower() == "true"


def _page(items: list, request: web.Request) -> list:
    try:
        offset, limit = int(request.query.get("offset", 0)), int(request.query.get("limit", -1))
    except ValueError:
        raise BadRequest("offset and limit must be integers") from None
    return items[offset:] if limit < 0 else items[offset:offset + limit]


async def _body(request: web.Request):
    try:
        return await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None


def _schema_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not raw.lstrip("-").isdigit():
        raise SchemaNotFound(f"Schema {raw} not found")
    return int(raw)


def make_app(registry: Registry, election: Election, *, authenticate=None,
             forward_tls: ssl.SSLContext | None = None) -> web.Application:
    """`authenticate`: a middleware every request passes after it is counted (listener.basic_auth);
    `forward_tls`: how writes are forwarded to a leader listening with TLS."""
    metrics = Metrics(registry, election)

    @web.middleware
    async def observe(request: web.Request, handler):
        started = time.monotonic()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        try:
            response = await handler(request)
        except RegistryError as exc:
            response = _json(exc.body(), exc.status)
        except web.HTTPException as exc:
            response = _json({"error_code": exc.status, "message": exc.reason}, exc.status)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            response = _json({"error_code": 50001, "message": f"{type(exc).__name__}: {exc}"}, 500)
        metrics.requests.labels(request.method, route, response.status).inc()
        metrics.latency.labels(request.method, route).observe(time.monotonic() - started)
        return response

    app = web.Application(middlewares=[observe, *([authenticate] if authenticate else [])],
                          client_max_size=MAX_BODY_BYTES)
    routes = web.RouteTableDef()
    session: dict[str, aiohttp.ClientSession] = {}

    def changes(handler):
        """Run on the leader: forward there when this instance is not it."""
        @functools.wraps(handler)
        async def on_leader(request: web.Request):
            if election.is_leader:
                return await handler(request)
            leader = election.leader or await election.wait_elected(ELECTION_WAIT_S)
            if election.is_leader:
                return await handler(request)
            if leader is None or leader == election.identity:
                raise UnknownLeader("Unknown leader: no schema registry instance leads writes now; retry shortly")
            if request.headers.get(FORWARDED):
                raise ForwardingFailed(f"Error while forwarding the request to the leader {leader.url}: it was "
                                       "forwarded once already (the instances disagree on the leader; retry)")
            return await _forward(request, leader.url)
        return on_leader

    async def _forward(request: web.Request, leader_url: str) -> web.Response:
        if "client" not in session:
            session["client"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                                      connector=aiohttp.TCPConnector(ssl=forward_tls or True))
        # the caller's credentials, and Apicurio's artifact headers (X-Registry-ArtifactId, ...)
        headers = {FORWARDED: "1", "Content-Type": request.headers.get("Content-Type", CONTENT_TYPE),
                   **{name: value for name, value in request.headers.items()
                      if name.lower() == "authorization" or name.lower().startswith("x-registry-")}}
        try:
            async with session["client"].request(request.method, f"{leader_url}{request.rel_url}",
                                                 data=await request.read(), headers=headers) as answer:
                return web.Response(body=await answer.read(), status=answer.status,
                                    content_type=answer.content_type)
        except aiohttp.ClientError as exc:
            raise ForwardingFailed(f"Error while forwarding the request to the leader {leader_url}: {exc}") from None

    async def close_session(_app):
        if "client" in session:
            await session["client"].close()

    app.on_cleanup.append(close_session)

    @routes.get("/")
    async def root(request):
        return _json({})

    @routes.get("/metrics")
    async def prometheus(request):
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @routes.get("/contexts")
    async def contexts(request):
        return _json(["."])

    @routes.get("/schemas/types")
    async def schema_types(request):
        return _json(list(schemas.TYPES))

    @routes.get("/schemas")
    async def all_schemas(request):
        return _json(_page(registry.all_schemas(request.query.get("subjectPrefix", ""), _flag(request, "deleted"),
                                                _flag(request, "latestOnly")), request))

    @routes.get("/schemas/ids/{id}")
    async def schema_by_id(request):
        return _json(registry.schema_response(registry.schema_by_id(_schema_id(request)),
                                              request.query.get("format")))

    @routes.get("/schemas/ids/{id}/schema")
    async def raw_schema_by_id(request):
        return _json_text(registry.schema_by_id(_schema_id(request)).schema)

    @routes.get("/schemas/ids/{id}/subjects")
    async def subjects_by_id(request):
        found = registry.subjects_of(_schema_id(request), _flag(request, "deleted"))
        return _json(_page(sorted({f["subject"] for f in found}), request))

    @routes.get("/schemas/ids/{id}/versions")
    async def versions_by_id(request):
        return _json(_page(registry.subjects_of(_schema_id(request), _flag(request, "deleted")), request))

    @routes.get("/schemas/guids/{guid}")
    async def schema_by_guid(request):
        return _json(registry.schema_response(registry.schema_by_guid(request.match_info["guid"])))

    @routes.get("/subjects")
    async def subjects(request):
        return _json(_page(registry.subjects(request.query.get("subjectPrefix", ""), _flag(request, "deleted"),
                                             _flag(request, "deletedOnly")), request))

    @routes.post("/subjects/{subject}")
    async def lookup(request):
        return _json(registry.lookup(request.match_info["subject"], await _body(request),
                                     _flag(request, "normalize"), _flag(request, "deleted")))

    @routes.delete("/subjects/{subject}")
    @changes
    async def delete_subject(request):
        return _json(await registry.delete_subject(request.match_info["subject"], _flag(request, "permanent")))

    @routes.get("/subjects/{subject}/versions")
    async def versions(request):
        return _json(_page(registry.versions(request.match_info["subject"], _flag(request, "deleted")), request))

    @routes.post("/subjects/{subject}/versions")
    @changes
    async def register(request):
        return _json(await registry.register(request.match_info["subject"], await _body(request),
                                             _flag(request, "normalize")))

    @routes.get("/subjects/{subject}/versions/{version}")
    async def version(request):
        record = registry.version(request.match_info["subject"], request.match_info["version"],
                                  _flag(request, "deleted"))
        return _json(registry.version_response(record, request.query.get("format")))

    @routes.get("/subjects/{subject}/versions/{version}/schema")
    async def raw_version(request):
        record = registry.version(request.match_info["subject"], request.match_info["version"],
                                  _flag(request, "deleted"))
        return _json_text(record.schema)

    @routes.get("/subjects/{subject}/versions/{version}/referencedby")
    async def referenced_by(request):
        return _json(registry.referenced_by(request.match_info["subject"], request.match_info["version"]))

    @routes.delete("/subjects/{subject}/versions/{version}")
    @changes
    async def delete_version(request):
        return _json(await registry.delete_version(request.match_info["subject"], request.match_info["version"],
                                                   _flag(request, "permanent")))

    @routes.post("/compatibility/subjects/{subject}/versions/{version}")
    async def compatibility(request):
        return _json(registry.test_compatibility(request.match_info["subject"], request.match_info["version"],
                                                 await _body(request), _flag(request, "normalize"),
                                                 _flag(request, "verbose")))

    @routes.post("/compatibility/subjects/{subject}/versions")
    async def compatibility_all(request):
        return _json(registry.test_compatibility(request.match_info["subject"], None, await _body(request),
                                                 _flag(request, "normalize"), _flag(request, "verbose")))

    @routes.get("/config")
    async def global_config(request):
        return _json(registry.config(None, True))

    @routes.put("/config")
    @changes
    async def put_global_config(request):
        return _json(await registry.set_config(None, await _body(request)))

    @routes.delete("/config")
    @changes
    async def delete_global_config(request):
        return _json(await registry.delete_config(None))

    @routes.get("/config/{subject}")
    async def subject_config(request):
        return _json(registry.config(request.match_info["subject"], _flag(request, "defaultToGlobal")))

    @routes.put("/config/{subject}")
    @changes
    async def put_subject_config(request):
        return _json(await registry.set_config(request.match_info["subject"], await _body(request)))

    @routes.delete("/config/{subject}")
    @changes
    async def delete_subject_config(request):
        return _json(await registry.delete_config(request.match_info["subject"]))

    @routes.get("/mode")
    async def global_mode(request):
        return _json(registry.mode(None, True))

    @routes.put("/mode")
    @changes
    async def put_global_mode(request):
        return _json(await registry.set_mode(None, await _body(request), _flag(request, "force")))

    @routes.get("/mode/{subject}")
    async def subject_mode(request):
        return _json(registry.mode(request.match_info["subject"], _flag(request, "defaultToGlobal")))

    @routes.put("/mode/{subject}")
    @changes
    async def put_subject_mode(request):
        return _json(await registry.set_mode(request.match_info["subject"], await _body(request),
                                             _flag(request, "force")))

    @routes.delete("/mode/{subject}")
    @changes
    async def delete_subject_mode(request):
        return _json(await registry.delete_mode(request.match_info["subject"]))

    apicurio.add_routes(routes, registry, changes)
    app.add_routes(routes)
    return app


def _json_text(schema: str) -> web.Response:
    """The schema itself as the body (GET .../schema), as Confluent serves it."""
    return web.Response(text=schema, content_type=CONTENT_TYPE)
