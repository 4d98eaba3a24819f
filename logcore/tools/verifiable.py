"""`binlake verifiable-producer` and `binlake verifiable-consumer`: Kafka's verifiable clients, with
their flags and their JSON event lines (one object per line on stdout), so the tooling that reads
Kafka's (its system tests) can read these. On confluent-kafka; against any broker."""

from __future__ import annotations

import json
import signal
import time

import click
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def emit(name: str, **fields) -> None:
    click.echo(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}), nl=True)


def _stopper() -> list[bool]:
    """SIGTERM / SIGINT end the run cleanly (shutdown_complete), as with Kafka's tools."""
    stopped = [False]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.__setitem__(0, True))
    return stopped


@click.command("verifiable-producer")
@click.option("--bootstrap-server", required=True)
@click.option("--topic", required=True)
@click.option("--max-messages", type=int, default=-1, show_default=True, help="-1: until stopped")
@click.option("--throughput", type=int, default=-1, show_default=True, help="messages/s; -1: as fast as possible")
@click.option("--acks", type=click.Choice(["-1", "0", "1", "all"]), default="-1", show_default=True)
@click.option("--value-prefix", type=int, help="values are PREFIX.N instead of N")
@click.option("--repeating-keys", type=int, help="keys cycle through 0..N-1 (default: no key)")
@click.option("--transactional-id", help="send in transactions of --transaction-size messages")
@click.option("--transaction-size", type=click.IntRange(1), default=100, show_default=True)
def verifiable_producer_command(bootstrap_server: str, topic: str, max_messages: int, throughput: int, acks: str,
                                value_prefix: int | None, repeating_keys: int | None, transactional_id: str | None,
                                transaction_size: int) -> None:
    """Produce numbered messages and report each acknowledgement as a JSON line (kafka-verifiable-producer)."""
    config = {"bootstrap.servers": bootstrap_server, "acks": acks}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    stopped = _stopper()
    counts = {"sent": 0, "acked": 0}

    def delivered(err, msg) -> None:
        if err is None:
            counts["acked"] += 1
            emit("producer_send_success", key=_text(msg.key()), value=_text(msg.value()), topic=msg.topic(),
                 partition=msg.partition(), offset=msg.offset())
        else:
            emit("producer_send_error", exception=type(err).__name__, message=err.str(), topic=msg.topic(),
                 key=_text(msg.key()), value=_text(msg.value()))

    emit("startup_complete")
    if transactional_id:
        producer.init_transactions()
    start = time.monotonic()
    while not stopped[0] and (max_messages < 0 or counts["sent"] < max_messages):
        if throughput > 0 and (ahead := start + counts["sent"] / throughput - time.monotonic()) > 0:
            producer.poll(ahead)
            continue
        if transactional_id and counts["sent"] % transaction_size == 0:
            if counts["sent"]:
                producer.commit_transaction()
            producer.begin_transaction()
        n = counts["sent"]
        value = f"{value_prefix}.{n}" if value_prefix is not None else str(n)
        key = str(n % repeating_keys) if repeating_keys else None
        producer.produce(topic, value=value, key=key, on_delivery=delivered)
        counts["sent"] += 1
        producer.poll(0)
    if transactional_id and counts["sent"]:
        producer.commit_transaction()
    producer.flush()
    seconds = max(time.monotonic() - start, 1e-9)
    emit("shutdown_complete")
    emit("tool_data", sent=counts["sent"], acked=counts["acked"], target_throughput=throughput,
         avg_throughput=counts["acked"] / seconds)


@click.command("verifiable-consumer")
@click.option("--bootstrap-server", required=True)
@click.option("--topic", required=True)
@click.option("--group-id", required=True)
@click.option("--max-messages", type=int, default=-1, show_default=True, help="-1: until stopped")
@click.option("--enable-autocommit", is_flag=True, help="let the client commit (default: commit after each batch)")
@click.option("--reset-policy", type=click.Choice(["earliest", "latest", "none"]), default="earliest", show_default=True)
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              show_default=True)
@click.option("--session-timeout", "session_timeout_ms", type=int, default=30000, show_default=True)
@click.option("--verbose", is_flag=True, help="also a record_data line per record")
def verifiable_consumer_command(bootstrap_server: str, topic: str, group_id: str, max_messages: int,
                                enable_autocommit: bool, reset_policy: str, isolation_level: str,
                                session_timeout_ms: int, verbose: bool) -> None:
    """Consume in a group and report assignments, records and commits as JSON lines (kafka-verifiable-consumer)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_server, "group.id": group_id,
                         "enable.auto.commit": enable_autocommit, "auto.offset.reset": reset_policy,
                         "isolation.level": isolation_level, "session.timeout.ms": session_timeout_ms})
    stopped = _stopper()

    def partitions(tps) -> list[dict]:
        return [{"topic": tp.topic, "partition": tp.partition} for tp in tps]

    consumer.subscribe([topic], on_assign=lambda c, tps: emit("partitions_assigned", partitions=partitions(tps)),
                       on_revoke=lambda c, tps: emit("partitions_revoked", partitions=partitions(tps)))
    emit("startup_complete")
    consumed = 0
    try:
        while not stopped[0] and (max_messages < 0 or consumed < max_messages):
            batch = consumer.consume(500 if max_messages < 0 else min(500, max_messages - consumed), 0.2)
            records = [m for m in batch if m.error() is None]
            for message in batch:
                if message.error() is not None and message.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(message.error())
            if not records:
                continue
            consumed += len(records)
            _report(records, verbose)
            if not enable_autocommit:
                _commit(consumer, records)
    finally:
        consumer.close()
        emit("shutdown_complete")


def _report(records, verbose: bool) -> None:
    ranges: dict[tuple[str, int], list[int]] = {}
    for message in records:
        if verbose:
            emit("record_data", key=_text(message.key()), value=_text(message.value()), topic=message.topic(),
                 partition=message.partition(), offset=message.offset())
        ranges.setdefault((message.topic(), message.partition()), []).append(message.offset())
    emit("records_consumed", count=len(records), partitions=[
        {"topic": t, "partition": p, "count": len(offsets), "minOffset": min(offsets), "maxOffset": max(offsets)}
        for (t, p), offsets in ranges.items()])


def _commit(consumer: Consumer, records) -> None:
    last: dict[tuple[str, int], int] = {}
    for message in records:
        last[(message.topic(), message.partition())] = message.offset() + 1
    offsets = [TopicPartition(t, p, o) for (t, p), o in last.items()]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
        success, error = True, None
    except KafkaException as exc:
        success, error = False, exc.args[0].str()
    emit("offsets_committed", offsets=[{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
                                       for tp in offsets], success=success, **({"error": error} if error else {}))


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")
