"""`binlake canal run CONF_DIR`: Canal's conf directory, each destination a binlake MySQL connector."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from connect import cli as connect_cli
from connect.config import ConfigError, ConnectorSpec
from connect.runtime import Worker

from . import conf as canal_conf
from . import ha
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
    Canal's routing names on kafka.bootstrap.servers. With canal.zkServers, only the destinations this server
    runs in Canal's high availability (the others stand by). Exits 2 on a refused key or a bad value, 1 when a
    destination failed or ZooKeeper did not answer."""
    connect_cli.setup_logging(log_level)
    try:
        conf = canal_conf.load(conf_dir)
        specs = [canal_conf.connector_spec(d, conf.server_mode) for d in conf.destinations]
        port = conf.server.get("canal.port") or "11111"
        if not port.isdigit():
            raise ConfigError(str(conf.directory), [("canal.port", f"{port!r} is not a port number")])
        server = None
        if conf.server_mode == "tcp":
            logs = {d.name: canal_conf.destination_log(d, s) for d, s in zip(conf.destinations, specs)}
            server = CanalServer(conf.server.get("canal.ip", ""), int(port), logs, conf.server.get("canal.user", ""),
                                 conf.server.get("canal.passwd", ""), standby=bool(conf.zk_servers))
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    report(conf)
    metrics_at = None
    if metrics_port := conf.server.get("canal.metrics.pull.port"):
        metrics_at = f"{conf.server.get('canal.ip') or '0.0.0.0'}:{metrics_port}"
    if not conf.zk_servers:
        sys.exit(0 if asyncio.run(_run(specs, server, metrics_at)) else 1)
    address = f"{conf.server.get('canal.register.ip') or conf.server.get('canal.ip') or ha.host_ip()}:{port}"
    try:
        ok = asyncio.run(_run_ha(specs, server, metrics_at, conf.zk_servers, address, conf.zk_session_timeout_s))
    except ha.ZooKeeperUnreachable as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    sys.exit(0 if ok else 1)


async def _run(specs, server: CanalServer | None, metrics_at: str | None) -> bool:
    """The destinations' connectors, and in tcp mode Canal's TCP server over their entry logs."""
    if server is not None:
        await server.start()
    try:
        return await connect_cli.run_connectors(specs, None, metrics_at)
    finally:
        if server is not None:
            await server.stop()


async def _run_ha(specs: list[ConnectorSpec], server: CanalServer | None, metrics_at: str | None, zk_servers: str,
                  address: str, session_timeout_s: float) -> bool:
    """Stand for every destination in ZooKeeper (canal/ha.py) until SIGTERM/SIGINT, running the connector of each
    destination this server holds, and serving its clients; False when a connector ended on its own (failed)."""
    stop = connect_cli.stop_on_signals()
    by_name = {spec.name: spec for spec in specs}
    workers: dict[str, Worker] = {}
    watches: set[asyncio.Task] = set()
    ended: asyncio.Queue[str] = asyncio.Queue()

    def watch(name: str, worker: Worker) -> None:
        """`name` goes to `ended` if its worker ends while it still runs here (not stopped by a release)."""
        def done(task: asyncio.Task) -> None:
            watches.discard(task)
            if workers.get(name) is worker:
                ended.put_nowait(name)
        task = asyncio.create_task(worker.wait())
        watches.add(task)
        task.add_done_callback(done)

    async def changed(name: str, running: bool) -> None:
        if running:
            worker = workers[name] = Worker([by_name[name]])
            worker.start()
            watch(name, worker)
            if server is not None:
                server.serve(name)
        else:
            if server is not None:
                await server.release(name)
            await workers.pop(name).stop()

    metrics_endpoint = await connect_cli.serve_task_metrics(
        lambda: [r for w in workers.values() for c in w.connectors.values() for r in c.runners], metrics_at)
    if server is not None:
        await server.start()
    monitor = ha.RunningMonitor(zk_servers, address, list(by_name), changed, session_timeout_s)
    failed = None
    try:
        await monitor.start()
        stopped, lost = asyncio.ensure_future(stop.wait()), asyncio.ensure_future(ended.get())
        await asyncio.wait({stopped, lost}, return_when=asyncio.FIRST_COMPLETED)
        failed = lost.result() if lost.done() else None
        stopped.cancel()
        lost.cancel()
        if failed is not None:
            log.error("%s: its connector ended; this server stops (a standby takes the destination over)", failed)
        else:
            log.info("stopping: tasks finish their current batch and commit")
    finally:
        await monitor.stop()
        if server is not None:
            await server.stop()
        for name in list(workers):
            await workers.pop(name).stop()
        await monitor.close()           # (last: the destinations move once this server has let them go)
        if metrics_endpoint is not None:
            await metrics_endpoint.cleanup()
    log.info("stopped")
    return failed is None


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
