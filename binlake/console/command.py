"""`binlake console --bootstrap-server HOST:PORT [--connect URL] [--sink URL] [--allow-writes]`."""

from __future__ import annotations

import asyncio
import signal

import click


@click.command("console")
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="brokers to connect to")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False),
              help="client properties for a secured cluster (as binlake acls takes them)")
@click.option("--connect", "connect_url", metavar="URL", help="a connect runtime's REST API (http://host:8083)")
@click.option("--sink", "sink_url", metavar="URL", help="the Spark sink's metrics (its --prometheus-listener URL)")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
              help="where the console serves its page (port 0: a free one, printed)")
@click.option("--allow-writes", is_flag=True, help="allow restarting connectors and resetting group offsets")
def console_command(bootstrap_server: str, command_config: str | None, connect_url: str | None,
                    sink_url: str | None, listen: str, allow_writes: bool) -> None:
    """Serve a web console: brokers, topics, messages, groups, transactions, connectors, the sink."""
    from logcore.tools.command_config import librdkafka_settings

    from .server import Settings, make_app
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {listen!r}", param_hint="--listen")
    settings = Settings(bootstrap_server, librdkafka_settings(command_config),
                        connect_url.rstrip("/") if connect_url else None, sink_url, allow_writes)
    asyncio.run(_serve(make_app(settings), host or "127.0.0.1", int(port), allow_writes))


async def _serve(app, host: str, port: int, writes: bool) -> None:
    from aiohttp import web
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    click.echo(f"binlake console on http://{bound_host}:{bound_port}/ ({'writes allowed' if writes else 'read-only'}; "
               f"Ctrl-C stops it)", err=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
