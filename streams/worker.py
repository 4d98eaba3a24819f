"""`binlake streams worker MODULE[:APP] [--config FILE.yaml] [faust worker options]`: run a plain
faust app as a worker, with binlake's exactly-once pieces installed when the app asks for
exactly_once (streams/exactly_once.py), a consumer that hands messages to the streams at less cost
otherwise (streams/consumer.py), and the change-event codecs registered (streams/codecs.py).
The app imports nothing of binlake. `--config` points it at another cluster, a secured one too,
with the keys the connector and the sink use:

    bootstrap_servers: kafka-1:9093,kafka-2:9093   # (optional) instead of the app's broker
    security:                                      # common/kafka_security.py
      protocol: SASL_SSL
      sasl_mechanism: SCRAM-SHA-256
      username: processors
      password: ${PROCESSORS_PASSWORD}
      ca_file: /etc/binlake/ca.pem
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback
import warnings
from pathlib import Path

import click
from pydantic import BaseModel, ConfigDict, ValidationError

from common.kafka_security import KafkaSecurity

from .settings import app_setting


def load_app(reference: str):
    """The app of MODULE[:APP]; MODULE is a module name (found from the current directory too) or a
    file path such as examples/shop_processors(.py)."""
    module_name, _, attribute = reference.partition(":")
    if "/" in module_name or module_name.endswith(".py"):
        path = Path(module_name)
        sys.path.insert(0, str(path.parent.resolve()))
        module_name = path.name.removesuffix(".py")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.ClickException(f"cannot import {module_name!r}: {exc}") from None
    app = getattr(module, attribute or "app", None)
    if app is None or not hasattr(app, "main"):
        raise click.ClickException(f"{module_name} has no faust app named {attribute or 'app'!r}; "
                                   f"write MODULE:NAME for another name")
    return app


class WorkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str | None = None
    security: KafkaSecurity = KafkaSecurity()


def read_config(path: str) -> WorkerConfig:
    """The file's settings, `${VAR}` references replaced as in connector configs."""
    from common.yamlfile import YamlError, load
    from connect.config import interpolate
    try:
        problems: list[tuple[str, str]] = []
        data = interpolate(load(path) or {}, os.environ, problems)
        if problems:
            raise ValueError("; ".join(f"{where}: {what}" for where, what in problems))
        return WorkerConfig.model_validate(data)
    except ValidationError as exc:
        raise click.ClickException(f"{path}: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    except (YamlError, ValueError, OSError) as exc:
        raise click.ClickException(f"{path}: {exc}") from None


def configure(app, config: WorkerConfig) -> None:
    """Point the app at the config's brokers, with its security settings."""
    if config.bootstrap_servers:
        app.conf.broker = [f"kafka://{address.strip()}" for address in config.bootstrap_servers.split(",")]
    if (credentials := config.security.faust()) is not None:
        app.conf.broker_credentials = credentials


@click.group()
def streams_command() -> None:
    """Run stream processors (faust-streaming apps) over change events, exactly once."""


@streams_command.command("worker", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("reference", metavar="MODULE[:APP]")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), metavar="FILE.yaml",
              help="bootstrap_servers and a security: block (SASL, TLS) for the app's brokers")
@click.option("--prometheus-listener", metavar="HOST:PORT", help="Serve Prometheus metrics at /metrics here.")
@click.option("-v", "--verbose", is_flag=True, help="faust's own output: its banner, and every service's and "
                                                    "aiokafka's lines at the -l level")
