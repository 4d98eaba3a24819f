"""`binlake canal run CONF_DIR`: Canal's conf directory, each destination a binlake MySQL connector."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from connect import cli as connect_cli
from connect.config import ConfigError

from . import conf as canal_conf

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
        specs = [canal_conf.connector_spec(d) for d in conf.destinations]
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    report(conf)
    metrics_at = None
    if port := conf.server.get("canal.metrics.pull.port"):
        metrics_at = f"{conf.server.get('canal.ip') or '0.0.0.0'}:{port}"
    ok = asyncio.run(connect_cli.run_connectors(specs, None, metrics_at))
    sys.exit(0 if ok else 1)


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
