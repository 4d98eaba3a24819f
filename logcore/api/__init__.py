"""Request handlers: one per API key, never per version.

A handler is `async def handler(ctx, request) -> dict | None`: it reads the kio request entity of
whatever version arrived and returns neutral response data (see `logcore.protocol.codec.build`),
or None when no response is due (produce with acks=0). The version range it declares is exactly
what ApiVersions advertises.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..protocol import errors
from ..protocol.codec import ApiKey
from ..security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from ..broker import Broker

Handler = Callable[["RequestContext", Any], Awaitable[dict | None]]
HANDLERS: dict[int, Handler] = {}
SUPPORTED: dict[int, tuple[int, int]] = {}


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: "Broker"
    api_version: int
    client_id: str | None
    client_host: str
    listener: str = "PLAINTEXT"        # the listener the request came in on: Metadata answers with its addresses
    principal: str = "User:ANONYMOUS"  # who sent it: the SASL user, else Kafka's anonymous principal

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May the sender do `operation` on the resource (the cluster when no name is given)?"""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(self.principal, self.client_host, operation,
                                                          resource_type, name)

    def allowed_on_some(self, operation: Operation, resource_type: ResourceType) -> bool:
        """May the sender do `operation` on at least one resource of the type?"""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_some(self.principal, self.client_host, operation,
                                                               resource_type)

    def authorized_operations(self, operations, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """The bit field (1 << operation) of those `operations` the sender may do, as Metadata,
        DescribeCluster and DescribeGroups report them."""
        return sum(1 << op for op in operations if self.allowed(op, resource_type, name))

    def require(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        """Raise the resource type's authorization error unless `allowed`."""
        if not self.allowed(operation, resource_type, name):
            what = "the cluster" if resource_type == ResourceType.CLUSTER else f"{resource_type.name.lower()} {name!r}"
            raise DENIED[resource_type](f"{self.principal} may not {operation.name} on {what}")


DENIED = {ResourceType.TOPIC: errors.TopicAuthorizationFailed, ResourceType.GROUP: errors.GroupAuthorizationFailed,
          ResourceType.CLUSTER: errors.ClusterAuthorizationFailed,
          ResourceType.TRANSACTIONAL_ID: errors.TransactionalIdAuthorizationFailed}


def handles(api_key: ApiKey, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    # kio's schema modules load on first use: importing all ~400 of them costs 2 s per broker start.
    # tests/test_api_schemas.py checks that kio has every version declared here.
    def register(handler: Handler) -> Handler:
        HANDLERS[api_key] = handler
        SUPPORTED[api_key] = (min_version, max_version)
        return handler

    return register


def load_handlers() -> dict[int, tuple[int, int]]:
    """Import every handler module of this package; returns the supported-versions table."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return SUPPORTED
