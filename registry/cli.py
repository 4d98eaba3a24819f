"""`binlake schema-registry`: Confluent Schema Registry's REST API, schemas kept in a compacted topic."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys

import click
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from common import yamlfile
from common.kafka_security import KafkaSecurity
from common.log_topics import TopicError

from .election import Identity
from .errors import RegistryError
from .listener import ListenerConfigError, basic_auth, client_tls, load_users, server_tls
from .server import Listener, Settings, serve

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
@click.option("--kafka-security", type=click.Path(exists=True, dir_okay=False),
              help="A YAML file with a `security:` block (docs/security.md, binlake's own clients): how this "
                   "registry's Kafka clients reach a TLS or SASL listener.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False),
              help="Serve HTTPS with this PEM certificate chain (and its key, unless --tls-key).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="The PEM key of --tls-cert.")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False),
              help="PEM CAs: of client certificates, and of the other instances when forwarding writes.")
@click.option("--tls-client-auth", type=click.Choice(["none", "requested", "required"]), default="none",
              show_default=True, help="Whether clients must show a certificate signed by --tls-ca.")
@click.option("--basic-auth-users", type=click.Path(exists=True, dir_okay=False),
              help="Require HTTP Basic authentication; the file has one `name: password[,role...]` a line.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def schema_registry_command(bootstrap_servers: str, listen: str, advertised_host: str | None, topic: str,
                            replication_factor: int | None, group_id: str, leader_eligibility: bool,
                            kafka_security: str | None, tls_cert: str | None, tls_key: str | None,
                            tls_ca: str | None, tls_client_auth: str, basic_auth_users: str | None,
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
    identity = Identity(advertised, int(port), "https" if tls_cert else "http", leader_eligibility)
    try:
        security = _kafka_security(kafka_security) if kafka_security else KafkaSecurity()
        listener = Listener(
            server_tls(tls_cert, tls_key, tls_ca, tls_client_auth) if tls_cert else None,
            client_tls(tls_ca, tls_cert, tls_key) if tls_cert else None,
            basic_auth(load_users(basic_auth_users)) if basic_auth_users else None)
    except (ListenerConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        asyncio.run(_serve_until_signalled(Settings(bootstrap_servers, host or "0.0.0.0", int(port), identity, topic,
                                                    replication_factor, group_id, security, listener)))
    except (TopicError, KafkaError, RegistryError, OSError) as exc:
        click.echo(f"schema-registry: {exc}", err=True)
        sys.exit(1)


def _kafka_security(path: str) -> KafkaSecurity:
    document = yamlfile.load(path)
    if not isinstance(document, dict) or set(document) != {"security"}:
        raise ValueError(f"{path}: expected one `security:` block (docs/security.md, binlake's own clients)")
    try:
        return KafkaSecurity(**document["security"])
    except ValidationError as exc:
        raise ValueError(f"{path}: {exc}") from None


async def _serve_until_signalled(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)
