"""One registry instance's lifetime, wherever it runs (`binlake schema-registry`, or inside a broker):
the `_schemas` store read up, the leader election joined, the REST API served, until told to stop or
until the store or the election fails."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from common.kafka_security import KafkaSecurity

from .election import Election, Identity
from .rest import make_app
from .service import Registry
from .state import RegistryState
from .store import KafkaStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listener:
    tls: ssl.SSLContext | None            # serve HTTPS
    forward_tls: ssl.SSLContext | None    # forward writes to a leader over HTTPS
    authenticate: Any                     # an aiohttp middleware, or None


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str
    host: str
    port: int
    identity: Identity
    topic: str = "_schemas"
    replication_factor: int | None = None
    group_id: str = "schema-registry"
    security: KafkaSecurity = KafkaSecurity()
    listener: Listener = Listener(None, None, None)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Serve until `stop` is set; raises what made the store or the election fail."""
    s = settings
    state = RegistryState()
    store = KafkaStore(s.bootstrap_servers, state, s.topic, replication_factor=s.replication_factor,
                       security=s.security)
    await store.start()
    registry = Registry(state, store)
    election = Election(s.bootstrap_servers, s.identity, s.group_id, on_elected=registry.become_leader,
                        security=s.security)
    runner = web.AppRunner(make_app(registry, election, authenticate=s.listener.authenticate,
                                    forward_tls=s.listener.forward_tls), access_log=None)
    try:
        await election.start()
        await runner.setup()
        await web.TCPSite(runner, s.host, s.port, ssl_context=s.listener.tls).start()
        log.info("schema registry on %s://%s:%d (advertised as %s), schemas in %s", s.identity.scheme, s.host,
                 s.port, s.identity.url, s.topic)
        waits = [asyncio.ensure_future(w) for w in (stop.wait(), store.wait(), election.wait())]
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        for finished in done:
            if not finished.cancelled() and finished.exception():
                raise finished.exception()
    finally:
        await runner.cleanup()
        with contextlib.suppress(Exception):
            await election.stop()
        await store.stop()
