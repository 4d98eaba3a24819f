"""Helpers for the connect tests: how to run the CLI, and reading topics back with a real client (aiokafka)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

ROOT = Path(__file__).resolve().parents[2]
CONNECT = [sys.executable, "-m", "binlake.cli", "connect"]


async def read_topic(address: str, topic: str, isolation: str = "read_uncommitted") -> list:
    """Every record of every partition of `topic` up to its end (the LSO under read_committed)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level=isolation, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in await partitions_of(address, topic)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        records = []
        async with asyncio.timeout(30):
            while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
                for messages in (await consumer.getmany(*pending, timeout_ms=500)).values():
                    records += messages
        return records
    finally:
        await consumer.stop()


async def partitions_of(address: str, topic: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
        return sorted(p["partition"] for p in described["partitions"])
    finally:
        await admin.close()


async def topic_config(address: str, topic: str, key: str) -> str | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {key: None})])
        return {entry[0]: entry[1] for resource in response.resources for entry in resource[4]}.get(key)
    finally:
        await admin.close()


async def datagen_ids(address: str, topic: str, isolation: str = "read_uncommitted") -> list[int]:
    return sorted(json.loads(m.value)["id"] for m in await read_topic(address, topic, isolation))


async def stored_offsets(address: str, connector: str, isolation: str = "read_uncommitted") -> list:
    """The offset records this connector wrote to binlake-offsets, oldest first, decoded."""
    return [(json.loads(m.key)[1], json.loads(m.value)) for m in await read_topic(address, "binlake-offsets", isolation)
            if json.loads(m.key)[0] == connector]


async def poll(session, url: str, until, timeout: float = 20):
    """GET `url` (JSON) until `until(body)` holds; returns that body."""
    async with asyncio.timeout(timeout):
        while True:
            async with session.get(url) as response:
                body = await response.json()
            if until(body):
                return body
            await asyncio.sleep(0.1)