@click.pass_context
def worker_command(ctx: click.Context, reference: str, config_path: str | None,
                   prometheus_listener: str | None, verbose: bool) -> None:
    """Start a worker of the faust app MODULE:APP; other options go to faust's worker (e.g. -l debug)."""
    from faust.exceptions import AlreadyConfiguredWarning

    from . import consumer, quiet
    from .agent_errors import AgentErrors, BadAgentErrorsSetting
    from .codecs import register_codecs
    from .exactly_once import NotExactlyOnce, install

    register_codecs()
    app = load_app(reference)
    if config_path is not None:  # (before install: the transport it makes reads the brokers)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AlreadyConfiguredWarning)
            configure(app, read_config(config_path))
    if prometheus_listener is not None:
        serve_metrics(app, prometheus_listener)
    try:
        agent_errors = AgentErrors.of(app)
        if not install(app, agent_errors):
            consumer.install(app, agent_errors)
    except (NotExactlyOnce, BadAgentErrorsSetting) as exc:
        raise click.ClickException(str(exc)) from None
    agent_errors.supervise()
    with warnings.catch_warnings():  # (faust warns of any late setting; these are read when the worker starts)
        warnings.simplefilter("ignore", AlreadyConfiguredWarning)
        app.conf.Worker = level_restored_after_start(app.conf.Worker)
        if not verbose:
            quiet.quieten(app)
            app.conf.Worker = quiet.announcing(app.conf.Worker)
        defaults_unless_set(app)
    sys.argv = quiet.faust_argv(reference, ctx.args, verbose)
    run_to_exit(app.main, agent_errors)


def serve_metrics(app, listener: str) -> None:
    """faust's own Prometheus sensor (events in and out, per topic and stream, commit latency, send
    latency, rebalances) as binlake_streams_*, served from a thread: no faust web server needed."""
    from faust.sensors.prometheus import FaustMetrics, PrometheusMonitor
    from prometheus_client import CollectorRegistry

    from common.prometheus import serve_in_thread
    registry = CollectorRegistry()
    app.monitor = PrometheusMonitor(metrics=FaustMetrics.create(registry, "binlake_streams"))
    click.echo(f"Prometheus metrics on {serve_in_thread(registry, listener)}", err=True)  # (before faust's logging)


# The worker's defaults where faust's cost events/s, each kept unless the app sets it (by any name):
WORKER_DEFAULTS = {
    # faust's producer lingers 0 ms, so an agent that sends one output per event makes one produce
    # request per event (under exactly_once one per event and partition): the worker's time goes to
    # requests rather than events. 5 ms is the Java producer's linger.ms default since Kafka 4.0
    # (KIP-1030): about 1.5x the events/s at-least-once and 2x exactly-once, for at most 5 ms more
    # per output.
    ("producer_linger", "producer_linger_ms"): 0.005,
    # faust fetches 1 MiB per partition, and aiokafka fetches a partition again only once what it
    # fetched is handed out: a worker that reads few partitions waits on its fetches (one partition
    # of change events: 5,000 events/s against 8,500 with 4 MiB; six: no change). The response
    # stays bounded by aiokafka's fetch_max_bytes (50 MiB).
    ("consumer_max_fetch_size",): 4 * 1024 * 1024,
}


def defaults_unless_set(app) -> None:
    """Apply WORKER_DEFAULTS to what the app leaves unset in its options, its config source and the
    environment (bench/streams.py measures both; the fetch size with --partitions 1)."""
    for names, value in WORKER_DEFAULTS.items():
        if app_setting(app, *names) is None:
            setattr(app.conf, names[0], value)


def level_restored_after_start(worker_class: type) -> type:
    """faust's worker sets the root logger to DEBUG so its start-up spinner turns on every record, and
    leaves it there: every debug call of faust, mode and aiokafka then builds a record the handlers
    drop, a tenth of a busy worker's CPU (bench/streams.py --profile). Once the worker has started,
    the root logger goes back to the level asked for (-l)."""
    from mode.utils.logging import level_number

    class Worker(worker_class):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            logging.root.setLevel(level_number(self.loglevel or logging.WARNING))

    return Worker


def run_to_exit(main, agent_errors) -> None:
    """Run faust's worker main and end the process with its exit status. When a crash interrupts
    faust's shutdown (a fenced worker's last commit failing, say), faust leaves its consumer thread
    running and the interpreter would wait for that thread forever: the worker has stopped, so the
    process ends here instead. A worker stopped by an agent's failure (logged when it happened) ends
    with status 1 and the failure in one line."""
    status = 0
    try:
        main()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        status = 1
    if agent_errors.failure is not None:
        print(f"worker stopped: {agent_errors.failure.summary()}", file=sys.stderr)
        status = status or 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
