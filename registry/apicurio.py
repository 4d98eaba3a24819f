"""Apicurio Registry's v2 REST API (`/apis/registry/v2`): the part its Kafka serdes and Kafka Connect
converters (the 2.x line, on Maven Central) call, over the same subjects, versions and ids as
Confluent's API.

Apicurio's serdes never call Confluent's API: with `apicurio.registry.url=http://HOST:PORT/apis/registry/v2`
a serializer creates or finds its artifact (POST `/groups/{g}/artifacts?ifExists=...`, GET or POST
`.../artifacts/{a}/meta`) and a deserializer fetches the writer's schema by the id in the record
(GET `/ids/globalIds/{id}` or `/ids/contentIds/{id}`, and their `/references`). `as-confluent` only
changes the record's framing (magic byte and 4-byte id).

The mapping (docs/registry.md, "Apicurio's API"):
- group `default` is the only group; artifact `A` in it is Confluent's subject `A`, and an artifact's
  versions are the subject's versions;
- an artifact type is a schema type (AVRO, JSON, PROTOBUF);
- `contentId` and `globalId` are both Confluent's schema id: a schema registered through either API
  is found by its id through the other, and a record framed by confluent-kafka's serializer is read
  by Apicurio's deserializer and the other way round. (Apicurio gives each version a `globalId` of
  its own; here the versions of two artifacts with the same content share it.)
- `ifExists`: FAIL refuses an existing artifact, RETURN answers its latest version, RETURN_OR_UPDATE
  and UPDATE register as Confluent does: content equal to a live version answers that version.

Errors have Apicurio's body (`error_code` is the HTTP status, `name` the exception its client raises).
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

from aiohttp import web

from .errors import (BadRequest, Incompatible, InvalidSchema, InvalidVersion, RegistryError, SchemaNotFound,
                     SubjectExists, SubjectNotFound, VersionNotFound)
from .records import SchemaVersion
from .service import Registry

PREFIX = "/apis/registry/v2"
GROUP = "default"
ARTIFACT_TYPES = {"AVRO": "AVRO", "JSON": "JSON", "PROTOBUF": "PROTOBUF"}
CONTENT_TYPES = {"AVRO": "application/json", "JSON": "application/json", "PROTOBUF": "application/x-protobuf"}
# the bodies {"content", "references"}: 2.x's client names them so, 3.x's v2 client (Kiota) with "vnd."
EXTENDED = ("application/create.extended+json", "application/get.extended+json",
            "application/vnd.create.extended+json", "application/vnd.get.extended+json")
IF_EXISTS = {"FAIL": "fail", "RETURN": "latest", "UPDATE": "register", "RETURN_OR_UPDATE": "register"}  # (service.py)
# Confluent's errors as Apicurio's client names them (its ExceptionMapper raises the class of that name).
NAMES = {SubjectNotFound: "ArtifactNotFoundException", VersionNotFound: "VersionNotFoundException",
         SchemaNotFound: "ContentNotFoundException", Incompatible: "RuleViolationException",
         SubjectExists: "ArtifactAlreadyExistsException",
         InvalidSchema: "InvalidArtifactException", InvalidVersion: "VersionNotFoundException",
         BadRequest: "BadRequestException"}


def _apicurio_error(exc: RegistryError) -> web.Response:
    name = next((n for cls, n in NAMES.items() if isinstance(exc, cls)), type(exc).__name__)
    status = 404 if isinstance(exc, InvalidVersion) else exc.status
    return web.json_response({"error_code": status, "message": str(exc), "name": name}, status=status)


def _errors(handler):
    @functools.wraps(handler)
    async def answered(request: web.Request):
        try:
            return await handler(request)
        except RegistryError as exc:
            return _apicurio_error(exc)
    return answered


def _in_group(request: web.Request) -> None:
    group = request.match_info["group"]
    if group != GROUP:
        raise BadRequest(f"group {group!r} is not served: binlake's registry has the one group {GROUP!r}, whose "
                         "artifacts are Confluent's subjects (leave apicurio.registry.artifact.group-id unset)")


def _subject(request: web.Request) -> str:
    _in_group(request)
    return request.match_info["artifact"]


def _schema_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not raw.isdigit():
        raise SchemaNotFound(f"No content with id {raw}")
    return int(raw)


def version_meta(record: SchemaVersion) -> dict[str, Any]:
    """Apicurio's VersionMetaData (and ArtifactMetaData: the same fields) of one subject version."""
    return {"groupId": GROUP, "id": record.subject, "version": str(record.version),
            "type": record.schema_type, "globalId": record.id, "contentId": record.id, "state": "ENABLED",
            "labels": [], "properties": {}, "references": [_reference(ref) for ref in record.references]}


def _reference(ref: dict) -> dict[str, Any]:
    return {"groupId": GROUP, "artifactId": ref["subject"], "version": str(ref["version"]), "name": ref["name"]}


