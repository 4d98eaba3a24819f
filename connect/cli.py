"""`binlake connect run|validate|plugins`: the standalone runtime's command line."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from . import config, plugins
from .runtime import Worker

log = logging.getLogger(__name__)


def _load_all(paths: tuple[str, ...]) -> list[config.ConnectorSpec]:
    """Validate every file before running any; report all their problems, then exit 2."""
    specs, errors = [], []
    for path in paths:
        try:
            specs.append(config.load(path))
        except config.ConfigError as exc:
            errors.append(str(exc))
    if errors:
        click.echo("\n".join(errors), err=True)
        sys.exit(2)
    return specs


def _address(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:8083")
    return host or "127.0.0.1", int(port)


@click.group("connect")
def connect_command() -> None:
    """Run source connectors (standalone mode), configured in YAML."""


@connect_command.command("run")
@click.argument("configs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--rest", metavar="HOST:PORT", help="Serve the REST API (Kafka Connect's paths) here.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run_command(configs: tuple[str, ...], rest: str | None, log_level: str) -> None:
    """Run the connectors in CONFIGS in the foreground until SIGTERM/SIGINT, or until every task has
    ended; exits 1 when a task ended FAILED, 2 on a config error."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level.upper() != "DEBUG":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    specs = _load_all(configs)
    try:
        ok = asyncio.run(_run(specs, _address(rest)))
    except ValueError as exc:  # a worker-level config problem (duplicate names, a sink plugin)
        click.echo(str(exc), err=True)
        sys.exit(2)
    sys.exit(0 if ok else 1)


async def _run(specs: list[config.ConnectorSpec], rest: tuple[str, int] | None) -> bool:
    worker = Worker(specs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = None
    if rest is not None:
        from .rest import serve  # aiohttp only when asked for
        server = await serve(worker, *rest)
        log.info("REST API on http://%s:%d", *server.addresses[0][:2])
    worker.start()
    done = asyncio.ensure_future(worker.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        log.info("stopping: tasks finish their current batch and commit")
        await worker.stop()
    stopped.cancel()
    ok = await done
    if server is not None:
        await server.cleanup()
    log.info("stopped")
    return ok


@connect_command.command("validate")
@click.argument("configs", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate_command(configs: tuple[str, ...]) -> None:
    """Check config files without running them; exits 2 listing every problem."""
    for spec in _load_all(configs):
        click.echo(f"{spec.source}: ok ({spec.name}: {spec.runtime.connector}, {spec.runtime.delivery})")


@connect_command.command("plugins")
def plugins_command() -> None:
    """List installed connector plugins (entry-point group binlake.connectors)."""
    for name, target in sorted(plugins.installed().items()):
        click.echo(f"{name}\t{target}")
