"""`binlake groups`: list, describe, reset offsets of and delete consumer groups, like
kafka-consumer-groups.sh.

It talks to the broker only over the wire, through confluent-kafka's AdminClient, so it works the
same against Apache Kafka. A refusal prints the broker's own message and exits non-zero.
"""

from __future__ import annotations

import datetime
from concurrent.futures import Future

import click
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .group_lag import assigned, records_behind, stable_ends

TIMEOUT_S = 30.0
INACTIVE = {"EMPTY", "DEAD"}

bootstrap_option = click.option("--bootstrap-server", required=True, metavar="HOST:PORT",
                                help="a broker to connect to")


def _admin(bootstrap_server: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_server, "client.id": "binlake-groups"})


def result_of(future: Future, doing: str):
    try:
        return future.result()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        raise click.ClickException(f"{doing}: {error.str()} ({error.name()})") from None


def _echo_table(headers: list[str], rows: list[list]) -> None:
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def group_state(description) -> str:
    return description.state.name  # ConsumerGroupState: STABLE, EMPTY, PREPARING_REBALANCING, ...


def describe_group(admin: AdminClient, group: str):
    return result_of(admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group],
                   f"cannot describe group {group}")


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    found = result_of(admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group],
                    f"cannot fetch the offsets of group {group}")
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def _list_offsets(admin: AdminClient, partitions, spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=TIMEOUT_S)
    return {(tp.topic, tp.partition): result_of(f, f"cannot list offsets of {tp.topic}-{tp.partition}").offset
            for tp, f in futures.items()}


@click.group("groups")
def groups_command() -> None:
    """List, describe, reset offsets of and delete consumer groups."""


@groups_command.command("list")
@bootstrap_option
@click.option("--state", "show_state", is_flag=True, help="also show each group's state")
@click.option("--type", "show_type", is_flag=True, help="also show each group's protocol: CLASSIC or CONSUMER (KIP-848)")
def list_(bootstrap_server: str, show_state: bool, show_type: bool) -> None:
    """List consumer groups."""
    admin = _admin(bootstrap_server)  # kept referenced: futures fail once the client is collected
    listed = result_of(admin.list_consumer_groups(request_timeout=TIMEOUT_S), "cannot list groups")
    groups = sorted(listed.valid, key=lambda g: g.group_id)
    if show_state or show_type:
        columns = [("TYPE", lambda g: g.type.name)] * show_type + [("STATE", lambda g: g.state.name)] * show_state
        _echo_table(["GROUP", *(name for name, _ in columns)],
                    [[g.group_id, *(value(g) for _, value in columns)] for g in groups])
    else:
        for g in groups:
            click.echo(g.group_id)


