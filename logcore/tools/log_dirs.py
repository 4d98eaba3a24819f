"""`binlake log-dirs --describe`: what each broker keeps on disk, per partition, like kafka-log-dirs.sh,
in its JSON (DescribeLogDirs to every broker asked for)."""

from __future__ import annotations

import json

import click

from ..protocol.codec import ApiKey, ErrorCode
from .wire_admin import WireAdmin, bootstrap_option

DESCRIBE_LOG_DIRS_VERSION = 1


def _ids(_ctx, _param, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected broker ids separated by commas, got {value!r}") from None


@click.command("log-dirs")
@bootstrap_option
@click.option("--describe", is_flag=True, required=True, help="describe the log directories (the only action)")
@click.option("--broker-list", callback=_ids, metavar="ID,ID", help="the brokers to ask (default: every live one)")
@click.option("--topic-list", metavar="TOPIC,TOPIC", help="only these topics (default: all)")
def log_dirs_command(bootstrap_server: str, describe: bool, broker_list: list[int] | None,
                     topic_list: str | None) -> None:
    """Describe the log directories of brokers: each partition's size and lag."""
    topics = None if topic_list is None else {t.strip() for t in topic_list.split(",") if t.strip()}
    admin = WireAdmin(bootstrap_server, client_id="binlake-log-dirs")
    try:
        addresses = {b.node_id: (b.host, b.port) for b in admin.metadata([]).brokers}
        missing = sorted(set(broker_list or []) - set(addresses))
        if missing:
            raise click.ClickException(f"broker(s) {missing} are not alive; live brokers: {sorted(addresses)}")
        brokers = []
        for broker in broker_list or sorted(addresses):
            answer = admin.call(ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, {"topics": None},
                                addresses[broker])
            brokers.append({"broker": broker, "logDirs": [_log_dir(result, topics) for result in answer.results]})
    finally:
        admin.close()
    click.echo(json.dumps({"version": 1, "brokers": brokers}))


def _log_dir(result, topics: set[str] | None) -> dict:
    error = None if result.error_code == ErrorCode.none else ErrorCode(result.error_code).name.upper()
    return {"logDir": result.log_dir, "error": error, "partitions": [
        {"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size, "offsetLag": p.offset_lag,
         "isFuture": p.is_future_key}
        for topic in result.topics if topics is None or topic.name in topics for p in topic.partitions]}
