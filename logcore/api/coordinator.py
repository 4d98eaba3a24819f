"""FindCoordinator: which broker coordinates a group or a transactional id (v4+: many keys at once).

The coordinator of a key is the leader of the partition of the coordinator's topic that the key
hashes to, as the cluster view says (a single broker coordinates every key). Asking for a
coordinator creates the topic if it does not exist yet, as Kafka does.
"""

from __future__ import annotations

import contextlib
import functools
from operator import attrgetter

from ..coordinator.offsets_codec import partition_for
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from ..security.acls import Operation, ResourceType
from . import handles

GROUP, TRANSACTION = 0, 1
GROUPS, SHARES, TRANSACTIONS = attrgetter("groups"), attrgetter("shares"), attrgetter("transactions")


def creating_topics_of(*coordinators):
    """For a handler whose request may write these coordinators' topics, and that a client may send
    without FindCoordinator first: a missing topic's creation (its logs made off the event loop) is
    awaited before the handler runs, as FindCoordinator would have; a creation that fails is left
    for the handler to answer (COORDINATOR_NOT_AVAILABLE on its write)."""
    def wrap(handler):
        @functools.wraps(handler)
        async def run(ctx, request):
            for coordinator in coordinators:
                with contextlib.suppress(BrokerError):
                    await coordinator(ctx).ensure_topic()
            return await handler(ctx, request)
        return run
    return wrap


async def _coordinator(ctx, key: str, key_type: int) -> dict:
    missing = {"key": key, "node_id": -1, "host": "", "port": -1}
    if key_type not in (GROUP, TRANSACTION):
        return {**missing, "error_code": ErrorCode.invalid_request,
                "error_message": f"coordinator key type {key_type} is not supported; use 0 (group) or 1 (transaction)"}
    resource_type = ResourceType.GROUP if key_type == GROUP else ResourceType.TRANSACTIONAL_ID
    if not ctx.allowed(Operation.DESCRIBE, resource_type, key):
        return {**missing, "error_code": ErrorCode.group_authorization_failed if key_type == GROUP
                else ErrorCode.transactional_id_authorization_failed, "error_message": None}
    coordinator = ctx.groups if key_type == GROUP else ctx.transactions
    topic, partition = coordinator.topic.name, partition_for(key, coordinator.topic.partitions)
    try:
        await coordinator.ensure_topic()
    except BrokerError as exc:
        return {**missing, "error_code": ErrorCode.coordinator_not_available,
                "error_message": f"no coordinator for {key!r}: {exc.message}"}
    node = ctx.cluster.coordinator(topic, partition)
    if node is None:
        return {**missing, "error_code": ErrorCode.coordinator_not_available,
                "error_message": f"{topic}-{partition}, which holds {key!r}, has no leader yet; retry"}
    address = node.address(ctx.listener)
    if address is None:
        return {**missing, "error_code": ErrorCode.coordinator_not_available,
                "error_message": f"the coordinator of {key!r}, broker {node.node_id}, has no listener {ctx.listener}"}
    return {"key": key, "node_id": node.node_id, "host": address[0], "port": address[1],
            "error_code": ErrorCode.none, "error_message": None}


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx, request) -> dict:
    key_type = getattr(request, "key_type", GROUP)
    if ctx.api_version >= 4:
        return {"coordinators": [await _coordinator(ctx, key, key_type) for key in request.coordinator_keys]}
    return await _coordinator(ctx, request.key, key_type)
