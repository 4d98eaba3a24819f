"""`binlake leader-election`: elect partition leaders on request, like kafka-leader-election.sh.

A preferred election gives each partition back to its first replica (when that one is alive and in
sync); an unclean one elects a leader for a partition that has none, from outside the ISR if it must.
The controller carries them out (ElectLeaders, through confluent-kafka's AdminClient).
"""

from __future__ import annotations

import json

import click
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from .topics_cmd import _admin, _result, bootstrap_option


@click.command("leader-election")
@bootstrap_option
@click.option("--election-type", required=True, type=click.Choice(["preferred", "unclean"], case_sensitive=False))
@click.option("--topic", help="the topic of the partition to elect a leader for (with --partition)")
@click.option("--partition", type=int, help="the partition to elect a leader for (with --topic)")
@click.option("--all-topic-partitions", is_flag=True, help="every partition of every topic")
@click.option("--path-to-json-file", type=click.File(), help='{"partitions": [{"topic": T, "partition": P}, ...]}')
def leader_election_command(bootstrap_server: str, election_type: str, topic: str | None, partition: int | None,
                            all_topic_partitions: bool, path_to_json_file) -> None:
    """Elect partition leaders: the preferred replicas, or any live replica where none leads."""
    chosen = [bool(topic or partition is not None), all_topic_partitions, path_to_json_file is not None]
    if sum(chosen) != 1 or (chosen[0] and (topic is None or partition is None)):
        raise click.UsageError("give exactly one of: --topic with --partition, --all-topic-partitions, "
                               "--path-to-json-file")
    if path_to_json_file is not None:
        try:
            partitions = [TopicPartition(p["topic"], int(p["partition"]))
                          for p in json.load(path_to_json_file)["partitions"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(f"expected {{\"partitions\": [{{\"topic\": ..., \"partition\": ...}}]}}: {exc}",
                                     param_hint="--path-to-json-file") from None
    else:
        partitions = None if all_topic_partitions else [TopicPartition(topic, partition)]
    kind = ElectionType.PREFERRED if election_type.lower() == "preferred" else ElectionType.UNCLEAN
    admin = _admin(bootstrap_server)  # (held until the answer comes: a destroyed client cancels its futures)
    results = _result(admin.elect_leaders(kind, partitions), "leader election failed")
    name = kind.name
    elected, not_needed, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        where = f"{tp.topic}-{tp.partition}"
        if isinstance(error, KafkaException):  # (documented so; confluent-kafka 2.16 gives the KafkaError)
            error = error.args[0]
        if error is None:
            elected.append(where)
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(where)
        else:
            failed.append(f"{where}: {error.str()}")
    if elected:
        click.echo(f"Successfully completed leader election ({name}) for partitions {', '.join(elected)}")
    if not_needed:
        click.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if failed:
        click.echo(f"Error completing leader election ({name}) for partitions:\n  " + "\n  ".join(failed), err=True)
        raise SystemExit(1)
