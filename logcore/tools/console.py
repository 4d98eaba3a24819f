"""`binlake produce` and `binlake consume`: the console producer and consumer, like
kafka-console-producer.sh / kafka-console-consumer.sh, with their option and property names.

They talk to the broker only through aiokafka, so they work the same against Apache Kafka.
Lines are bytes: nothing is decoded, so any encoding passes through unchanged.
"""

from __future__ import annotations

import asyncio
import codecs
import sys
import time

import click
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

PRODUCE_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "ignore.error": "false", "null.marker": ""}
CONSUME_PROPERTIES = {
    "print.timestamp": "false", "print.partition": "false", "print.offset": "false", "print.headers": "false",
    "print.key": "false", "print.value": "true", "key.separator": "\t", "line.separator": "\n",
    "headers.separator": ",", "headers.key.separator": ":", "null.literal": "null",
}
PENDING_SENDS = 10_000  # sends in flight before the producer waits for their results
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def _properties(known: dict[str, str]):
    """Click callback: KEY=VALUE pairs over `known` defaults; backslash escapes (\\t, \\n) are decoded."""

    def parse(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
        props = dict(known)
        for item in values:
            key, sep, value = item.partition("=")
            if not sep:
                raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
            if key not in known:
                raise click.BadParameter(f"unknown property {key!r}; known: {', '.join(sorted(known))}")
            props[key] = codecs.decode(value, "unicode_escape")
        return props

    return parse


def _flag(props: dict[str, str], name: str) -> bool:
    return props[name].strip().lower() == "true"


bootstrap_option = click.option("--bootstrap-server", required=True, metavar="HOST:PORT",
                                help="broker(s) to connect to, comma separated")


# ---------------------------------------------------------------------------------------------
# Producer


@click.command("produce")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="send every message to this partition (default: by key)")
@click.option("--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True)
@click.option("--compression", "compression", default="none", show_default=True,
              type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]))
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              callback=_properties(PRODUCE_PROPERTIES),
              help="parse.key=true, key.separator=SEP (default tab), ignore.error=true, null.marker=TEXT")
def produce_command(bootstrap_server: str, topic: str, partition: int | None, acks: str, compression: str,
                    props: dict[str, str]) -> None:
    """Send each line of standard input as one message."""
    sent = asyncio.run(_produce(bootstrap_server, topic, partition, acks, compression, props, sys.stdin.buffer))
    click.echo(f"Sent {sent} message(s)", err=True)


def parse_line(line: bytes, number: int, props: dict[str, str]) -> tuple[bytes | None, bytes | None]:
    """(key, value) of one input line, as kafka-console-producer reads it."""
    key = None
    if _flag(props, "parse.key"):
        key, sep, value = line.partition(props["key.separator"].encode())
        if not sep:
            if not _flag(props, "ignore.error"):
                raise click.ClickException(f"no key separator {props['key.separator']!r} on line {number}: "
                                           f"{line[:80]!r}; fix the line or set --property ignore.error=true")
            key, value = None, line
    else:
        value = line
    marker = props["null.marker"].encode()
    if marker:
        key = None if key == marker else key
        value = None if value == marker else value
    return key, value


async def _start(client: AIOKafkaProducer | AIOKafkaConsumer, bootstrap: str) -> None:
    try:
        await client.start()
    except KafkaError as exc:
        await client.stop()
        raise click.ClickException(f"cannot connect to {bootstrap}: {exc}") from None


async def _produce(bootstrap: str, topic: str, partition: int | None, acks: str, compression: str,
                   props: dict[str, str], source) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all" if acks in ("all", "-1") else int(acks),
                                compression_type=None if compression == "none" else compression,
                                client_id="binlake-console-producer")
    await _start(producer, bootstrap)
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future] = []
    sent = number = 0
    try:
        while line := await loop.run_in_executor(None, source.readline):
            number += 1
            key, value = parse_line(line.rstrip(b"\n").rstrip(b"\r"), number, props)
            pending.append(await producer.send(topic, value, key=key, partition=partition))
            if len(pending) >= PENDING_SENDS:
                sent += await _settle(pending)
        sent += await _settle(pending)
    except KafkaError as exc:
        raise click.ClickException(f"sending to {topic} failed after {sent} message(s): {exc}") from None
    finally:
        await producer.stop()
    return sent


async def _settle(pending: list[asyncio.Future]) -> int:
    """Wait for every send in flight; raises the first failure."""
    done = len(pending)
    for future in pending:
        await future
    pending.clear()
    return done


# ---------------------------------------------------------------------------------------------
# Consumer


@click.command("consume")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--group", help="consumer group to join and commit to (default: none, read every partition)")
@click.option("--share-group", help="share group (KIP-932) to consume in: records shared with its other members, "
                                    "each accepted once printed")
