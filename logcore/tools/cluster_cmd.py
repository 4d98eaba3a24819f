"""`binlake cluster`: the live brokers and the controller, as DescribeCluster reports them (what
Kafka's `kafka-broker-api-versions` / `kafka-cluster` tools show)."""

from __future__ import annotations

import click

from .topics_cmd import TIMEOUT_S, _admin, _result, bootstrap_option


@click.command("cluster")
@bootstrap_option
def cluster_command(bootstrap_server: str) -> None:
    """List the live brokers and say which one is the controller."""
    admin = _admin(bootstrap_server)  # (held: a destroyed client cancels its futures)
    described = _result(admin.describe_cluster(request_timeout=TIMEOUT_S), "cannot describe the cluster")
    controller = described.controller.id if described.controller is not None else "none"
    click.echo(f"ClusterId: {described.cluster_id}\tController: {controller}")
    for node in sorted(described.nodes, key=lambda n: n.id):
        rack = f"\tRack: {node.rack}" if node.rack else ""
        click.echo(f"\tBroker: {node.id}\tAddress: {node.host}:{node.port}{rack}")
