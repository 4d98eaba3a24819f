"""The `binlake` command: Kafka's tool set and the pipeline's runners as subcommands."""

from __future__ import annotations

import click

from binlake.demo import demo_command
from connect.cli import connect_command
from logcore.tools.broker_cmd import broker_command
from logcore.tools.console import consume_command, produce_command
from logcore.tools.dump_log import dump_log_command
from logcore.tools.groups_cmd import groups_command
from logcore.tools.topics_cmd import topics_command
from logcore.tools.transactions_cmd import transactions_command


@click.group()
@click.version_option(package_name="binlake")
def main() -> None:
    """binlake: change data capture from MySQL/MariaDB onto a Kafka-compatible log."""


main.add_command(broker_command)
main.add_command(topics_command)
main.add_command(connect_command)
main.add_command(demo_command)
main.add_command(produce_command)
main.add_command(consume_command)
main.add_command(dump_log_command)
main.add_command(groups_command)
main.add_command(transactions_command)


if __name__ == "__main__":
    main()
