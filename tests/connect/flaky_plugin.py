"""A test-only source plugin whose task raises, to exercise restart with backoff.

Loaded by the runtime as `connector: flaky_plugin:FlakyConnector` (a module:Class reference;
the `connect` fixture puts tests/connect on PYTHONPATH). It emits datagen's records,
but the first `failures` attempts of the process raise when they reach record `fail_at`, its
`start()` takes `start_ms` (a source connecting to its server), and its `stop()` never returns with
`hang_on_stop`.
"""

from __future__ import annotations

import asyncio

from pydantic import SecretStr

from connect.api import Batch, SourceConnector, SourceTask
from connect.datagen import DatagenConfig, record


class FlakyConfig(DatagenConfig):
    fail_at: int
    failures: int = 3
    token: SecretStr | None = None
    hang_on_stop: bool = False
    start_ms: int = 0


class FlakyTask(SourceTask):
    config: FlakyConfig
    attempts = 0  # per process: the runtime restarts tasks in the same process

    async def start(self):
        await asyncio.sleep(self.config.start_ms / 1000)

    async def batches(self):
        type(self).attempts += 1
        topic = self.config.topic or f"{self.context.connector}.datagen"
        partition = {"datagen": self.context.connector}
        stored = self.context.offsets.get(partition)
        i = stored["next"] if stored else 0
        while self.config.count is None or i < self.config.count:
            if i >= self.config.fail_at and type(self).attempts <= self.config.failures:
                raise RuntimeError(f"injected failure at record {i} (attempt {type(self).attempts})")
            end = min(i + self.config.batch_size, self.config.fail_at if i < self.config.fail_at else 1 << 62)
            if self.config.count is not None:
                end = min(end, self.config.count)
            yield Batch([record(topic, n) for n in range(i, end)], partition, {"next": end})
            i = end
            await asyncio.sleep(self.config.interval_ms / 1000)

    async def stop(self):
        if self.config.hang_on_stop:
            await asyncio.Event().wait()


class FlakyConnector(SourceConnector):
    config_model = FlakyConfig
    task_class = FlakyTask
