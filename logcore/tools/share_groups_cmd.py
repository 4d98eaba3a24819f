"""`binlake share-groups`: list, describe, reset the offsets of and delete share groups (KIP-932),
as kafka-share-groups.sh does, with its options (--list, --describe, --reset-offsets, --delete,
--delete-offsets).

No Python client library has the share-group admin APIs yet, so this speaks them over the wire
(wire_admin.py): ListGroups to every broker, the rest to the group's coordinator. It works the same
against Apache Kafka 4.1+. A refusal prints the broker's own message and exits non-zero.
"""

from __future__ import annotations

import click

from ..protocol.codec import ApiKey
from .wire_admin import WireAdmin, bootstrap_option, check, command_config_option

GROUP_KEY = 0  # FindCoordinator's key type of a group
EARLIEST, LATEST = -2, -1  # ListOffsets' timestamps


class _Cluster(WireAdmin):
    def __init__(self, bootstrap: str, security) -> None:
        super().__init__(bootstrap, client_id="binlake-share-groups", security=security)

    def coordinator_of(self, group: str) -> tuple[str, int]:
        found = self.call(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": GROUP_KEY})
        check(found.error_code, f"finding the coordinator of share group {group!r}", found.error_message)
        return found.host, found.port

    def share_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, from each live broker."""
        brokers, _ = self.brokers()
        found = []
        for address in brokers.values():
            answer = self.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]}, address)
            check(answer.error_code, "listing groups")
            found += [(g.group_id, g.group_state) for g in answer.groups]
        return sorted(found)

    def end_offsets(self, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
        """The offset at `timestamp` (EARLIEST, LATEST) of each partition, from its leader."""
        brokers, leaders = self.brokers(topic)
        out = {}
        for p in partitions:
            answer = self.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamp}]}]},
                brokers.get(leaders.get(p, -1)))
            found = answer.topics[0].partitions[0]
            check(found.error_code, f"listing the offsets of {topic}-{p}")
            out[p] = found.offset
        return out


def _echo_table(headers: list[str], rows: list[list]) -> None:
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


@click.command("share-groups")
@bootstrap_option
@command_config_option
@click.option("--list", "list_", is_flag=True, help="list the share groups")
@click.option("--describe", is_flag=True, help="the group's start offsets and lag per partition, and its members")
@click.option("--reset-offsets", is_flag=True, help="move the group's start offsets (the group must have no members)")
@click.option("--delete", is_flag=True, help="delete the group (it must have no members)")
@click.option("--delete-offsets", is_flag=True, help="forget the group's offsets on --topic (no members)")
@click.option("--group", help="the share group")
@click.option("--topic", help="for --reset-offsets and --delete-offsets: topic or topic:0,2 (partitions)")
@click.option("--to-earliest", is_flag=True, help="reset to each partition's log start")
@click.option("--to-latest", is_flag=True, help="reset to each partition's end")
@click.option("--to-offset", type=int, help="reset to this offset")
@click.option("--execute", is_flag=True, help="apply the reset (without it, only show the plan)")
def share_groups_command(bootstrap_server: str, security, list_: bool, describe: bool, reset_offsets: bool,
                         delete: bool, delete_offsets: bool, group: str | None, topic: str | None,
                         to_earliest: bool, to_latest: bool, to_offset: int | None, execute: bool) -> None:
    """List, describe, reset the offsets of and delete share groups (kafka-share-groups)."""
    actions = [name for name, on in (("--list", list_), ("--describe", describe), ("--reset-offsets", reset_offsets),
                                     ("--delete", delete), ("--delete-offsets", delete_offsets)) if on]
    if len(actions) != 1:
        raise click.UsageError("give exactly one of --list, --describe, --reset-offsets, --delete, --delete-offsets")
    if not list_ and not group:
        raise click.UsageError(f"{actions[0]} needs --group")
    cluster = _Cluster(bootstrap_server, security)
    try:
        if list_:
            for group_id, _state in cluster.share_groups():
                click.echo(group_id)
        elif describe:
            _describe(cluster, group)
        elif reset_offsets:
            _reset(cluster, group, topic, to_earliest, to_latest, to_offset, execute)
        elif delete:
            answer = cluster.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}, cluster.coordinator_of(group))
            check(answer.results[0].error_code, f"deleting share group {group!r}")
            click.echo(f"Deleted share group {group}.")
        else:
            _delete_offsets(cluster, group, topic)
    finally:
        cluster.close()


def _describe(cluster: _Cluster, group: str) -> None:
    coordinator = cluster.coordinator_of(group)
    described = cluster.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False},
                             coordinator).groups[0]
    check(described.error_code, f"describing share group {group!r}", described.error_message)
    offsets = cluster.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{"group_id": group, "topics": None}]},
                           coordinator).groups[0]
    check(offsets.error_code, f"describing the offsets of share group {group!r}", offsets.error_message)
    click.echo(f"Share group {group} is {described.group_state} with {len(described.members)} member(s), "
               f"group epoch {described.group_epoch}.")
    rows = [[group, t.topic_name, p.partition_index, None if p.start_offset < 0 else p.start_offset,
             None if p.lag < 0 else p.lag] for t in offsets.topics for p in t.partitions]
    if rows:
        click.echo()
        _echo_table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], rows)
    if described.members:
        click.echo()
        _echo_table(["CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "ASSIGNMENT"], [
            [m.member_id, m.client_host, m.client_id, m.member_epoch,
             ",".join(f"{tp.topic_name}:{','.join(map(str, tp.partitions))}" for tp in m.assignment.topic_partitions)
             or None] for m in described.members])


def _topic_partitions(cluster: _Cluster, spec: str | None) -> tuple[str, list[int]]:
    if not spec:
        raise click.UsageError("--topic is needed")
    topic, sep, parts = spec.partition(":")
    if sep:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    _, leaders = cluster.brokers(topic)
    return topic, sorted(leaders)


def _reset(cluster: _Cluster, group: str, topic_spec: str | None, to_earliest: bool, to_latest: bool,
           to_offset: int | None, execute: bool) -> None:
    if sum((to_earliest, to_latest, to_offset is not None)) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset")
    topic, partitions = _topic_partitions(cluster, topic_spec)
    if to_offset is not None:
        targets = {p: to_offset for p in partitions}
    else:
        targets = cluster.end_offsets(topic, partitions, EARLIEST if to_earliest else LATEST)
    if execute:
        answer = cluster.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": p, "start_offset": o} for p, o in targets.items()]}]},
            cluster.coordinator_of(group))
        check(answer.error_code, f"resetting the offsets of share group {group!r}", answer.error_message)
        for t in answer.responses:
            for p in t.partitions:
                check(p.error_code, f"resetting {t.topic_name}-{p.partition_index}", p.error_message)
    _echo_table(["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"], [[group, topic, p, o] for p, o in targets.items()])
    if not execute:
        click.echo("(a plan only: add --execute to apply it)")


def _delete_offsets(cluster: _Cluster, group: str, topic_spec: str | None) -> None:
    topic, sep, _ = (topic_spec or "").partition(":")
    if not topic or sep:
        raise click.UsageError("--delete-offsets needs --topic TOPIC (a whole topic)")
    answer = cluster.call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": topic}]},
                          cluster.coordinator_of(group))
    check(answer.error_code, f"deleting the offsets of share group {group!r}", answer.error_message)
    for t in answer.responses:
        check(t.error_code, f"deleting the offsets of {t.topic_name}", t.error_message)
    click.echo(f"Share group {group} forgot its offsets on {topic}.")

