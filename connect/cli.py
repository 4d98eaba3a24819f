"""`binlake connect run|validate|plugins`: the standalone runtime's command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

import click
from aiokafka.errors import KafkaError

from common.log_topics import TopicError

from . import config, plugins, worker_config
from .herder import Standalone
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
    """Run source connectors: standalone (`run`, configured in YAML) or on distributed workers (`worker`)."""


@connect_command.command("run")
@click.argument("configs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--rest", metavar="HOST:PORT", help="Serve the REST API (Kafka Connect's paths) here.")
@click.option("--prometheus-listener", metavar="HOST:PORT", help="Serve Prometheus metrics at /metrics here.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run_command(configs: tuple[str, ...], rest: str | None, prometheus_listener: str | None, log_level: str) -> None:
    """Run the connectors in CONFIGS in the foreground until SIGTERM/SIGINT, or until every task has
    ended; exits 1 when a task ended FAILED, 2 on a config error."""
    setup_logging(log_level)
    specs = _load_all(configs)
    try:
        ok = asyncio.run(run_connectors(specs, _address(rest), prometheus_listener and "%s:%d" % _address(prometheus_listener)))
    except ValueError as exc:  # a worker-level config problem (duplicate names, a sink plugin)
        click.echo(str(exc), err=True)
        sys.exit(2)
    sys.exit(0 if ok else 1)


async def run_connectors(specs: list[config.ConnectorSpec], rest: tuple[str, int] | None,
                         metrics_at: str | None) -> bool:
    """Run `specs` on one standalone worker until SIGTERM/SIGINT or until every task ended; False when one failed."""
    worker = Worker(specs)
    stop = stop_on_signals()
    server = None
    metrics_endpoint = await serve_task_metrics(
        lambda: [r for c in worker.connectors.values() for r in c.runners], metrics_at)
    if rest is not None:
        from .rest import bind, serve  # aiohttp only when asked for
        sock = bind(*rest)
        worker_id = "%s:%d" % sock.getsockname()[:2]
        server = await serve(Standalone(worker, worker_id), sock)
        log.info("REST API on http://%s", worker_id)
    worker.start()
    done = asyncio.ensure_future(worker.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        log.info("stopping: tasks finish their current batch and commit")
        await worker.stop()
    stopped.cancel()
    ok = await done
    for runner in (server, metrics_endpoint):
        if runner is not None:
            await runner.cleanup()
    log.info("stopped")
    return ok


async def serve_task_metrics(runners, listener: str | None):
    """The metrics endpoint over these task runners, if a listener is given; its aiohttp runner."""
    if listener is None:
        return None
    from logcore.metrics_endpoint import serve_metrics

    from . import metrics
    metrics.watch(runners)
    return await serve_metrics(metrics.exposition, listener)


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level.upper() != "DEBUG":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)


@connect_command.command("worker")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The worker's YAML file: group_id, bootstrap_servers, rest, config.storage.topic, ...")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def worker_command(config_path: str, log_level: str) -> None:
    """Run a distributed worker (Kafka Connect's distributed mode) until SIGTERM/SIGINT: workers with
    the same group_id share the connectors created through the REST API, and take over those of a
    worker that dies. Exits 2 on a config error, 1 when the worker cannot go on."""
    setup_logging(log_level)
    try:
        settings = worker_config.load(config_path)
    except config.ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    try:
        asyncio.run(_run_worker(settings))
    except (KafkaError, TopicError, OSError) as exc:
        click.echo(f"the worker stopped: {exc}", err=True)
        sys.exit(1)


async def _run_worker(settings: worker_config.WorkerConfig) -> None:
    from .distributed import DistributedWorker
    from .rest import bind, serve
    stop = stop_on_signals()
    sock = bind(*settings.rest_address)
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    worker = DistributedWorker(settings, settings.rest_advertised_url or f"http://{host}:{port}")
    server = metrics_endpoint = None
    try:
        await worker.start()
        metrics_endpoint = await serve_task_metrics(lambda: list(worker.runners.values()), settings.prometheus_listener)
        server = await serve(worker, sock)  # once the config topic is read: answers are current
        log.info("REST API on %s (group %s)", worker.url, settings.group_id)
        running = asyncio.ensure_future(worker.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if running.done():
            running.result()
        log.info("stopping: tasks finish their current batch and commit, then the worker leaves its group")
    finally:
        await worker.shutdown()
        for runner in (server, metrics_endpoint):
            if runner is not None:
                await runner.cleanup()
    log.info("stopped")


@connect_command.command("submit")
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@click.option("--url", default="http://127.0.0.1:8083", show_default=True, help="Any worker of the group.")
def submit_command(config_path: str, url: str) -> None:
    """Create or reconfigure the connector of a `connect run` YAML file on distributed workers
    (PUT /connectors/NAME/config). `${VAR}` references are resolved by the workers, from their environment."""
    try:
        body = config.read_mapping(config_path, "name: ..., connector: ..., ...")
    except config.ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    name = body.get("name")
    if not isinstance(name, str):
        click.echo(f"{config_path}: name: required key is missing", err=True)
        sys.exit(2)
    status = _send_to_worker(url, f"/connectors/{urllib.parse.quote(name)}/config", "PUT", body, f"connector {name}")
    click.echo(f"{'created' if status == 201 else 'updated'} connector {name}")


@connect_command.command("signal")
@click.argument("name")
@click.argument("kind", metavar="TYPE",
                type=click.Choice(["execute-snapshot", "stop-snapshot", "pause-snapshot", "resume-snapshot"]))
@click.option("--tables", "tables", multiple=True, metavar="DB.TABLE",
              help="A table to snapshot (or stop snapshotting); repeat it, or separate names by commas.")
@click.option("--where", "where", metavar="SQL", help="execute-snapshot: read only the rows where SQL holds.")
@click.option("--id", "signal_id", help="The signal's id (default: a new one).")
@click.option("--url", default="http://127.0.0.1:8083", show_default=True,
              help="The REST API of the worker that runs the connector (`connect run --rest`).")
def signal_command(name: str, kind: str, tables: tuple[str, ...], where: str | None, signal_id: str | None,
                   url: str) -> None:
    """Send a signal to connector NAME: incremental snapshots (execute-snapshot --tables db.t [--where SQL]),
    stop-snapshot, pause-snapshot, resume-snapshot. The same as a row in the connector's signal table."""
    names = [t.strip() for value in tables for t in value.split(",") if t.strip()]
    if kind == "execute-snapshot" and not names:
        raise click.UsageError("execute-snapshot needs --tables DB.TABLE")
    if where is not None and len(names) != 1:
        raise click.UsageError("--where applies to one table: give exactly one --tables")
    data: dict = {"data-collections": names} if names else {}
    if kind == "execute-snapshot":
        data["type"] = "incremental"
        if where is not None:
            data["additional-conditions"] = [{"data-collection": names[0], "filter": where}]
    body = {"type": kind, "data": data, **({"id": signal_id} if signal_id else {})}
    _send_to_worker(url, f"/connectors/{urllib.parse.quote(name)}/signals", "POST", body, "the signal")
    click.echo(f"{kind} sent to connector {name}")


def _send_to_worker(url: str, path: str, method: str, body: dict, what: str) -> int:
    """A JSON request to a worker's REST API; its HTTP status, or exit 1 saying why it failed."""
    request = urllib.request.Request(f"{url.rstrip('/')}{path}", data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        answer = exc.read().decode(errors="replace")
        with contextlib.suppress(ValueError):
            answer = json.loads(answer)["message"]
        click.echo(f"{url} refused {what} ({exc.code}): {answer}", err=True)
        sys.exit(1)
    except (urllib.error.URLError, OSError) as exc:
        click.echo(f"cannot reach a worker at {url}: {getattr(exc, 'reason', exc)}", err=True)
        sys.exit(1)


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
