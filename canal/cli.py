"""`binlake canal run CONF_DIR`: Canal's conf directory, each destination a binlake MySQL connector."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from connect import cli as connect_cli
from connect.config import ConfigError

from . import conf as canal_conf
from .server import CanalServer

log = logging.getLogger(__name__)


@click.group("canal")
def canal_command() -> None:
    """Run a Canal 1.1.x conf directory (canal.properties, <destination>/instance.properties) on binlake."""


@canal_command.command("run")
@click.argument("conf_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run_command(conf_dir: str, log_level: str) -> None:
    """Run every destination of CONF_DIR until SIGTERM/SIGINT: its changes go, exactly once, to the topics
    Canal's routing names on kafka.bootstrap.servers. Exits 2 on a refused key or a bad value, 1 when a
    destination failed."""
    connect_cli.setup_logging(log_level)
    try:
        conf = canal_conf.load(conf_dir)
        specs = [canal_conf.connector_spec(d, conf.server_mode) for d in conf.destinations]
        server = None
        if conf.server_mode == "tcp":
            logs = {d.name: canal_conf.destination_log(d, s) for d, s in zip(conf.destinations, specs)}
            port = conf.server.get("canal.port") or "11111"
            if not port.isdigit():
                raise ConfigError(str(conf.directory), [("canal.port", f"{port!r} is not a port number")])
            server = CanalServer(conf.server.get("canal.ip", ""), int(port), logs, conf.server.get("canal.user", ""),
                                 conf.server.get("canal.passwd", ""))
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    report(conf)
    metrics_at = None
    if port := conf.server.get("canal.metrics.pull.port"):
        metrics_at = f"{conf.server.get('canal.ip') or '0.0.0.0'}:{port}"
    sys.exit(0 if asyncio.run(_run(specs, server, metrics_at)) else 1)


async def _run(specs, server: CanalServer | None, metrics_at: str | None) -> bool:
    """The destinations' connectors, and in tcp mode Canal's TCP server over their entry logs."""
    if server is not None:
        await server.start()
    try:
        return await connect_cli.run_connectors(specs, None, metrics_at)
    finally:
        if server is not None:
            await server.stop()


def report(conf: canal_conf.CanalConf) -> None:
    """Log each ignored key once with its reason, and warn of each unknown key."""
    seen = set()
    for key, reason, source in conf.ignored:
        if key not in seen:
            seen.add(key)
            log.info("%s: %s ignored: %s", source, key, reason)
    for key, source in conf.unknown:
        log.warning("%s: %s is not a key of Canal 1.1.8's stock files, nor binlake's: ignored (a typo?)", source, key)
    log.info("Canal conf %s: destinations %s, serverMode %s", conf.directory,
             ", ".join(d.name for d in conf.destinations), conf.server_mode)
