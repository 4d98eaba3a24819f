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
    from ..cluster.topics import TopicDirectory
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..coordinator.group_coordinator import GroupCoordinator
    from ..coordinator.share_coordinator import ShareCoordinator
    from ..coordinator.transaction_coordinator import TransactionCoordinator
    from ..coordinator.transaction_markers import MarkerWriter
    from ..coordinator.txn_verification import TxnVerifier
    from ..features import FileFeatures, ZooKeeperFeatures
    from ..group_configs import FileGroupConfigs, ZooKeeperGroupConfigs
    from ..metrics import BrokerMetrics
    from ..protocol.fetch_session import FetchSessionCache
    from ..replication.manager import ReplicaManager
    from ..security.authorizer import Authorizer
    from ..security.credentials import FileCredentials, ZooKeeperCredentials
    from ..topic_admin import TopicAdmin

Handler = Callable[["RequestContext", Any], Awaitable[dict | None]]
HANDLERS: dict[int, Handler] = {}
SUPPORTED: dict[int, tuple[int, int]] = {}


@dataclass(frozen=True, slots=True)
class Services:
    """What request handlers may use, and all they may use: built once by the broker, shared by
    every request. Handlers reach them through `RequestContext` (`ctx.replicas`, `ctx.groups`, ...)."""

    broker_id: int
    config: BrokerConfig
    replicas: ReplicaManager               # hosted partitions: produce, fetch, offsets, log dirs
    metadata: TopicDirectory               # topics by name and id, the cluster id
    cluster: ClusterView                   # live brokers, controller, partition leaders, coordinators
    topic_admin: TopicAdmin                # create / delete topics, add partitions, topic configs
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    txn_markers: MarkerWriter
    txn_verifier: TxnVerifier              # a transactional write's check with its coordinator (KIP-890)
    fetch_sessions: FetchSessionCache
    authorizer: Authorizer | None          # None: every request is allowed
    credentials: FileCredentials | ZooKeeperCredentials  # SCRAM users
    metrics: BrokerMetrics
    group_configs: FileGroupConfigs | ZooKeeperGroupConfigs  # per-group overrides (resource type GROUP)
    shares: ShareCoordinator               # share groups (KIP-932): members, sessions, share-partitions
    features: FileFeatures | ZooKeeperFeatures  # feature levels set by UpdateFeatures


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's sender and the services its handler may use."""

    services: Services
    api_version: int
    client_id: str | None
    client_host: str
    listener: str = "PLAINTEXT"        # the listener the request came in on: Metadata answers with its addresses
    principal: str = "User:ANONYMOUS"  # who sent it: the SASL user, else Kafka's anonymous principal

    # -- the services, read-only ---------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.services.broker_id

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def replicas(self) -> ReplicaManager:
        return self.services.replicas

    @property
    def metadata(self) -> TopicDirectory:
        return self.services.metadata

    @property
    def cluster(self) -> ClusterView:
        return self.services.cluster

    @property
    def topic_admin(self) -> TopicAdmin:
        return self.services.topic_admin

    @property
    def groups(self) -> GroupCoordinator:
        return self.services.groups

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.services.transactions

    @property
    def txn_markers(self) -> MarkerWriter:
        return self.services.txn_markers

    @property
    def txn_verifier(self) -> TxnVerifier:
        return self.services.txn_verifier

    @property
    def fetch_sessions(self) -> FetchSessionCache:
        return self.services.fetch_sessions

    @property
    def authorizer(self) -> Authorizer | None:
        return self.services.authorizer

    @property
    def credentials(self) -> FileCredentials | ZooKeeperCredentials:
        return self.services.credentials

    @property
    def metrics(self) -> BrokerMetrics:
        return self.services.metrics

    @property
    def group_configs(self) -> FileGroupConfigs | ZooKeeperGroupConfigs:
        return self.services.group_configs

    @property
    def shares(self) -> ShareCoordinator:
        return self.services.shares

    @property
    def features(self) -> FileFeatures | ZooKeeperFeatures:
        return self.services.features

    # -- authorization -------------------------------------------------------------------------

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May the sender do `operation` on the resource (the cluster when no name is given)?"""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize(self.principal, self.client_host, operation,
                                                          resource_type, name)

    def allowed_on_some(self, operation: Operation, resource_type: ResourceType) -> bool:
        """May the sender do `operation` on at least one resource of the type?"""
        authorizer = self.services.authorizer
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
