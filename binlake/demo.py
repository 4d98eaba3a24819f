"""`binlake demo`: the pipeline on this machine, without Docker.

Today: a broker in a temporary data directory, a topic, messages produced and consumed back
with aiokafka. It grows stage by stage into MariaDB → connector → broker → processor → sink.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile

import click
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from rich.console import Console
from rich.table import Table

from logcore.broker import Broker


async def _demo(messages: int) -> None:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="binlake-demo-") as data_dir:
        broker = Broker(data_dir, "127.0.0.1", 0)
        await broker.start()
        try:
            console.print(f"[bold]broker[/] listening on {broker.address}, data in {data_dir}")
            async with AIOKafkaProducer(bootstrap_servers=broker.address, linger_ms=5) as producer:
                futures = [await producer.send("demo.orders", f'{{"order": {i}, "amount": {i * 7 % 100}}}'.encode(),
                                               key=f"order-{i}".encode()) for i in range(messages)]
                results = await asyncio.gather(*futures)
            console.print(f"produced {len(results)} messages to demo.orders")
            consumer = AIOKafkaConsumer("demo.orders", bootstrap_servers=broker.address,
                                        auto_offset_reset="earliest")
            await consumer.start()
            table = Table("partition", "offset", "key", "value")
            try:
                for _ in range(messages):
                    msg = await asyncio.wait_for(consumer.getone(), 10)
                    table.add_row(str(msg.partition), str(msg.offset), msg.key.decode(), msg.value.decode())
            finally:
                await consumer.stop()
            console.print(table)
            console.print(f"[green]consumed all {messages} messages back[/]")
        finally:
            await broker.stop()


@click.command("demo")
@click.option("--messages", default=10, show_default=True)
def demo_command(messages: int) -> None:
    """Run the pipeline on this machine (no Docker needed)."""
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_demo(messages))