@groups_command.command("describe")
@bootstrap_option
@click.option("--group", "group_ids", required=True, multiple=True, help="group to describe (repeatable)")
def describe(bootstrap_server: str, group_ids: tuple[str, ...]) -> None:
    """Members, assignments, and per partition the committed offset, log-end offset and lag (the
    records a read_committed consumer would still receive: transaction markers do not count)."""
    admin = _admin(bootstrap_server)
    for n, group in enumerate(group_ids):
        description = describe_group(admin, group)
        committed = committed_offsets(admin, group)
        owner = {tp: m for m in description.members for tp in assigned(m)}
        partitions = sorted(set(committed) | set(owner))
        ends = _list_offsets(admin, partitions, OffsetSpec.latest())
        try:
            lags = records_behind({"bootstrap.servers": bootstrap_server}, committed,
                                  stable_ends(admin, sorted(committed), TIMEOUT_S), TIMEOUT_S)
        except KafkaException as exc:
            raise click.ClickException(f"cannot read the lag of group {group}: {exc.args[0].str()}") from None
        if n:
            click.echo()
        click.echo(f"Group {group} is {group_state(description)} with {len(description.members)} member(s)"
                   f"{f', assignor {description.partition_assignor}' if description.partition_assignor else ''}.")
        if partitions:
            click.echo()
            rows = []
            for tp in partitions:
                member = owner.get(tp)
                rows.append([group, tp[0], tp[1], committed.get(tp), ends.get(tp), lags.get(tp),
                             member.member_id if member else None, member.host if member else None,
                             member.client_id if member else None])
            _echo_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                         "HOST", "CLIENT-ID"], rows)
        if description.members:
            click.echo()
            rows = []
            for m in description.members:
                partitions_of = assigned(m)
                rows.append([m.member_id, m.group_instance_id, m.host, m.client_id, len(partitions_of),
                             ",".join(f"{t}-{p}" for t, p in partitions_of) or None])
            _echo_table(["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"], rows)


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,2,5`."""
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P1,P2,..., got {spec!r}", param_hint="--topic") from None


def parse_datetime(value: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"expected an ISO-8601 date-time such as 2024-01-31T12:00:00, got {value!r}",
                                 param_hint="--to-datetime") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as kafka-consumer-groups.sh reads it
    return int(moment.timestamp() * 1000)


@groups_command.command("reset-offsets")
@bootstrap_option
@click.option("--group", required=True)
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]", help="topic (and partitions) to reset")
@click.option("--all-topics", is_flag=True, help="every topic the group has committed offsets for")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-datetime", help="first offset at or after this ISO-8601 time")
@click.option("--shift-by", type=int, help="move each committed offset by N (negative: back)")
@click.option("--dry-run", is_flag=True, help="show the new offsets without changing them (the default)")
@click.option("--execute", is_flag=True, help="commit the new offsets")
def reset_offsets(bootstrap_server: str, group: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool,
                  to_latest: bool, to_offset: int | None, to_datetime: str | None, shift_by: int | None,
                  dry_run: bool, execute: bool) -> None:
    """Reset a group's committed offsets; refused while the group has members."""
    chosen = [name for name, on in [("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime is not None),
                                    ("--shift-by", shift_by is not None)] if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    admin = _admin(bootstrap_server)
    state = group_state(describe_group(admin, group))
    if state not in INACTIVE:
        raise click.ClickException(f"offsets of group {group} can only be reset while it is inactive, but it is "
                                   f"{state}; stop its consumers first")
    committed = committed_offsets(admin, group)
    partitions = sorted(committed) if all_topics else select_partitions(admin, topics)
    new = planned_offsets(admin, partitions, committed, to_latest=to_latest, to_offset=to_offset,
                          to_time_ms=None if to_datetime is None else parse_datetime(to_datetime), shift_by=shift_by)
    _echo_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [[group, t, p, o] for (t, p), o in sorted(new.items())])
    if not execute:
        click.echo("(dry run: nothing changed; add --execute to commit these offsets)")
        return
    commit_offsets(admin, group, new)


def planned_offsets(admin: AdminClient, partitions: list[tuple[str, int]], committed: dict[tuple[str, int], int], *,
                    to_latest: bool = False, to_offset: int | None = None, to_time_ms: int | None = None,
                    shift_by: int | None = None) -> dict[tuple[str, int], int]:
    """The offsets a reset sets (to the earliest unless told otherwise), kept inside what the log holds, as
    Kafka's tools do."""
    earliest = _list_offsets(admin, partitions, OffsetSpec.earliest())
    latest = _list_offsets(admin, partitions, OffsetSpec.latest())
    if to_latest:
        wanted = latest
    elif to_time_ms is not None:
        found = _list_offsets(admin, partitions, OffsetSpec.for_timestamp(to_time_ms))
        wanted = {tp: (offset if offset >= 0 else latest[tp]) for tp, offset in found.items()}
    elif to_offset is not None:
        wanted = {tp: to_offset for tp in partitions}
    elif shift_by is not None:
        wanted = {tp: committed.get(tp, latest[tp]) + shift_by for tp in partitions}
    else:
        wanted = earliest
    return {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}


def commit_offsets(admin: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])]
    done = result_of(admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group],
                   f"cannot reset the offsets of group {group}")
    failed = [tp for tp in done.topic_partitions if tp.error]
    if failed:
        raise click.ClickException("; ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed))


def select_partitions(admin: AdminClient, specs: tuple[str, ...]) -> list[tuple[str, int]]:
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    selected = []
    for spec in specs:
        topic, wanted = _parse_topic(spec)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise click.ClickException(f"topic {topic} does not exist")
        existing = sorted(info.partitions)
        missing = [p for p in wanted or [] if p not in existing]
        if missing:
            raise click.ClickException(f"topic {topic} has no partition(s) {missing}; it has 0-{len(existing) - 1}")
        selected += [(topic, p) for p in (wanted if wanted is not None else existing)]
    return selected


@groups_command.command("delete")
@bootstrap_option
@click.option("--group", "group_ids", required=True, multiple=True, help="group to delete (repeatable)")
def delete(bootstrap_server: str, group_ids: tuple[str, ...]) -> None:
    """Delete groups and their committed offsets; refused while a group has members."""
    admin = _admin(bootstrap_server)
    futures = admin.delete_consumer_groups(list(group_ids), request_timeout=TIMEOUT_S)
    for group in group_ids:
        result_of(futures[group], f"cannot delete group {group}")
        click.echo(f"Deleted group {group}.")
