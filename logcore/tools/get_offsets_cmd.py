"""`binlake get-offsets`: kafka-get-offsets.sh. For each matching partition, the offset ListOffsets
answers for `--time`, printed `topic:partition:offset`, asked of each partition's leader."""

from __future__ import annotations

import re

import click

from ..protocol.codec import ApiKey
from .wire_admin import WireAdmin, bootstrap_option, check, command_config_option

LIST_OFFSETS_VERSION = 9  # max timestamp (-3), earliest local (-4), latest tiered (-5)
TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}


def _time(_ctx, _param, value: str) -> int:
    if value in TIMES:
        return TIMES[value]
    if re.fullmatch(r"-?\d+", value) and int(value) >= -5:
        return int(value)
    raise click.BadParameter(f"expected a timestamp in ms, -1 to -5 or one of {', '.join(TIMES)}; got {value!r}")


def _partitions(_ctx, _param, value: str | None) -> set[int] | None:
    if value is None:
        return None
    try:
        return {int(p) for p in value.split(",") if p.strip()}
    except ValueError:
        raise click.BadParameter(f"expected partition numbers separated by commas, got {value!r}") from None


@click.command("get-offsets")
@bootstrap_option
@command_config_option
@click.option("--topic", help="a regular expression for the topics (default: all)")
@click.option("--partitions", callback=_partitions, metavar="P,P", help="only these partitions")
@click.option("--time", "timestamp", default="latest", callback=_time, show_default=True,
              help="a timestamp in ms, or -1 latest, -2 earliest, -3 max-timestamp, -4 earliest-local, -5 latest-tiered")
@click.option("--exclude-internal-topics", is_flag=True, help="leave out __consumer_offsets and __transaction_state")
def get_offsets_command(bootstrap_server: str, security, topic: str | None, partitions: set[int] | None, timestamp: int,
                        exclude_internal_topics: bool) -> None:
    """Print topic:partition:offset for the offset at a time (latest by default)."""
    pattern = re.compile(topic) if topic else None
    admin = WireAdmin(bootstrap_server, client_id="binlake-get-offsets", security=security)
    try:
        meta = admin.metadata(None)
        brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in sorted(meta.topics, key=lambda t: t.name):
            if (pattern and not pattern.fullmatch(t.name)) or (exclude_internal_topics and t.is_internal):
                continue
            for p in t.partitions:
                if partitions is None or p.partition_index in partitions:
                    by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(p.partition_index)
        found: dict[tuple[str, int], int] = {}
        for leader, topics in by_leader.items():
            if leader not in brokers:
                raise click.ClickException(f"partitions {topics} have no leader now; try again")
            answer = admin.call(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": name, "partitions": [{"partition_index": i, "timestamp": timestamp,
                                                          "current_leader_epoch": -1} for i in indexes]}
                           for name, indexes in topics.items()]}, brokers[leader])
            for t in answer.topics:
                for p in t.partitions:
                    check(p.error_code, f"ListOffsets for {t.name}-{p.partition_index}")
                    found[(t.name, p.partition_index)] = p.offset
    finally:
        admin.close()
    for (name, index), offset in sorted(found.items()):
        if offset >= 0:  # Kafka's tool prints nothing for a partition with no such offset
            click.echo(f"{name}:{index}:{offset}")
