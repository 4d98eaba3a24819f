"""`binlake schema-registry`: Confluent Schema Registry's REST API, schemas kept in a compacted topic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys

import click
from aiohttp import web
from aiokafka.errors import KafkaError

from common.log_topics import TopicError

from .election import Election, Identity
from .errors import RegistryError
from .rest import make_app
from .service import Registry
from .state import RegistryState
from .store import KafkaStore

log = logging.getLogger(__name__)


@click.command("schema-registry")
@click.option("--bootstrap-servers", required=True, help="HOST:PORT[,HOST:PORT...] of the Kafka cluster (logcore or "
                                                         "Apache Kafka).")
@click.option("--listen", default="127.0.0.1:8081", show_default=True, help="HOST:PORT the REST API listens on.")
@click.option("--advertised-host", help="The host other instances reach this one at, to forward writes "
                                        "(default: the --listen host, or this machine's name for 0.0.0.0).")
@click.option("--topic", default="_schemas", show_default=True, help="The compacted topic schemas are kept in.")
@click.option("--replication-factor", type=int, help="Of the topic when it is created (default: up to 3, as many "
                                                      "as there are brokers).")
@click.option("--group-id", default="schema-registry", show_default=True,
              help="The group the instances elect their leader in.")
@click.option("--leader-eligibility/--no-leader-eligibility", default=True, show_default=True,
              help="Whether this instance may be elected to lead writes.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def schema_registry_command(bootstrap_servers: str, listen: str, advertised_host: str | None, topic: str,
                            replication_factor: int | None, group_id: str, leader_eligibility: bool,
                            log_level: str) -> None:
    """Serve Confluent Schema Registry's REST API, the schemas kept in a compacted topic.

    Runs until SIGTERM/SIGINT. Several instances on one cluster elect one leader for writes through the
    group --group-id; the others forward writes to it. Exits 1 when the cluster or the topic is unusable."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level.upper() != "DEBUG":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not HOST:PORT", param_hint="--listen")
    advertised = advertised_host or (host if host not in ("", "0.0.0.0", "::") else socket.getfqdn())
    identity = Identity(advertised, int(port), eligible=leader_eligibility)
    try:
        asyncio.run(_serve(bootstrap_servers, host or "0.0.0.0", int(port), identity, topic, replication_factor,
                           group_id))
    except (TopicError, KafkaError, RegistryError, OSError) as exc:
        click.echo(f"schema-registry: {exc}", err=True)
        sys.exit(1)


async def _serve(bootstrap_servers: str, host: str, port: int, identity: Identity, topic: str,
                 replication_factor: int | None, group_id: str) -> None:
    state = RegistryState()
    store = KafkaStore(bootstrap_servers, state, topic, replication_factor=replication_factor)
    await store.start()
    registry = Registry(state, store)
    election = Election(bootstrap_servers, identity, group_id, on_elected=registry.become_leader)
    runner = web.AppRunner(make_app(registry, election), access_log=None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await election.start()
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        log.info("schema registry on http://%s:%d (advertised as %s), schemas in %s", host, port, identity.url, topic)
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
