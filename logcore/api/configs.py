"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, groups and this broker;
ListConfigResources.

Topic changes persist in the metadata store and reach the partition logs at once; group configs
persist in the mode's group config store (logcore/group_configs.py) and the group coordinator reads
them at each heartbeat. Broker settings are static (the `--config` file): they can be described,
not altered.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from ..cluster.topics import validate_topic_name
from ..config import BROKER_CONFIGS, TOPIC_CONFIGS, AlterOp, ConfigEntry, TopicConfig, format_value
from ..group_configs import GROUP_CONFIGS, GroupConfig, validate_group_id
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, InvalidRequest
from ..security.acls import CLUSTER_NAME, Operation, ResourceType
from . import handles
from .topics import error_fields

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32  # Kafka's ConfigResource types
KNOWN_RESOURCE_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
# Whose configs a resource holds, for ACLs: a topic's or a group's own, the cluster's for the brokers'.
ACL_RESOURCES = {TOPIC: ResourceType.TOPIC, GROUP: ResourceType.GROUP, BROKER: ResourceType.CLUSTER,
                 BROKER_LOGGER: ResourceType.CLUSTER}
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
                "password": 9}


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx, request) -> dict:
    synonyms = request.include_synonyms
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                  "error_code": ErrorCode.none, "error_message": None, "configs": []}
        try:
            _require(ctx, Operation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
            entries = _describe(ctx, resource.resource_type, resource.resource_name,
                                resource.configuration_keys)
            result["configs"] = [_entry(e, synonyms, documentation) for e in entries]
        except BrokerError as exc:
            result.update(error_fields(exc))
        results.append(result)
    return {"results": results}


def _describe(ctx, resource_type: int, name: str, keys) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        validate_topic_name(name)
        describe, known = ctx.topic_admin.topic_config(ctx.metadata.get(name)).describe, TOPIC_CONFIGS
    elif resource_type == GROUP:
        describe, known = _group_config(ctx, name).describe, GROUP_CONFIGS
    elif resource_type == BROKER:
        if not _is_this_broker(ctx, name):
            return []  # the cluster-wide dynamic defaults: there are none
        describe, known = ctx.config.describe, BROKER_CONFIGS
    else:
        raise InvalidRequest(f"resource type {resource_type} is not supported; use topic (2), broker (4) or group (32)")
    wanted = sorted(known) if keys is None else dict.fromkeys(keys)
    return [describe(key) for key in wanted if key in known]


def _group_config(ctx, group: str) -> GroupConfig:
    validate_group_id(group)
    return GroupConfig(ctx.config, ctx.group_configs.get(group))


def _is_this_broker(ctx, name: str) -> bool:
    """True for this broker's id, False for "" (the cluster-wide default); any other name is wrong."""
    if name == "":
        return False
    if not name.isdigit():
        raise InvalidRequest(f"a broker resource is named by a broker id, got {name!r}")
    if int(name) != ctx.broker_id:
        raise InvalidRequest(f"this is broker {ctx.broker_id}; send the request for broker {name} to that broker")
    return True


def _entry(entry: ConfigEntry, include_synonyms: bool, include_documentation: bool) -> dict:
    definition = entry.definition
    sensitive = definition.type == "password"  # (as Kafka: never shown, only whether it is set)
    return {
        "name": definition.name,
        "value": None if sensitive else format_value(entry.value),
        "read_only": entry.read_only,
        "config_source": entry.source,
        "is_sensitive": sensitive,
        "synonyms": [{"name": name, "value": None if sensitive else format_value(value), "source": source}
                     for name, value, source in entry.synonyms] if include_synonyms else [],
        "config_type": CONFIG_TYPES[definition.type],
        "documentation": definition.doc if include_documentation else None,
    }


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx, request) -> dict:
    """Replaces a topic's whole override set; a null value (or a missing key) means the default."""
    return {"responses": _alter(ctx, request, lambda _config, configs: {
        c.name: c.value for c in configs if c.value is not None})}


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx, request) -> dict:
    return {"responses": _alter(ctx, request, lambda config, configs: config.altered(
        [(c.name, _operation(c.config_operation), c.value) for c in configs]))}


def _operation(code: int) -> AlterOp:
    try:
        return AlterOp(code)
    except ValueError:
        raise InvalidRequest(f"unknown config operation {code}; use SET (0), DELETE (1), APPEND (2) "
                             f"or SUBTRACT (3)") from None


def _require(ctx, operation: Operation, resource_type: int, name: str) -> None:
    if (acl_type := ACL_RESOURCES.get(resource_type)) is not None:
        ctx.require(operation, acl_type, CLUSTER_NAME if acl_type == ResourceType.CLUSTER else name)


def _alter(ctx, request, new_overrides: Callable[[TopicConfig | GroupConfig, tuple], dict[str, str]]) -> list[dict]:
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                  "error_code": ErrorCode.none, "error_message": None}
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise InvalidRequest(f"resource {resource.resource_name!r} appears more than once in the request")
            repeated = sorted(k for k, n in Counter(c.name for c in resource.configs).items() if n > 1)
            if repeated:
                raise InvalidRequest(f"config(s) {', '.join(repeated)} appear more than once for one resource")
            _require(ctx, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
            if resource.resource_type == BROKER:
                _is_this_broker(ctx, resource.resource_name)
                raise InvalidRequest("broker configs cannot be changed at runtime (no dynamic broker configs): "
                                     "set them in the broker's --config file or --override and restart it")
            if resource.resource_type == GROUP:
                overrides = new_overrides(_group_config(ctx, resource.resource_name), resource.configs)
                GroupConfig(ctx.config, overrides)  # validates (AlterConfigs' whole set too)
                if not request.validate_only:
                    ctx.group_configs.put(resource.resource_name, overrides)
            elif resource.resource_type == TOPIC:
                validate_topic_name(resource.resource_name)
                config = ctx.topic_admin.topic_config(ctx.metadata.get(resource.resource_name))
                ctx.topic_admin.set_configs(resource.resource_name, new_overrides(config, resource.configs),
                                            validate_only=request.validate_only)
            else:
                raise InvalidRequest(f"resource type {resource.resource_type} is not supported; use topic (2) "
                                     f"or group (32)")
        except BrokerError as exc:
            result.update(error_fields(exc))
        results.append(result)
    return results


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_config_resources(ctx, request) -> dict:
    """KIP-1142 (v1; v0 was ListClientMetricsResources): the resources of the asked types (all when
    none are asked) that configs can be described for. binlake has topic and broker configs; it has
    no client metrics subscriptions or broker loggers, so those types list nothing; groups are those
    with configs set and those the coordinator holds."""
    ctx.require(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
    wanted = set(getattr(request, "resource_types", ()) or KNOWN_RESOURCE_TYPES) if ctx.api_version else {CLIENT_METRICS}
    unknown = wanted - set(KNOWN_RESOURCE_TYPES)
    if unknown:
        raise InvalidRequest(f"unknown config resource type(s) {sorted(unknown)}; Kafka's are "
                             f"{sorted(KNOWN_RESOURCE_TYPES)}")
    resources = []
    if TOPIC in wanted:
        resources += [{"resource_name": name, "resource_type": TOPIC} for name in sorted(ctx.metadata.topics)]
    if BROKER in wanted:
        resources += [{"resource_name": str(node.node_id), "resource_type": BROKER}
                      for node in ctx.cluster.live_nodes()]
    if GROUP in wanted:
        names = set(ctx.group_configs.names()) | {g.group_id for g in ctx.groups.listed()}
        resources += [{"resource_name": name, "resource_type": GROUP} for name in sorted(names)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": resources}
