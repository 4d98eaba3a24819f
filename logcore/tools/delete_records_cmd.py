"""`binlake delete-records`: kafka-delete-records.sh. Moves each listed partition's log start
offset (DeleteRecords), as an `--offset-json-file` in Kafka's format says:

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 1200}], "version": 1}

An offset of -1 means the high watermark (everything written so far)."""

from __future__ import annotations

import json

import click
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

TIMEOUT_S = 30


def read_plan(path: str) -> list[TopicPartition]:
    try:
        with open(path) as f:
            plan = json.load(f)
        partitions = [TopicPartition(p["topic"], int(p["partition"]), int(p["offset"])) for p in plan["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"{path}: expected {{\"partitions\": [{{\"topic\": T, \"partition\": P, "
                                   f"\"offset\": O}}, ...], \"version\": 1}} ({exc})") from None
    seen = set()
    for tp in partitions:
        if (tp.topic, tp.partition) in seen:
            raise click.ClickException(f"{path}: {tp.topic}-{tp.partition} is listed twice")
        seen.add((tp.topic, tp.partition))
    return partitions


@click.command("delete-records")
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="brokers to connect to")
@click.option("--offset-json-file", required=True, type=click.Path(exists=True, dir_okay=False),
              help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}; -1: the high watermark')
def delete_records_command(bootstrap_server: str, offset_json_file: str) -> None:
    """Delete the records before an offset in each listed partition (move its log start offset)."""
    partitions = read_plan(offset_json_file)
    admin = AdminClient({"bootstrap.servers": bootstrap_server})
    click.echo("Executing records delete operation")
    futures = admin.delete_records(partitions, request_timeout=TIMEOUT_S)
    click.echo("Records delete operation completed:")
    failed = False
    for tp, future in futures.items():
        try:
            result = future.result(TIMEOUT_S)
            click.echo(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {result.low_watermark}")
        except KafkaException as exc:
            failed = True
            click.echo(f"partition: {tp.topic}-{tp.partition}\terror: {exc.args[0].str()}")
    if failed:
        raise SystemExit(1)
