"""`binlake log-dirs --describe`: what each broker keeps on disk, per partition, like kafka-log-dirs.sh,
in its JSON (DescribeLogDirs to every broker asked for).

`--data-dir DIR` reads one broker's directory instead (running or not, never writing) and adds what
the protocol does not carry: for each partition the log cleaner has worked on, where its next clean
starts (`firstDirtyOffset`) and the dirty share of its bytes below the active segment (`dirtyRatio`,
which the cleaner compares with min.cleanable.dirty.ratio)."""

from __future__ import annotations

import json
import os

import click

from ..protocol.codec import ApiKey, ErrorCode
from ..storage.checkpoint import read_checkpoint
from ..storage.log_cleaner import CHECKPOINT as CLEANER_CHECKPOINT
from .wire_admin import WireAdmin, command_config_option

DESCRIBE_LOG_DIRS_VERSION = 1


def _ids(_ctx, _param, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected broker ids separated by commas, got {value!r}") from None


@click.command("log-dirs")
@click.option("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]",
              help="brokers to connect to (the first that answers); or give --data-dir")
@command_config_option
@click.option("--describe", is_flag=True, required=True, help="describe the log directories (the only action)")
@click.option("--broker-list", callback=_ids, metavar="ID,ID", help="the brokers to ask (default: every live one)")
@click.option("--topic-list", metavar="TOPIC,TOPIC", help="only these topics (default: all)")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False),
              help="read this broker data directory instead of asking brokers; adds the log cleaner's state")
def log_dirs_command(bootstrap_server: str | None, security, describe: bool, broker_list: list[int] | None,
                     topic_list: str | None, data_dir: str | None) -> None:
    """Describe the log directories of brokers: each partition's size and lag."""
    topics = None if topic_list is None else {t.strip() for t in topic_list.split(",") if t.strip()}
    if data_dir is not None:
        click.echo(json.dumps({"version": 1, "logDirs": [_data_dir(data_dir, topics)]}))
        return
    if bootstrap_server is None:
        raise click.UsageError("give --bootstrap-server (ask the brokers) or --data-dir (read one broker's directory)")
    admin = WireAdmin(bootstrap_server, client_id="binlake-log-dirs", security=security)
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


def _data_dir(data_dir: str, topics: set[str] | None) -> dict:
    first_dirty = read_checkpoint(os.path.join(data_dir, CLEANER_CHECKPOINT))
    partitions = []
    for name in sorted(os.listdir(data_dir)):
        topic, _, index = name.rpartition("-")
        path = os.path.join(data_dir, name)
        if not (os.path.isdir(path) and index.isdigit() and topic) or (topics is not None and topic not in topics):
            continue
        sizes = {int(n[:-4]): os.path.getsize(os.path.join(path, n))
                 for n in os.listdir(path) if n.endswith(".log") and n[:-4].isdigit()}
        entry = {"partition": name, "size": sum(sizes.values()), "segments": len(sizes)}
        if (topic, int(index)) in first_dirty:
            dirty_from = first_dirty[(topic, int(index))]
            bases = sorted(sizes)
            inactive = list(zip(bases, bases[1:]))  # (base, next base): the active segment is never cleaned
            dirty = sum(sizes[base] for base, following in inactive if following > dirty_from)
            total = sum(sizes[base] for base, _ in inactive)
            entry["cleaner"] = {"firstDirtyOffset": dirty_from, "dirtyRatio": round(dirty / total, 4) if total else 0.0}
        partitions.append(entry)
    return {"logDir": os.path.abspath(data_dir), "error": None, "partitions": partitions}
