"""`binlake sink run CONFIG.yaml ...`: the Spark sink on this machine (local[*]), or on `--master`."""

from __future__ import annotations

import logging
from pathlib import Path

import click


@click.group()
def sink_command() -> None:
    """Land change topics in Delta Lake or PostgreSQL tables with Spark, exactly once."""


@sink_command.command("run")
@click.argument("config_paths", metavar="CONFIG.yaml...", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL")
@click.option("--prometheus-listener", metavar="HOST:PORT", help="Serve Prometheus metrics at /metrics here.")
@click.option("--conf", "settings", multiple=True, metavar="KEY=VALUE",
              callback=lambda _ctx, _param, values: _settings(values),
              help="A Spark setting for the application, as spark-submit's --conf (repeatable); docs/sink.md, "
                   "\"Latency\", names those that help small batches")
@click.option("--small-batches", is_flag=True, help="Spark's settings for a stream of small batches (expressions "
                                                    "interpreted, the JIT's first tier only; docs/sink.md, \"Latency\")")
@click.option("-v", "--verbose", is_flag=True, help="Spark's own logging defaults, with the start-up notices "
                                                    "the sink leaves out")
def run_command(config_paths: tuple[Path, ...], master: str, prometheus_listener: str | None, settings: dict[str, str],
                small_batches: bool, verbose: bool) -> None:
    """Run the sink until Ctrl-C (or, with trigger: available_now, until it has merged everything
    committed when it started). Several configs run as several streaming queries of one Spark
    application, each named binlake-sink-<file stem>."""
    from .config import SinkConfigError, load_all
    from .job import SinkError, query_names
    from .session import SMALL_BATCHES, MissingJars

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        configs = dict(zip(query_names([str(p) for p in config_paths]), load_all(list(config_paths))))
        from .driver_address import bind_driver
        from .job import run
        logging.getLogger(__name__).info("the Spark driver listens on %s", bind_driver(master) or "the address Spark picks")
        settings = {**SMALL_BATCHES, **settings} if small_batches else settings
        raise SystemExit(run(configs, master, prometheus_listener, verbose, settings))
    except (SinkConfigError, SinkError, MissingJars) as exc:
        raise click.ClickException(str(exc)) from None


def _settings(values: tuple[str, ...]) -> dict[str, str]:
    """--conf KEY=VALUE ... as a dict; BadParameter names the one without `=`."""
    for value in values:
        if value.find("=") < 1:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE (e.g. spark.driver.memory=2g)")
    return dict(value.split("=", 1) for value in values)
