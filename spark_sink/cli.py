"""`binlake sink run CONFIG.yaml`: the Spark sink on this machine (local[*]), or on `--master`."""

from __future__ import annotations

import logging
from pathlib import Path

import click


@click.group()
def sink_command() -> None:
    """Land change topics in Delta Lake or PostgreSQL tables with Spark, exactly once."""


@sink_command.command("run")
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL")
def run_command(config_path: Path, master: str) -> None:
    """Run the sink until Ctrl-C (or, with trigger: available_now, until it has merged everything
    committed when it started)."""
    from .config import SinkConfigError, load
    from .session import MissingJars

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        config = load(config_path)
        from .job import run
        raise SystemExit(run(config, master))
    except (SinkConfigError, MissingJars) as exc:
        raise click.ClickException(str(exc)) from None
