"""CreateAcls, DescribeAcls and DeleteAcls: manage the bindings the authorizer enforces
(logcore.security). Changing them needs ALTER on the cluster, listing them DESCRIBE; without an
authorizer each answers SECURITY_DISABLED, as Kafka does. (v0, without pattern
types, is not offered: today's clients send v1 or later.)"""

from __future__ import annotations

import asyncio

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, InvalidRequest, SecurityDisabled
from ..security.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from . import handles


def _store(ctx, operation: Operation):
    if ctx.authorizer is None:
        raise SecurityDisabled("no authorizer is configured on the broker (set authorizer.class.name)")
    ctx.require(operation, ResourceType.CLUSTER)
    return ctx.authorizer.store


def _enum(enum_type, value: int):
    try:
        return enum_type(value)
    except ValueError:
        return enum_type(0)  # UNKNOWN: refused with the rest of what is wrong


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx, request) -> dict:
    try:
        store = _store(ctx, Operation.ALTER)
    except BrokerError as exc:  # (no authorizer, or not allowed: every item says so)
        return {"results": [{"error_code": exc.code, "error_message": exc.message} for _ in request.creations]}
    results, valid = [], []
    for c in request.creations:
        binding = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                             _enum(PatternType, c.resource_pattern_type),
                             c.principal, c.host, _enum(Operation, c.operation), _enum(Permission, c.permission_type))
        problem = binding.problem()
        results.append({"error_code": InvalidRequest.code if problem else ErrorCode.none, "error_message": problem})
        if not problem:
            valid.append(binding)
    if valid:
        await asyncio.to_thread(store.add, valid)
    return {"results": results}


def _filter(f) -> AclFilter:
    return AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                     _enum(PatternType, f.pattern_type_filter),
                     f.principal_filter, f.host_filter, _enum(Operation, f.operation),
                     _enum(Permission, f.permission_type))


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx, request) -> dict:
    store = _store(ctx, Operation.DESCRIBE)
    wanted = _filter(request)
    if problem := wanted.problem():
        raise InvalidRequest(problem)
    resources: dict[tuple, list[dict]] = {}
    for b in sorted((b for b in store.bindings if wanted.matches(b)), key=lambda b: (b.resource_type, b.resource_name)):
        resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission})
    return {"error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": t, "resource_name": name, "pattern_type": p, "acls": acls}
        for (t, name, p), acls in resources.items()]}


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx, request) -> dict:
    try:
        store = _store(ctx, Operation.ALTER)
    except BrokerError as exc:  # (no authorizer, or not allowed: every item says so)
        return {"filter_results": [{"error_code": exc.code, "error_message": exc.message, "matching_acls": []}
                                   for _ in request.filters]}
    filters = [_filter(f) for f in request.filters]
    valid = [f for f in filters if not f.problem()]
    removed = iter(await asyncio.to_thread(store.remove, valid) if valid else [])
    results = []
    for f in filters:
        if problem := f.problem():
            results.append({"error_code": InvalidRequest.code, "error_message": problem, "matching_acls": []})
            continue
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.resource_type,
             "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
             "host": b.host, "operation": b.operation, "permission_type": b.permission} for b in next(removed)]})
    return {"filter_results": results}
