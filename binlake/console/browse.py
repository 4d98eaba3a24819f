"""The console's message browser: a page of one partition's records from an offset or a time, each
change event decoded (Debezium envelope or Canal flat message, by the decoder the sink and the stream
processors use) into its table, operation, key and the columns it changed."""

from __future__ import annotations

import json

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from spark_sink.changes import NotAChangeEvent, parse

from .cluster import TIMEOUT_S, ConsoleError

MAX_LIMIT = 500


def read(bootstrap: str, client_settings: dict, topic: str, partition: int, offset: int | None,
         timestamp_ms: int | None, limit: int) -> dict:
    """Up to `limit` committed records of topic-partition from `offset` (or the first at or after
    `timestamp_ms`; else the beginning)."""
    limit = max(1, min(limit, MAX_LIMIT))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "binlake-console", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True, **client_settings})
    try:
        start = TopicPartition(topic, partition, OFFSET_BEGINNING if offset is None else offset)
        if timestamp_ms is not None:
            start = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)], TIMEOUT_S)[0]
            if start.offset < 0:  # nothing at or after that time
                return {"topic": topic, "partition": partition, "records": [], "next": None}
        consumer.assign([start])
        records = []
        while len(records) < limit:
            batch = consumer.consume(limit - len(records), TIMEOUT_S)
            if not batch:
                break
            ended = False
            for message in batch:
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        ended = True
                        continue
                    raise ConsoleError(f"reading {topic}-{partition}: {message.error().str()}")
                records.append(describe(message))
            if ended:
                break
    finally:
        consumer.close()
    return {"topic": topic, "partition": partition, "records": records,
            "next": records[-1]["offset"] + 1 if records else None}


def describe(message) -> dict:
    """One record as the page shows it: position, key, and the change it carries (or its raw value)."""
    value = message.value()
    record = {"offset": message.offset(), "timestamp": message.timestamp()[1],
              "key": _text(message.key()), "value": None, "change": None}
    if value is None:
        record["kind"] = "tombstone"
        return record
    text = _text(value)
    try:
        body = json.loads(value)
        fmt = "canal" if isinstance(body, dict) and ("data" in body or "isDdl" in body) else "debezium"
        event = parse(value, fmt, message.offset())
    except (ValueError, NotAChangeEvent):
        record.update(kind="record", value=text)
        return record
    if event is None:  # a schema change or heartbeat of the connector
        record.update(kind="schema" if "ddl" in body or body.get("isDdl") else "other", value=text)
        return record
    changed = sorted(k for k in (event.after or {}) if (event.before or {}).get(k) != event.after.get(k)) \
        if event.op == "u" else []
    record.update(kind="change", change={"table": event.table, "op": event.op, "before": event.before,
                                         "after": event.after, "changed": changed})
    return record


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")
