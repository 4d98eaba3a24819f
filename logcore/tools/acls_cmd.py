"""`binlake acls`: kafka-acls.sh, with its flags, over CreateAcls, DescribeAcls and DeleteAcls:

    binlake acls --bootstrap-server H:P --command-config admin.properties --add \\
        --allow-principal User:alice --operation Read --operation Describe --topic orders
    binlake acls ... --add --allow-principal User:alice --consumer --topic orders --group shop
    binlake acls ... --add --allow-principal User:bob --producer --topic orders --transactional-id tx-
        --resource-pattern-type prefixed
    binlake acls ... --list [--topic orders] [--principal User:alice]
    binlake acls ... --remove --force --allow-principal User:alice --topic orders
"""

from __future__ import annotations

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient

from ..security.acls import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType, parse, title
from .command_config import librdkafka_settings

TIMEOUT_S = 30
OPERATIONS = [title(op) for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]


def _resources(topics, groups, transactional_ids, cluster: bool) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
            + [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else []))


def _operations(resource_type: ResourceType, operations: list[Operation], producer: bool, consumer: bool,
                idempotent: bool) -> list[Operation]:
    """The operations to grant on one resource: --operation's, or what --producer / --consumer need
    there, as kafka-acls does."""
    if not (producer or consumer):
        return operations or [Operation.ALL]
    needed = {
        ResourceType.TOPIC: ([Operation.WRITE, Operation.DESCRIBE, Operation.CREATE] if producer else [])
        + ([Operation.READ, Operation.DESCRIBE] if consumer else []),
        ResourceType.GROUP: [Operation.READ] if consumer else [],
        ResourceType.TRANSACTIONAL_ID: [Operation.WRITE, Operation.DESCRIBE] if producer else [],
        ResourceType.CLUSTER: [Operation.IDEMPOTENT_WRITE] if producer and idempotent else [],
    }
    return list(dict.fromkeys(needed[resource_type]))


def _binding(resource_type, name, pattern, principal, host, operation, permission) -> AclBinding:
    return AclBinding(int(resource_type), name, int(pattern), principal, host, int(operation), int(permission))


def _show(bindings) -> None:
    by_resource: dict[tuple, list] = {}
    for b in bindings:
        key = (ResourceType(b.restype.value), b.name, PatternType(b.resource_pattern_type.value))
        by_resource.setdefault(key, []).append(b)
    for (resource_type, name, pattern), found in sorted(by_resource.items()):
        click.echo(f"Current ACLs for resource `ResourcePattern(resourceType={resource_type.name}, name={name}, "
                   f"patternType={pattern.name})`: ")
        for b in sorted(found, key=lambda b: (b.principal, b.host, b.operation.value, b.permission_type.value)):
            click.echo(f" \t(principal={b.principal}, host={b.host}, operation={Operation(b.operation.value).name}, "
                       f"permissionType={Permission(b.permission_type.value).name})")
        click.echo("")


def _enum_option(enum_type):
    def convert(_ctx, _param, values):
        try:
            return [parse(enum_type, v) for v in values] if isinstance(values, tuple) else (
                parse(enum_type, values) if values else None)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return convert


@click.command("acls")
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="brokers to connect to")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False),
              help="client properties for a secured broker (security.protocol, sasl.jaas.config, ...)")
@click.option("--add", is_flag=True, help="add the ACLs the other flags describe")
@click.option("--remove", is_flag=True, help="remove the ACLs the other flags select")
@click.option("--list", "list_", is_flag=True, help="list ACLs (of the resources given, else all)")
@click.option("--topic", "topics", multiple=True, help="a topic (* for all)")
@click.option("--group", "groups", multiple=True, help="a consumer group (* for all)")
@click.option("--transactional-id", "transactional_ids", multiple=True, help="a transactional id (* for all)")
@click.option("--cluster", is_flag=True, help="the cluster resource")
@click.option("--resource-pattern-type", callback=_enum_option(PatternType), metavar="literal|prefixed|any|match",
              help="how the resource names are matched (default: literal; --list and --remove also any, match)")
