"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): list and change the users
SCRAM authenticates (logcore.security.credentials). The admin client salts the password itself;
the broker keeps only the keys derived from it. A cluster's users live in ZooKeeper, so any broker
answers for all."""

from __future__ import annotations

import asyncio
from collections import Counter

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import ClusterAuthorizationFailed
from ..security.acls import Operation, ResourceType
from ..security.sasl import MIN_ITERATIONS, ScramCredential
from . import handles

MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MAX_ITERATIONS = 16384  # Kafka's ceiling


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx, request) -> dict:
    ctx.require(Operation.DESCRIBE, ResourceType.CLUSTER)
    stored = await asyncio.to_thread(ctx.credentials.all)  # (ZooKeeper reads block)
    # null or empty: every user (the schema: "null or empty means all users")
    names = [u.name for u in request.users or ()] or sorted(stored)
    repeated = {name for name, count in Counter(names).items() if count > 1}
    results = []
    for name in dict.fromkeys(names):
        if name in repeated:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                            "error_message": f"user {name!r} is asked for more than once", "credential_infos": []})
        elif name not in stored:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                            "error_message": f"attempt to describe a user credential that does not exist: {name}",
                            "credential_infos": []})
        else:
            codes = {mechanism: code for code, mechanism in MECHANISM_CODES.items()}
            results.append({"user": name, "error_code": ErrorCode.none, "error_message": None, "credential_infos": [
                {"mechanism": codes[m], "iterations": c.iterations} for m, c in sorted(stored[name].items())]})
    return {"error_code": ErrorCode.none, "error_message": None, "results": results}


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx, request) -> dict:
    changes = [(d.name, d.mechanism, None) for d in request.deletions] + [(u.name, u.mechanism, u) for u in request.upsertions]
    twice = {(name, mechanism) for (name, mechanism), n in Counter((c[0], c[1]) for c in changes).items() if n > 1}
    allowed = ctx.allowed(Operation.ALTER, ResourceType.CLUSTER)
    results: dict[str, dict] = {}
    for name, code, upsertion in changes:
        error = _refusal(name, code, upsertion, twice) if allowed else (
            ClusterAuthorizationFailed.code, f"{ctx.principal} may not ALTER on the cluster")
        if error is None:
            mechanism = MECHANISM_CODES[code]
            credential = None if upsertion is None else ScramCredential.from_salted_password(
                mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations)
            if credential is None and ctx.credentials.get(name, mechanism) is None:
                error = (ErrorCode.resource_not_found, f"attempt to delete a user credential that does not exist: "
                                                       f"{name} {mechanism}")
            else:
                await asyncio.to_thread(ctx.credentials.put, name, mechanism, credential)
        if name not in results or error is not None:
            code_, message = error or (ErrorCode.none, None)
            results[name] = {"user": name, "error_code": code_, "error_message": message}
    return {"results": list(results.values())}


def _refusal(name: str, code: int, upsertion, twice) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "the user name is empty"
    if code not in MECHANISM_CODES:
        return ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {code}: 1 is SCRAM-SHA-256, 2 SCRAM-SHA-512"
    if (name, code) in twice:
        return ErrorCode.duplicate_resource, f"{name} {MECHANISM_CODES[code]} is changed more than once in the request"
    if upsertion is not None:
        if not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, (f"iterations must be between {MIN_ITERATIONS} and "
                                                       f"{MAX_ITERATIONS}, got {upsertion.iterations}")
        if not upsertion.salt or not upsertion.salted_password:
            return ErrorCode.unacceptable_credential, "salt and salted password must not be empty"
    return None