@click.option("--partition", type=int, help="read only this partition")
@click.option("--offset", help="with --partition: earliest, latest or an offset number (default latest)")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset when there is no committed one")
@click.option("--max-messages", type=click.IntRange(min=1), help="exit after this many messages")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="exit when no message arrived for this long")
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              callback=_properties(CONSUME_PROPERTIES),
              help="print.key / print.partition / print.offset / print.timestamp / print.headers / "
                   "print.value=true|false, key.separator, line.separator, null.literal, ...")
def consume_command(bootstrap_server: str, topic: str, group: str | None, share_group: str | None,
                    partition: int | None, offset: str | None, from_beginning: bool, max_messages: int | None,
                    timeout_ms: int | None, props: dict[str, str]) -> None:
    """Print messages to standard output, one line each."""
    if share_group is not None:
        if group is not None or partition is not None or offset is not None or from_beginning:
            raise click.UsageError("--share-group excludes --group, --partition, --offset and --from-beginning "
                                   "(a share group starts where its share.auto.offset.reset config says)")
        from .share_console import consume_shared  # (confluent-kafka only for a share consumer)

        def write(records) -> None:
            sys.stdout.buffer.write(b"".join(format_record(r, props) for r in records))
            sys.stdout.buffer.flush()

        try:
            count = consume_shared(bootstrap_server, topic, share_group, max_messages, timeout_ms, write)
        except KeyboardInterrupt:
            return
        click.echo(f"Processed a total of {count} messages", err=True)
        return
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    if offset is not None and offset not in ("earliest", "latest") and not offset.isdigit():
        raise click.BadParameter(f"expected earliest, latest or a non-negative number, got {offset!r}",
                                 param_hint="--offset")
    start = offset or ("earliest" if from_beginning else "latest")
    try:
        count = asyncio.run(_consume(bootstrap_server, topic, group, partition, start, max_messages, timeout_ms, props,
                                     sys.stdout.buffer))
    except KeyboardInterrupt:
        return
    click.echo(f"Processed a total of {count} messages", err=True)


def format_record(record, props: dict[str, str]) -> bytes:
    """One record as kafka-console-consumer's DefaultMessageFormatter writes it."""
    columns: list[bytes] = []
    null = props["null.literal"].encode()
    if _flag(props, "print.timestamp"):
        kind = TIMESTAMP_TYPES.get(record.timestamp_type)
        columns.append(f"{kind}:{record.timestamp}".encode() if kind and record.timestamp >= 0 else b"NO_TIMESTAMP")
    if _flag(props, "print.partition"):
        columns.append(f"Partition:{record.partition}".encode())
    if _flag(props, "print.offset"):
        columns.append(f"Offset:{record.offset}".encode())
    if _flag(props, "print.headers"):
        pairs = [k.encode() + props["headers.key.separator"].encode() + (v if v is not None else null)
                 for k, v in record.headers]
        columns.append(props["headers.separator"].encode().join(pairs) if pairs else b"NO_HEADERS")
    if _flag(props, "print.key"):
        columns.append(record.key if record.key is not None else null)
    if _flag(props, "print.value"):
        columns.append(record.value if record.value is not None else null)
    return props["key.separator"].encode().join(columns) + props["line.separator"].encode()


async def _consume(bootstrap: str, topic: str, group: str | None, partition: int | None, start: str,
                   max_messages: int | None, timeout_ms: int | None, props: dict[str, str], out) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=group is not None,
                                auto_offset_reset="earliest" if start == "earliest" else "latest",
                                client_id="binlake-console-consumer")
    await _start(consumer, bootstrap)
    count = 0
    try:
        await _position(consumer, topic, partition, start)
        last = time.monotonic()
        while max_messages is None or count < max_messages:
            wait_ms = 1000 if timeout_ms is None else max(0, int(timeout_ms - (time.monotonic() - last) * 1000))
            batches = await consumer.getmany(timeout_ms=wait_ms,
                                             max_records=None if max_messages is None else max_messages - count)
            records = [r for rs in batches.values() for r in rs]  # each partition's own order kept
            if records:
                out.write(b"".join(format_record(r, props) for r in records))
                out.flush()
                count += len(records)
                last = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                break
    finally:
        await consumer.stop()
    return count


async def _position(consumer: AIOKafkaConsumer, topic: str, partition: int | None, start: str) -> None:
    """Assign one partition and seek (--partition), or read them all (subscribe, with or without a group)."""
    if partition is None:
        consumer.subscribe([topic])
        return
    tp = TopicPartition(topic, partition)
    await consumer.topics()  # refreshes metadata, so the partition count below is current
    known = consumer.partitions_for_topic(topic)
    if known is not None and partition not in known:
        raise click.ClickException(f"topic {topic} has no partition {partition} (partitions: {sorted(known)})")
    consumer.assign([tp])
    if start == "earliest":
        await consumer.seek_to_beginning(tp)
    elif start == "latest":
        await consumer.seek_to_end(tp)
    else:
        consumer.seek(tp, int(start))
