"""`binlake broker`: run one broker in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import click

from ..broker import Broker
from ..config import BrokerConfig, is_broker_setting, read_properties
from ..protocol.errors import InvalidConfig

log = logging.getLogger(__name__)


def parse_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def broker_options(command):
    """The options of `binlake broker` (also taken by the top-level command that can add a schema registry)."""
    for option in reversed([
        click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="where the log lives"),
        click.option("--listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to listen on"),
        click.option("--broker-id", type=int, help="this broker's id  [default: broker.id from --config, else 0]"),
        click.option("--zookeeper", metavar="HOST:PORT[/chroot]",
                     help="join the cluster of this ZooKeeper ensemble (zookeeper.connect)  [default: run alone]"),
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                     help="server.properties-style key=value file"),
        click.option("--override", multiple=True, metavar="KEY=VALUE", help="set one broker config (repeatable)"),
    ]):
        command = option(command)
    return command


@click.command("broker")
@broker_options
def broker_command(data_dir: str, listen: str, broker_id: int | None, zookeeper: str | None, config_file: str | None,
                   override) -> None:
    """Run a Kafka-protocol broker in the foreground."""
    configure_logging()
    broker = build_broker(data_dir, listen, settings_from(config_file, override, broker_id, zookeeper))
    asyncio.run(run(broker))


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def settings_from(config_file: str | None, override, broker_id: int | None, zookeeper: str | None) -> dict[str, str]:
    """The broker's settings as given: the --config file, then each --override, then the two options."""
    try:
        values = read_properties(config_file) if config_file else {}
    except InvalidConfig as exc:
        raise click.ClickException(str(exc)) from None
    for item in override:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--override")
        values[key.strip()] = value.strip()
    if broker_id is not None:
        values["broker.id"] = str(broker_id)
    if zookeeper is not None:
        values["zookeeper.connect"] = zookeeper
    return values


def build_broker(data_dir: str, listen: str, values: dict[str, str]) -> Broker:
    host, port = parse_listen(listen)
    try:
        for key in sorted(k for k in values if not is_broker_setting(k)):  # (as Kafka: a warning, not a refusal)
            log.warning("broker setting %r is not one binlake knows: it has no effect (a typo, or a Kafka setting "
                        "binlake does not have)", key)
            del values[key]
        return Broker(data_dir, host, port, BrokerConfig(values))
    except InvalidConfig as exc:  # (listeners, TLS files, SASL users: checked as the broker is built)
        raise click.ClickException(str(exc)) from None


Companion = Callable[[Broker, asyncio.Event], Awaitable[None]]
"""Work that runs in the broker's process once it serves, until the event is set (it stops)."""


async def run(broker: Broker, companion: Companion | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {broker.server.host}:{broker.server.port}: {exc.strerror}") from None
    print(f"binlake broker {broker.broker_id} ready on {broker.address}", flush=True)
    beside = asyncio.create_task(companion(broker, stop)) if companion else None
    await stop.wait()
    if beside is not None:
        await asyncio.gather(beside, return_exceptions=True)
    await broker.stop()
