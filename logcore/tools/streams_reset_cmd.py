"""`binlake streams-application-reset`: make a stream processing app start over, like
kafka-streams-application-reset.sh.

For a faust app (or a Kafka Streams one: both name things the same way) whose workers are all stopped:
its consumer group (the app's id) gets the offsets of its input topics reset (to the earliest by
default), the offsets of its intermediate topics moved to their end, and its internal topics deleted,
so tables are rebuilt from the input rather than recovered from their changelogs. Internal topics are
the app's `APP-…-changelog` and `APP-…-repartition` topics, and faust's `APP-__assignor-__leader`.
Over the Kafka protocol only, so it works against Apache Kafka too.
"""

from __future__ import annotations

import re
import time

import click
from confluent_kafka.admin import AdminClient

from .groups_cmd import (INACTIVE, TIMEOUT_S, commit_offsets, committed_offsets, describe_group, group_state,
                         parse_datetime, planned_offsets, result_of, select_partitions)

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.I)


def internal_topic(app: str, topic: str) -> bool:
    return topic == f"{app}-__assignor-__leader" or (
        topic.startswith(f"{app}-") and topic.endswith(("-changelog", "-repartition")))


def _topics(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def _duration_ms(value: str) -> int:
    """ISO-8601 `PnDTnHnMnS`, as Java's Duration.parse reads it for Kafka's --by-duration."""
    match = _DURATION.fullmatch(value)
    if match is None or value.upper() in ("P", "PT"):
        raise click.BadParameter(f"expected an ISO-8601 duration such as PT15M or P1DT2H, got {value!r}",
                                 param_hint="--by-duration")
    days, hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


@click.command("streams-application-reset")
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker to connect to")
@click.option("--application-id", required=True, help="the app's id: faust.App's first argument, its group")
@click.option("--input-topics", default="", help="comma-separated topics the app reads: their offsets are reset")
@click.option("--intermediate-topics", default="",
              help="comma-separated topics the app writes and reads back: its offsets move to their end")
@click.option("--internal-topics", default=None,
              help="comma-separated internal topics to delete (default: all the app's; see --help's text)")
@click.option("--to-earliest", is_flag=True, help="input offsets to the earliest (the default)")
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-datetime", help="first offset at or after this ISO-8601 time")
@click.option("--by-duration", help="first offset at or after now minus this ISO-8601 duration (PT15M)")
@click.option("--shift-by", type=int, help="move each committed input offset by N (negative: back)")
@click.option("--dry-run", is_flag=True, help="say what would be done, do nothing")
def streams_reset_command(bootstrap_server: str, application_id: str, input_topics: str, intermediate_topics: str,
                          internal_topics: str | None, to_earliest: bool, to_latest: bool, to_offset: int | None,
                          to_datetime: str | None, by_duration: str | None, shift_by: int | None,
                          dry_run: bool) -> None:
    """Make a stopped faust app start over: reset its input offsets, skip its intermediate topics to their
    end, delete its internal topics (changelogs, repartition topics). Refused while it has live workers."""
    chosen = [name for name, on in [("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime is not None),
                                    ("--by-duration", by_duration is not None), ("--shift-by", shift_by is not None)]
              if on]
    if len(chosen) > 1:
        raise click.UsageError(f"give at most one of {', '.join(chosen)}")
    to_time_ms = parse_datetime(to_datetime) if to_datetime is not None else (
        int(time.time() * 1000) - _duration_ms(by_duration) if by_duration is not None else None)
    admin = AdminClient({"bootstrap.servers": bootstrap_server, "client.id": "binlake-streams-reset"})
    group = application_id
    state = group_state(describe_group(admin, group))
    if state not in INACTIVE:
        raise click.ClickException(f"application {group} is still active (its group is {state}): stop all its "
                                   "workers, and wait for their session to expire, before resetting it")
    committed = committed_offsets(admin, group)
    prefix = "(dry run) " if dry_run else ""

    inputs = select_partitions(admin, tuple(_topics(input_topics)))
    if inputs:
        new = planned_offsets(admin, inputs, committed, to_latest=to_latest, to_offset=to_offset,
                              to_time_ms=to_time_ms, shift_by=shift_by)
        click.echo(f"{prefix}Reset-offsets for input topics {_topics(input_topics)}")
        _offsets(new, commit=not dry_run, admin=admin, group=group)
    intermediate = select_partitions(admin, tuple(_topics(intermediate_topics)))
    if intermediate:
        click.echo(f"{prefix}Seek-to-end for intermediate topics {_topics(intermediate_topics)}")
        _offsets(planned_offsets(admin, intermediate, committed, to_latest=True), commit=not dry_run, admin=admin,
                 group=group)

    existing = admin.list_topics(timeout=TIMEOUT_S).topics
    inferred = sorted(t for t in existing if internal_topic(group, t))
    doomed = inferred if internal_topics is None else _topics(internal_topics)
    foreign = [t for t in doomed if t not in inferred]
    if foreign:
        raise click.ClickException(f"{', '.join(foreign)}: not internal topics of {group} (existing ones: "
                                   f"{', '.join(inferred) or 'none'}); refusing to delete them")
    if doomed:
        click.echo(f"{prefix}Deleting internal topics {doomed}")
        if not dry_run:
            for topic, future in admin.delete_topics(doomed, operation_timeout=TIMEOUT_S).items():
                result_of(future, f"cannot delete topic {topic}")
    click.echo(f"{prefix}Done.")


def _offsets(new: dict[tuple[str, int], int], *, commit: bool, admin: AdminClient, group: str) -> None:
    for (topic, partition), offset in sorted(new.items()):
        click.echo(f"Topic: {topic} Partition: {partition} Offset: {offset}")
    if commit:
        commit_offsets(admin, group, new)
