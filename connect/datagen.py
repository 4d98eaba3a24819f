"""`datagen`: a built-in source that emits deterministic records, to try the runtime end to end.

Record i has key {"id": i} and value {"id": i, "name": "user-i", "score": i*7919 mod 1000}; the
source offset is {"next": i+1}, so a restarted task continues exactly where the last commit was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from pydantic import Field

from .api import Batch, ConnectorConfig, SourceConnector, SourceRecord, SourceTask


class DatagenConfig(ConnectorConfig):
    topic: str | None = None
    """Default: `<connector name>.datagen`."""
    count: int | None = Field(None, ge=0)
    """Stop (the task finishes) after this many records in total; None: never."""
    batch_size: int = Field(10, ge=1)
    interval_ms: int = Field(100, ge=0)
    """Pause between batches."""


def record(topic: str, i: int) -> SourceRecord:
    return SourceRecord(topic=topic, key={"id": i}, value={"id": i, "name": f"user-{i}", "score": i * 7919 % 1000})


class DatagenTask(SourceTask):
    config: DatagenConfig

    async def batches(self) -> AsyncGenerator[Batch, None]:
        topic = self.config.topic or f"{self.context.connector}.datagen"
        partition = {"datagen": self.context.connector}
        stored = self.context.offsets.get(partition)
        i = stored["next"] if stored else 0
        while self.config.count is None or i < self.config.count:
            end = i + self.config.batch_size
            if self.config.count is not None:
                end = min(end, self.config.count)
            yield Batch([record(topic, n) for n in range(i, end)], partition, {"next": end})
            i = end
            await asyncio.sleep(self.config.interval_ms / 1000)


class DatagenConnector(SourceConnector):
    config_model = DatagenConfig
    task_class = DatagenTask
