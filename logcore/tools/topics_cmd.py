"""`binlake topics`: create, list, describe, alter and delete topics, like kafka-topics.sh.

It talks to the broker only over the wire, through confluent-kafka's AdminClient, so it works the
same against Apache Kafka. A refusal prints the broker's own message and exits non-zero.
"""

from __future__ import annotations

from concurrent.futures import Future

import click
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic)

TIMEOUT_S = 30.0

bootstrap_option = click.option("--bootstrap-server", required=True, metavar="HOST:PORT",
                                help="a broker to connect to")


def _pairs(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


config_option = click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", callback=_pairs,
                             help="a topic config override (repeatable), e.g. retention.ms=86400000")


def _admin(bootstrap_server: str) -> AdminClient:
    # log_level 4: librdkafka's warnings and errors (e.g. connection refused) but not its chatter.
    return AdminClient({"bootstrap.servers": bootstrap_server, "client.id": "binlake-topics", "log_level": 4})


def _result(future: Future, doing: str, tolerate: int | None = None):
    """The future's result; a broker refusal becomes a ClickException carrying the broker's message.
    An error whose code is `tolerate` (e.g. TOPIC_ALREADY_EXISTS for --if-not-exists) yields False."""
    try:
        return future.result()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if tolerate is not None and error.code() == tolerate:
            return False
        raise click.ClickException(f"{doing}: {error.str()} ({error.name()})") from None


@click.group("topics")
def topics_command() -> None:
    """Create, list, describe, alter and delete topics."""


@topics_command.command("create")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
@click.option("--replication-factor", type=int, default=-1, help="default: the broker's default.replication.factor")
@config_option
@click.option("--if-not-exists", is_flag=True, help="succeed quietly when the topic already exists")
def create(bootstrap_server: str, topic: str, partitions: int, replication_factor: int, configs: dict[str, str],
           if_not_exists: bool) -> None:
    """Create a topic."""
    admin = _admin(bootstrap_server)  # kept referenced: futures fail once the client is collected
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=configs)
    futures = admin.create_topics([new], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    tolerate = KafkaError.TOPIC_ALREADY_EXISTS if if_not_exists else None
    if _result(futures[topic], f"cannot create topic {topic}", tolerate) is not False:
        click.echo(f"Created topic {topic}.")


@topics_command.command("list")
@bootstrap_option
def list_(bootstrap_server: str) -> None:
    """List topic names."""
    try:
        metadata = _admin(bootstrap_server).list_topics(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise click.ClickException(f"cannot list topics: {exc.args[0].str()}") from None
    for name in sorted(metadata.topics):
        click.echo(name)


@topics_command.command("describe")
@bootstrap_option
@click.option("--topic", "topics", multiple=True, help="a topic to describe (repeatable; default: all)")
def describe(bootstrap_server: str, topics: tuple[str, ...]) -> None:
    """Partitions, leaders, replicas, ISR and non-default configs of topics."""
    admin = _admin(bootstrap_server)
    if not topics:
        try:
            topics = tuple(sorted(admin.list_topics(timeout=TIMEOUT_S).topics))
        except KafkaException as exc:
            raise click.ClickException(f"cannot list topics: {exc.args[0].str()}") from None
        if not topics:
            return
    descriptions = admin.describe_topics(TopicCollection(list(topics)), request_timeout=TIMEOUT_S)
    resources = {name: ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics}
    configs = admin.describe_configs(list(resources.values()), request_timeout=TIMEOUT_S)
    for name in topics:
        topic = _result(descriptions[name], f"cannot describe topic {name}")
        entries = _result(configs[resources[name]], f"cannot describe the configs of topic {name}")
        overrides = ",".join(f"{key}={entry.value}" for key, entry in sorted(entries.items())
                             if entry.source != ConfigSource.DEFAULT_CONFIG.value)
        replication = len(topic.partitions[0].replicas) if topic.partitions else 0
        click.echo(f"Topic: {name}\tTopicId: {topic.topic_id}\tPartitionCount: {len(topic.partitions)}\t"
                   f"ReplicationFactor: {replication}\tConfigs: {overrides}")
        for p in topic.partitions:
            leader = p.leader.id if p.leader is not None else "none"
            click.echo(f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader}\t"
                       f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")


def _ids(nodes) -> str:
    return ",".join(str(node.id) for node in nodes)


@topics_command.command("alter")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partitions", type=int, help="the new, larger partition count")
@config_option
@click.option("--delete-config", "deleted", multiple=True, metavar="KEY",
              help="remove a topic override (repeatable): the broker default applies again")
def alter(bootstrap_server: str, topic: str, partitions: int | None, configs: dict[str, str],
          deleted: tuple[str, ...]) -> None:
    """Add partitions to a topic and set or delete its config overrides."""
    if partitions is None and not configs and not deleted:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    admin = _admin(bootstrap_server)
    ops = ([ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key, value in configs.items()]
           + [ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE) for key in deleted])
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=ops)
    # Validate every change first, so a refused one leaves the topic untouched.
    for validate_only in (True, False):
        if partitions is not None:
            futures = admin.create_partitions([NewPartitions(topic, partitions)], validate_only=validate_only,
                                              operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
            _result(futures[topic], f"cannot add partitions to topic {topic}")
        if ops:
            futures = admin.incremental_alter_configs([resource], validate_only=validate_only,
                                                      request_timeout=TIMEOUT_S)
            _result(futures[resource], f"cannot alter the configs of topic {topic}")
    if partitions is not None:
        click.echo(f"Topic {topic} now has {partitions} partitions.")
    if ops:
        click.echo(f"Updated the configs of topic {topic}.")


@topics_command.command("delete")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--if-exists", is_flag=True, help="succeed quietly when the topic does not exist")
def delete(bootstrap_server: str, topic: str, if_exists: bool) -> None:
    """Delete a topic and all its data."""
    admin = _admin(bootstrap_server)
    tolerate = KafkaError.UNKNOWN_TOPIC_OR_PART if if_exists else None
    found = _result(admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic],
                    f"cannot delete topic {topic}", tolerate)
    if found is False:
        return
    if found.is_internal:
        raise click.ClickException(f"topic {topic} is an internal topic; deleting it would lose broker state")
    futures = admin.delete_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    if _result(futures[topic], f"cannot delete topic {topic}", tolerate) is not False:
        click.echo(f"Deleted topic {topic}.")