def _confluent_reference(ref: Any) -> dict[str, Any]:
    if not isinstance(ref, dict) or not isinstance(ref.get("artifactId"), str) or not isinstance(ref.get("name"), str):
        raise BadRequest(f"a reference is {{groupId, artifactId, version, name}}; got {ref!r}")
    if ref.get("groupId") not in (None, GROUP):
        raise BadRequest(f"reference {ref['name']!r} is in group {ref['groupId']!r}: only {GROUP!r} is served")
    try:
        version = int(ref.get("version"))
    except (TypeError, ValueError):
        raise BadRequest(f"reference {ref['name']!r} needs a numbered version; got {ref.get('version')!r}") from None
    return {"name": ref["name"], "subject": ref["artifactId"], "version": version}


async def _content(request: web.Request) -> tuple[str, list[dict]]:
    """(schema text, Confluent references) of a body: the schema itself, or Apicurio's extended JSON
    `{"content": ..., "references": [...]}` when the Content-Type says so."""
    text = (await request.read()).decode("utf-8", errors="replace")
    if request.content_type not in EXTENDED:
        return text, []
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"a {request.content_type} body is JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise BadRequest(f"a {request.content_type} body is {{\"content\": \"...\", \"references\": [...]}}")
    return body["content"], [_confluent_reference(ref) for ref in body.get("references") or []]


def _raw(record: SchemaVersion) -> web.Response:
    return web.Response(text=record.schema, content_type=CONTENT_TYPES[record.schema_type],
                        headers={"X-Registry-ArtifactType": record.schema_type})


def _by_id(registry: Registry, request: web.Request) -> SchemaVersion:
    record = registry.schema_by_id(_schema_id(request))
    if request.query.get("dereference", "false").lower() == "true" and record.references:
        raise BadRequest(f"schema {record.id} has references and is not served dereferenced: leave "
                         "apicurio.registry.dereference unset, the deserializer then fetches the references")
    return record


def add_routes(routes: web.RouteTableDef, registry: Registry, changes) -> None:
    """Apicurio's routes beside Confluent's; `changes` runs a handler on the elected leader (rest.py)."""

    @routes.post(PREFIX + "/groups/{group}/artifacts")
    @_errors
    @changes
    async def create_artifact(request):
        _in_group(request)
        subject = request.headers.get("X-Registry-ArtifactId") or str(uuid.uuid4())
        raw_type = request.headers.get("X-Registry-ArtifactType")
        if raw_type is None or raw_type.upper() not in ARTIFACT_TYPES:
            raise BadRequest(f"X-Registry-ArtifactType must be one of {', '.join(ARTIFACT_TYPES)} (got {raw_type!r}); "
                             "binlake does not guess an artifact's type from its content")
        if "X-Registry-Version" in request.headers:
            raise BadRequest("X-Registry-Version is not served: versions are numbered by the registry, as "
                             "Confluent's are (leave apicurio.registry.artifact.version unset)")
        if_exists = request.query.get("ifExists", "FAIL").upper()
        if if_exists not in IF_EXISTS:
            raise BadRequest(f"ifExists must be one of {', '.join(IF_EXISTS)} (got {if_exists!r})")
        text, references = await _content(request)
        body = {"schema": text, "schemaType": ARTIFACT_TYPES[raw_type.upper()], "references": references}
        done = await registry.register(subject, body, normalize=False, when_live=IF_EXISTS[if_exists])
        return web.json_response(version_meta(registry.version(subject, str(done["version"]))))

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}")
    @_errors
    async def latest_content(request):
        return _raw(registry.version(_subject(request), "latest"))

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}/meta")
    @_errors
    async def latest_meta(request):
        return web.json_response(version_meta(registry.version(_subject(request), "latest")))

    @routes.post(PREFIX + "/groups/{group}/artifacts/{artifact}/meta")
    @_errors
    async def meta_by_content(request):
        subject = _subject(request)
        live = registry.state.versions(subject)
        if not live:
            raise SubjectNotFound(subject)
        text, references = await _content(request)
        found = registry.lookup(subject, {"schema": text, "schemaType": live[-1].schema_type,
                                          "references": references},
                                normalize=request.query.get("canonical", "false").lower() == "true")
        return web.json_response(version_meta(registry.version(subject, str(found["version"]))))

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}/versions")
    @_errors
    async def versions(request):
        subject = _subject(request)
        records = [registry.version(subject, str(v)) for v in registry.versions(subject)]
        return web.json_response({"count": len(records), "versions": [version_meta(r) for r in records]})

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}/versions/{version}")
    @_errors
    async def version_content(request):
        return _raw(registry.version(_subject(request), request.match_info["version"]))

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}/versions/{version}/meta")
    @_errors
    async def version_metadata(request):
        return web.json_response(version_meta(registry.version(_subject(request), request.match_info["version"])))

    @routes.get(PREFIX + "/groups/{group}/artifacts/{artifact}/versions/{version}/references")
    @_errors
    async def version_references(request):
        record = registry.version(_subject(request), request.match_info["version"])
        return web.json_response([_reference(ref) for ref in record.references])

    for kind in ("globalIds", "contentIds"):
        @routes.get(f"{PREFIX}/ids/{kind}/{{id}}")
        @_errors
        async def content_by_id(request):
            return _raw(_by_id(registry, request))

        @routes.get(f"{PREFIX}/ids/{kind}/{{id}}/references")
        @_errors
        async def references_by_id(request):
            return web.json_response([_reference(ref) for ref in registry.schema_by_id(_schema_id(request)).references])

