"""`binlake reassign-partitions`: move partition replicas between brokers, like
kafka-reassign-partitions.sh, with its JSON files and its four actions.

    --generate --topics-to-move-json-file F --broker-list 0,1,2   propose a spread over those brokers
    --execute  --reassignment-json-file F                         start moving (prints the current
                                                                   assignment, to roll back with)
    --verify   --reassignment-json-file F                         say which moves are done
    --cancel   --reassignment-json-file F                         stop moves under way

It speaks AlterPartitionReassignments and ListPartitionReassignments (KIP-455) to the controller;
producers and consumers keep working while the data moves.
"""

from __future__ import annotations

import json

import click

from ..cluster.assignment import assign_replicas
from ..cluster.view import Node
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from .wire_admin import WireAdmin, bootstrap_option, check, command_config_option

TopicPartition = tuple[str, int]


@click.command("reassign-partitions")
@bootstrap_option
@command_config_option
@click.option("--generate", "action", flag_value="generate", help="propose an assignment over --broker-list")
@click.option("--execute", "action", flag_value="execute", help="start the reassignment in the file")
@click.option("--verify", "action", flag_value="verify", help="say whether the reassignment in the file is done")
@click.option("--cancel", "action", flag_value="cancel", help="cancel the reassignment in the file")
@click.option("--reassignment-json-file", type=click.File(),
              help='{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [ids]}]}')
@click.option("--topics-to-move-json-file", type=click.File(), help='{"version": 1, "topics": [{"topic": T}]}')
@click.option("--broker-list", help="broker ids to spread the topics over (with --generate), e.g. 0,1,2")
def reassign_partitions_command(bootstrap_server: str, security, action: str | None, reassignment_json_file,
                                topics_to_move_json_file, broker_list: str | None) -> None:
    """Move partition replicas between brokers (generate, execute, verify or cancel a plan)."""
    if action is None:
        raise click.UsageError("give one of --generate, --execute, --verify, --cancel")
    if action == "generate" and (topics_to_move_json_file is None or broker_list is None):
        raise click.UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    if action != "generate" and reassignment_json_file is None:
        raise click.UsageError(f"--{action} needs --reassignment-json-file")
    admin = WireAdmin(bootstrap_server, client_id="binlake-reassign-partitions", security=security)
    try:
        if action == "generate":
            _generate(admin, _topics_to_move(topics_to_move_json_file), _broker_ids(broker_list))
        else:
            plan = _plan(reassignment_json_file)
            {"execute": _execute, "verify": _verify, "cancel": _cancel}[action](admin, plan)
    finally:
        admin.close()


def _read_json(file, shape: str) -> dict:
    try:
        value = json.load(file)
    except ValueError as exc:
        raise click.BadParameter(f"{file.name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{file.name}: expected {shape}")
    return value


def _plan(file) -> dict[TopicPartition, list[int]]:
    shape = '{"partitions": [{"topic": T, "partition": P, "replicas": [ids]}]}'
    try:
        return {(p["topic"], int(p["partition"])): [int(b) for b in p["replicas"]]
                for p in _read_json(file, shape)["partitions"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise click.BadParameter(f"{file.name}: expected {shape} ({exc!r})") from None


def _topics_to_move(file) -> list[str]:
    shape = '{"topics": [{"topic": T}]}'
    try:
        return [t["topic"] for t in _read_json(file, shape)["topics"]]
    except (KeyError, TypeError) as exc:
        raise click.BadParameter(f"{file.name}: expected {shape} ({exc!r})") from None


def _broker_ids(value: str) -> list[int]:
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected broker ids separated by commas, got {value!r}",
                                 param_hint="--broker-list") from None


def _as_json(assignment: dict[TopicPartition, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}
        for (t, p), replicas in sorted(assignment.items())]})


def _current(admin: WireAdmin, topics: list[str]):
    """(the topics' current assignment, the live brokers as nodes, the controller's address)."""
    meta = admin.metadata(topics)
    assignment = {}
    for topic in meta.topics:
        check(topic.error_code, f"topic {topic.name}")
        for p in topic.partitions:
            assignment[(topic.name, p.partition_index)] = list(p.replica_nodes)
    nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in meta.brokers}
    if meta.controller_id not in nodes:
        raise click.ClickException("the cluster has no controller right now; try again")
    controller = nodes[meta.controller_id]
    return assignment, nodes, (controller.host, controller.port)


