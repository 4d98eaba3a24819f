"""`binlake replica-verification`: check that every replica of a partition holds the same batches,
like Kafka's kafka-replica-verification.sh.

It reads each replica from its own broker with Fetch's debugging replica id (-2), which a follower
answers too, up to that replica's high watermark, and compares the batches (offsets, length, CRC)
over the range every replica holds: from the latest log start to the lowest high watermark. A
follower learns the high watermark from its next fetch, so on a quiet cluster the range is the
whole committed log. Exit status 1 if any partition differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

from ..protocol.codec import ApiKey, ErrorCode
from ..replication.manager import DEBUGGING_CONSUMER
from ..storage.batch import HEADER_SIZE, read_header
from .wire_admin import WireAdmin, bootstrap_option, command_config_option

FETCH_VERSION = 11  # (the last version with replica_id as a plain field)


@dataclass
class ReplicaLog:
    broker: int
    log_start: int
    high_watermark: int
    batches: dict[int, tuple[int, int, int]]  # base offset -> (last offset, length, crc)


@click.command("replica-verification")
@bootstrap_option
@command_config_option
@click.option("--topics-include", default=".*", show_default=True, metavar="REGEX",
              help="check the topics whose whole name matches")
@click.option("--fetch-size", default=1 << 20, show_default=True, help="bytes asked for per fetch")
def replica_verification_command(bootstrap_server: str, security, topics_include: str, fetch_size: int) -> None:
    """Check that the replicas of each partition are identical up to the high watermark."""
    pattern = re.compile(topics_include)
    admin = WireAdmin(bootstrap_server, client_id="binlake-replica-verification", security=security)
    try:
        meta = admin.metadata()
        addresses = {b.node_id: (b.host, b.port) for b in meta.brokers}
        differ = 0
        for topic in sorted(meta.topics, key=lambda t: t.name):
            if not pattern.fullmatch(topic.name):
                continue
            for p in sorted(topic.partitions, key=lambda p: p.partition_index):
                logs = [_read(admin, addresses, broker, topic.name, p.partition_index, fetch_size)
                        for broker in p.replica_nodes]
                verdict = _compare(logs)
                differ += verdict is not None
                where = f"{topic.name}-{p.partition_index}"
                click.echo(f"{where}: {verdict}" if verdict else
                           f"{where}: replicas {[log.broker for log in logs]} identical in offsets "
                           f"[{max(log.log_start for log in logs)}, {min(log.high_watermark for log in logs)})")
    finally:
        admin.close()
    if differ:
        raise click.ClickException(f"{differ} partition(s) have replicas that differ")


def _read(admin: WireAdmin, addresses: dict, broker: int, topic: str, partition: int, fetch_size: int) -> ReplicaLog:
    if broker not in addresses:
        raise click.ClickException(f"{topic}-{partition}: broker {broker}, a replica, is not alive; verify once it is")
    found = ReplicaLog(broker, 0, 0, {})
    offset = None
    while True:
        answer = admin.call(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": DEBUGGING_CONSUMER, "max_wait": 0, "min_bytes": 0, "max_bytes": fetch_size,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset or 0,
                                                        "log_start_offset": -1, "partition_max_bytes": fetch_size,
                                                        "current_leader_epoch": -1}]}]},
            addresses[broker]).responses[0].partitions[0]
        if answer.error_code == ErrorCode.offset_out_of_range and offset is None:
            offset = answer.log_start_offset  # (retention moved the start: read from there)
            continue
        if answer.error_code != ErrorCode.none:
            raise click.ClickException(f"{topic}-{partition}: broker {broker} answered "
                                       f"{ErrorCode(answer.error_code).name.upper()}")
        if offset is None:
            found.log_start, found.high_watermark, offset = answer.log_start_offset, answer.high_watermark, 0
        data = answer.records or b""
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = read_header(data, position)
            if position + header.size > len(data):
                break
            if header.base_offset < found.high_watermark:
                found.batches[header.base_offset] = (header.last_offset, header.batch_length, header.crc)
            offset, position = header.next_offset, position + header.size
        if position == 0 or offset >= found.high_watermark:
            return found


def _compare(logs: list[ReplicaLog]) -> str | None:
    """None if the replicas agree over the range they all hold; else what differs first."""
    start = max(log.log_start for log in logs)
    end = min(log.high_watermark for log in logs)
    views = [{base: batch for base, batch in log.batches.items() if start <= base and batch[0] < end} for log in logs]
    for base in sorted(set().union(*views)):
        held = {log.broker: view.get(base) for log, view in zip(logs, views)}
        if len(set(held.values())) > 1:
            shown = ", ".join(f"broker {b}: " + (f"batch to {v[0]}, {v[1]} bytes, crc {v[2]:#x}" if v else "no batch")
                              for b, v in held.items())
            return f"DIFFER at offset {base} ({shown})"
    return None