@click.option("--allow-principal", multiple=True, metavar="User:NAME", help="a principal to allow (User:* for all)")
@click.option("--deny-principal", multiple=True, metavar="User:NAME", help="a principal to deny")
@click.option("--allow-host", multiple=True, help="hosts the allowed principals may connect from (default *)")
@click.option("--deny-host", multiple=True, help="hosts the denied principals are denied from (default *)")
@click.option("--operation", "operations", multiple=True, callback=_enum_option(Operation),
              help=f"{', '.join(OPERATIONS)} (default All)")
@click.option("--producer", is_flag=True, help="what a producer needs: Write, Describe, Create on the topics "
                                               "(Write, Describe on --transactional-id; with --idempotent, "
                                               "IdempotentWrite on the cluster)")
@click.option("--consumer", is_flag=True, help="what a consumer needs: Read, Describe on the topics, Read on --group")
@click.option("--idempotent", is_flag=True, help="with --producer: allow idempotent producing")
@click.option("--principal", "principal_filter", help="with --list: only this principal's ACLs")
@click.option("--force", is_flag=True, help="with --remove: do not ask for confirmation")
def acls_command(bootstrap_server, command_config, add, remove, list_, topics, groups, transactional_ids, cluster,
                 resource_pattern_type, allow_principal, deny_principal, allow_host, deny_host, operations, producer,
                 consumer, idempotent, principal_filter, force) -> None:
    """Add, remove or list ACLs, as kafka-acls does."""
    if add + remove + list_ != 1:
        raise click.UsageError("give exactly one of --add, --remove and --list")
    if consumer and add and not groups:
        raise click.UsageError("--consumer needs --group: a consumer reads with a group")
    if (producer or consumer) and operations:
        raise click.UsageError("give --operation or --producer/--consumer, not both")
    resources = _resources(topics, groups, transactional_ids, cluster or (producer and idempotent))
    pattern = resource_pattern_type or PatternType.LITERAL
    if add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError("--add takes --resource-pattern-type literal or prefixed")
    admin = AdminClient({"bootstrap.servers": bootstrap_server, **librdkafka_settings(command_config)})
    try:
        if list_:
            _list(admin, resources, resource_pattern_type or PatternType.ANY, principal_filter)
            return
        if not resources or not (allow_principal or deny_principal):
            raise click.UsageError(f"--{'add' if add else 'remove'} needs a resource (--topic, --group, "
                                   f"--transactional-id, --cluster) and --allow-principal or --deny-principal")
        entries = [(principal, host, permission)
                   for principals, hosts, permission in ((allow_principal, allow_host, Permission.ALLOW),
                                                         (deny_principal, deny_host, Permission.DENY))
                   for principal in principals for host in (hosts or ("*",))]
        bindings = [_binding(resource_type, name, pattern, principal, host, operation, permission)
                    for resource_type, name in resources
                    for operation in _operations(resource_type, operations, producer, consumer, idempotent)
                    for principal, host, permission in entries]
        if add:
            for future in admin.create_acls(bindings).values():
                future.result(TIMEOUT_S)
            click.echo(f"Adding ACLs for {len(bindings)} binding(s):")
            _show(bindings)
        else:
            if not force:
                click.confirm(f"Are you sure you want to remove {len(bindings)} ACL(s)?", abort=True)
            filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                        b.permission_type) for b in bindings]
            removed = [b for future in admin.delete_acls(filters).values() for b in future.result(TIMEOUT_S)]
            click.echo(f"Removed {len(removed)} ACL(s).")
            _show(removed)
    except KafkaException as exc:
        raise click.ClickException(exc.args[0].str()) from None


def _list(admin: AdminClient, resources, pattern: PatternType, principal: str | None) -> None:
    filters = [AclBindingFilter(int(t), name, int(pattern), principal, None, int(Operation.ANY), int(Permission.ANY))
               for t, name in resources] or [AclBindingFilter(int(ResourceType.ANY), None, int(pattern), principal,
                                                              None, int(Operation.ANY), int(Permission.ANY))]
    found = []
    for f in filters:
        found += admin.describe_acls(f).result(TIMEOUT_S)
    _show(found)
