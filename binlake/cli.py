"""The `binlake` command: Kafka's tool set and the pipeline's runners as subcommands.

Subcommands load lazily: each one's module is imported only when it runs (or its own --help is
asked for), so `binlake topics ...` does not pay for importing the broker, the connector runtime
and the demo. `binlake --help` lists them from the short help kept here;
tests/test_cli.py checks it matches each command's own.
"""

from __future__ import annotations

import importlib

import click

# name -> ("module:attribute" of the click command, its one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("binlake.broker_cmd:broker_command", "Run a Kafka-protocol broker in the foreground."),
    "topics": ("logcore.tools.topics_cmd:topics_command", "Create, list, describe, alter and delete topics."),
    "cluster": ("logcore.tools.cluster_cmd:cluster_command", "List the live brokers and say which one is the controller."),
    "connect": ("connect.cli:connect_command",
                "Run source connectors: standalone (`run`, configured in YAML) or on distributed workers (`worker`)."),
    "canal": ("canal.cli:canal_command",
              "Run a Canal 1.1.x conf directory (canal.properties, <destination>/instance.properties) on binlake."),
    "schema-registry": ("registry.cli:schema_registry_command",
                        "Serve Confluent Schema Registry's REST API, the schemas kept in a compacted topic."),
    "demo": ("binlake.demo.command:demo_command", "Run the whole pipeline on this machine, no Docker needed."),
    "produce": ("logcore.tools.console:produce_command", "Send each line of standard input as one message."),
    "consume": ("logcore.tools.console:consume_command", "Print messages to standard output, one line each."),
    "broker-api-versions": ("logcore.tools.api_versions_cmd:broker_api_versions_command",
                            "Print the API versions each live broker supports."),
    "configs": ("logcore.tools.configs_cmd:configs_command", "Describe or alter the configs of topics, groups and brokers, and users' SCRAM credentials."),
    "console": ("binlake.console.command:console_command",
                "Serve a web console: brokers, topics, messages, groups, transactions, connectors, the sink."),
    "acls": ("logcore.tools.acls_cmd:acls_command", "Add, remove or list ACLs, as kafka-acls does."),
    "delete-records": ("logcore.tools.delete_records_cmd:delete_records_command",
                       "Delete the records before an offset in each listed partition (move its log start offset)."),
    "producer-perf-test": ("logcore.tools.perf_cmd:producer_perf_test_command",
                           "Measure produce throughput and latency (kafka-producer-perf-test)."),
    "consumer-perf-test": ("logcore.tools.perf_cmd:consumer_perf_test_command",
                           "Measure consume throughput (kafka-consumer-perf-test), from the start of the topic."),
    "verifiable-producer": ("logcore.tools.verifiable:verifiable_producer_command",
                            "Produce numbered messages and report each acknowledgement as a JSON line "
                            "(kafka-verifiable-producer)."),
    "verifiable-consumer": ("logcore.tools.verifiable:verifiable_consumer_command",
                            "Consume in a group and report assignments, records and commits as JSON lines "
                            "(kafka-verifiable-consumer)."),
    "mirror-maker": ("logcore.tools.mirror_maker:mirror_maker_command",
                     "Copy topics between clusters, exactly once (kafka-mirror-maker)."),
    "get-offsets": ("logcore.tools.get_offsets_cmd:get_offsets_command",
                    "Print topic:partition:offset for the offset at a time (latest by default)."),
    "dump-log": ("logcore.tools.dump_log:dump_log_command",
                 "Print the batches of segment .log files, or the entries of .index, .timeindex, .txnindex and "
                 ".snapshot files."),
    "groups": ("logcore.tools.groups_cmd:groups_command",
               "List, describe, reset offsets of and delete consumer groups."),
    "share-groups": ("logcore.tools.share_groups_cmd:share_groups_command",
                     "List, describe, reset the offsets of and delete share groups (kafka-share-groups)."),
    "transactions": ("logcore.tools.transactions_cmd:transactions_command", "List, describe and abort transactions."),
    "leader-election": ("logcore.tools.leader_election:leader_election_command",
                        "Elect partition leaders: the preferred replicas, or any live replica where none leads."),
    "log-dirs": ("logcore.tools.log_dirs:log_dirs_command",
                 "Describe the log directories of brokers: each partition's size and lag."),
    "reassign-partitions": ("logcore.tools.reassign_partitions:reassign_partitions_command",
                            "Move partition replicas between brokers (generate, execute, verify or cancel a plan)."),
    "replica-verification": ("logcore.tools.replica_verification:replica_verification_command",
                             "Check that the replicas of each partition are identical up to the high watermark."),
    "streams-application-reset": ("logcore.tools.streams_reset_cmd:streams_reset_command",
                                  "Make a stopped faust app start over: reset its input offsets, skip its "
                                  "intermediate topics to their end, delete its internal topics (changelogs, "
                                  "repartition topics)."),
    "streams": ("streams.worker:streams_command", "Run stream processors (faust-streaming apps) over change events, exactly once."),
    "sink": ("spark_sink.cli:sink_command", "Land change topics in Delta Lake or PostgreSQL tables with Spark, exactly once."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are `module:attr` references, imported on first use."""

    def __init__(self, *args, lazy: dict[str, tuple[str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            module, _, attr = self.lazy[name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the stored one-line helps, without importing any subcommand."""
        rows = [(name, self.lazy[name][1] if name in self.lazy
                 else self.commands[name].get_short_help_str(formatter.width))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=SUBCOMMANDS)
@click.version_option(package_name="binlake")
def main() -> None:
    """binlake: change data capture from MySQL/MariaDB onto a Kafka-compatible log."""


if __name__ == "__main__":
    main()
