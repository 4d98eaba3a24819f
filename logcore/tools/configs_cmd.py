"""`binlake configs`: kafka-configs.sh for topics, groups, brokers and users. Describes an entity's configs
(the ones set on it, or `--all`) and alters them with IncrementalAlterConfigs (`--add-config
k=v,...`, `--delete-config k,...`). Broker configs are static in binlake (the `--config` file):
describing them works, altering is refused by the broker with its reason. Users' configs are their
SCRAM credentials (scram_users.py)."""

from __future__ import annotations

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from . import scram_users

TIMEOUT_S = 30
ENTITY_TYPES = {"topics": ("topic", ConfigResource.Type.TOPIC), "brokers": ("broker", ConfigResource.Type.BROKER),
                "groups": ("group", ConfigResource.Type.GROUP)}
SET_HERE = {ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.GROUP_CONFIG}


def _pairs(_ctx, _param, value: str | None) -> dict[str, str]:
    """k=v,k2=v2; a value holding commas goes in brackets, as in kafka-configs: k=[a,b]."""
    pairs: dict[str, str] = {}
    rest = value or ""
    while rest:
        key, eq, rest = rest.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"expected key=value pairs separated by commas, got {value!r}")
        if rest.startswith("["):
            item, _, rest = rest[1:].partition("]")
            rest = rest.removeprefix(",")
        else:
            item, _, rest = rest.partition(",")
        pairs[key.strip()] = item
    return pairs


@click.command("configs")
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="brokers to connect to")
@click.option("--entity-type", required=True, type=click.Choice(sorted([*ENTITY_TYPES, "users"])),
              help="what to configure")
@click.option("--entity-name", help="the topic name, group id, broker id or user (default for --describe: every one)")
@click.option("--describe", is_flag=True, help="print the configs")
@click.option("--all", "all_configs", is_flag=True, help="with --describe: every config, defaults included")
@click.option("--alter", is_flag=True, help="change configs with --add-config / --delete-config")
@click.option("--add-config", callback=_pairs, metavar="K=V,K=[A,B]", help="configs to set")
@click.option("--delete-config", metavar="K,K", help="configs to remove (back to their defaults)")
def configs_command(bootstrap_server: str, entity_type: str, entity_name: str | None, describe: bool,
                    all_configs: bool, alter: bool, add_config: dict[str, str], delete_config: str | None) -> None:
    """Describe or alter the configs of topics, groups and brokers, and users' SCRAM credentials."""
    if describe == alter:
        raise click.UsageError("give exactly one of --describe and --alter")
    if alter and not (entity_name and (add_config or delete_config)):
        raise click.UsageError("--alter needs --entity-name and --add-config and/or --delete-config")
    admin = AdminClient({"bootstrap.servers": bootstrap_server})
    deletes = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    try:
        if entity_type == "users":
            if alter:
                scram_users.alter(admin, entity_name, add_config, deletes, TIMEOUT_S)
            else:
                scram_users.describe(admin, entity_name, TIMEOUT_S)
            return
        label, kind = ENTITY_TYPES[entity_type]
        if alter:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in add_config.items()]
            entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
            resource = ConfigResource(kind, entity_name, incremental_configs=entries)
            admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
            click.echo(f"Completed updating config for {label} {entity_name}.")
            return
        names = [entity_name] if entity_name else _every(admin, entity_type)
        for name in names:
            resource = ConfigResource(kind, name)
            configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
            shown = [c for c in configs.values() if all_configs or ConfigSource(c.source) in SET_HERE]
            click.echo(f"{'All' if all_configs else 'Dynamic'} configs for {label} {name} are:")
            for config in sorted(shown, key=lambda c: c.name):
                value = "null" if config.is_sensitive else config.value
                synonyms = ", ".join(f"{ConfigSource(s.source).name}:{s.name}={s.value}"
                                     for s in config.synonyms.values())
                click.echo(f"  {config.name}={value} sensitive={str(config.is_sensitive).lower()} "
                           f"synonyms={{{synonyms}}}")
    except KafkaException as exc:
        raise click.ClickException(exc.args[0].str()) from None


def _every(admin: AdminClient, entity_type: str) -> list[str]:
    if entity_type == "groups":
        return sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S).valid)
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    if entity_type == "brokers":
        return [str(b) for b in sorted(metadata.brokers)]
    return sorted(t for t in metadata.topics if not t.startswith("__"))