def _generate(admin: WireAdmin, topics: list[str], broker_ids: list[int]) -> None:
    current, nodes, _ = _current(admin, topics)
    if missing := sorted(set(broker_ids) - set(nodes)):
        raise click.ClickException(f"broker(s) {missing} are not alive; live brokers: {sorted(nodes)}")
    chosen = [nodes[b] for b in broker_ids]
    proposed = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        try:
            spread = assign_replicas(chosen, len(parts), len(current[(topic, parts[0])]))
        except BrokerError as exc:
            raise click.ClickException(f"{topic}: {exc.message}") from None
        proposed.update({(topic, p): spread[p] for p in parts})
    click.echo(f"Current partition replica assignment\n{_as_json(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{_as_json(proposed)}")


def _alter(admin: WireAdmin, controller: tuple[str, int], changes: dict[TopicPartition, list[int] | None],
           doing: str) -> None:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), replicas in sorted(changes.items()):
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    answer = admin.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {
        "timeout": 30000, "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}, controller)
    check(answer.error_code, doing, answer.error_message)
    failed = [f"{t.name}-{p.partition_index}: {p.error_message or ErrorCode(p.error_code).name.upper()}"
              for t in answer.responses for p in t.partitions if p.error_code != ErrorCode.none]
    if failed:
        raise click.ClickException(f"{doing} failed for:\n  " + "\n  ".join(failed))


def _execute(admin: WireAdmin, plan: dict[TopicPartition, list[int]]) -> None:
    current, _, controller = _current(admin, sorted({t for t, _ in plan}))
    if unknown := sorted(set(plan) - set(current)):
        raise click.ClickException(f"no such partition(s): {', '.join(f'{t}-{p}' for t, p in unknown)}")
    click.echo(f"Current partition replica assignment\n\n{_as_json({tp: current[tp] for tp in plan})}\n\n"
               f"Save this to use as the --reassignment-json-file option during rollback")
    _alter(admin, controller, dict(plan), "starting the reassignment")
    click.echo(f"Successfully started partition reassignments for {', '.join(f'{t}-{p}' for t, p in sorted(plan))}")


def _ongoing(admin: WireAdmin, controller: tuple[str, int]) -> set[TopicPartition]:
    listed = admin.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": None}, controller)
    check(listed.error_code, "listing the reassignments", listed.error_message)
    return {(t.name, p.partition_index) for t in listed.topics for p in t.partitions}


def _verify(admin: WireAdmin, plan: dict[TopicPartition, list[int]]) -> None:
    _, _, controller = _current(admin, sorted({t for t, _ in plan}))
    ongoing = _ongoing(admin, controller)
    current, _, _ = _current(admin, sorted({t for t, _ in plan}))  # (read after: a move ending between is complete)
    click.echo("Status of partition reassignment:")
    differ = False
    for (topic, partition), replicas in sorted(plan.items()):
        if (topic, partition) in ongoing:
            state = "is still in progress"
        elif current.get((topic, partition)) == replicas:
            state = "is completed"
        else:
            state, differ = f"failed: its replicas are {current.get((topic, partition))}, not {replicas}", True
        click.echo(f"Reassignment of partition {topic}-{partition} {state}.")
    if differ:
        raise SystemExit(1)


def _cancel(admin: WireAdmin, plan: dict[TopicPartition, list[int]]) -> None:
    _, _, controller = _current(admin, sorted({t for t, _ in plan}))
    cancelled = sorted(tp for tp in plan if tp in _ongoing(admin, controller))
    if cancelled:
        _alter(admin, controller, {tp: None for tp in cancelled}, "cancelling the reassignment")
    click.echo(f"Successfully cancelled partition reassignments for: {', '.join(f'{t}-{p}' for t, p in cancelled)}"
               if cancelled else "None of the partitions in the file is being reassigned.")
