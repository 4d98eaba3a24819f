"""UpdateFeatures (`kafka-features upgrade|downgrade`): `transaction.version` changed while the
brokers run (logcore/features.py keeps it). DescribeFeatures is ApiVersions' finalized features.

As Kafka's controller: the request needs ALTER on the cluster; every update is checked first and
none is applied if one is refused (INVALID_UPDATE_VERSION, with what to do); a downgrade must say
so (`allow_downgrade` in v0, a downgrade type in v1+); `validate_only` applies nothing."""

from __future__ import annotations

import asyncio
from collections import Counter

from ..features import UPDATABLE
from ..protocol.codec import ApiKey, ErrorCode
from ..security.acls import Operation, ResourceType
from . import handles
from .versions import SUPPORTED_FEATURES, feature_levels

UPGRADE = 1  # UpdateFeatures v1's upgrade types: 2 and 3 are the safe and the unsafe downgrade


def refusal(ctx, update) -> str | None:
    """Why `update` cannot be applied, in words a user can act on; None when it can."""
    name, level = update.feature, update.max_version_level
    if name not in SUPPORTED_FEATURES:
        return f"unknown feature {name!r}; this broker has {', '.join(SUPPORTED_FEATURES)}"
    if name not in UPDATABLE:
        return (f"{name} follows the broker setting group.coordinator.rebalance.protocols ('consumer' for "
                "group.version 1, 'share' for share.version 1): change that setting instead")
    low, high = SUPPORTED_FEATURES[name]
    if not low <= level <= high:
        return f"{name} level {level} is outside what this broker supports ({low} to {high})"
    current = feature_levels(ctx.config, ctx.features)[name]
    downgrade = update.allow_downgrade if ctx.api_version == 0 else update.upgrade_type != UPGRADE
    if level < current and not downgrade:
        return f"{name} is at level {current}: going to {level} is a downgrade, and the request does not allow one"
    if level > current and ctx.api_version > 0 and downgrade:
        return f"{name} is at level {current}: going to {level} is an upgrade, not a downgrade"
    return None


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
async def update_features(ctx, request) -> dict:
    ctx.require(Operation.ALTER, ResourceType.CLUSTER)
    named = Counter(u.feature for u in request.feature_updates)
    refusals = {}
    for update in request.feature_updates:
        why = "the request names this feature more than once" if named[update.feature] > 1 else refusal(ctx, update)
        if why is not None:
            refusals[update.feature] = why
    if refusals:
        first = next(iter(refusals.values()))
        return {"error_code": ErrorCode.invalid_update_version, "error_message": first, "results": [
            {"feature": u.feature, "error_code": ErrorCode.invalid_update_version,
             "error_message": refusals.get(u.feature, "not applied: another update in the request was refused")}
            for u in request.feature_updates]}
    if not getattr(request, "validate_only", False) and request.feature_updates:
        levels = {u.feature: u.max_version_level for u in request.feature_updates}
        await asyncio.to_thread(ctx.features.put, levels)  # (a ZooKeeper write in a cluster)
    return {"error_code": ErrorCode.none, "results": [
        {"feature": u.feature, "error_code": ErrorCode.none} for u in request.feature_updates]}
