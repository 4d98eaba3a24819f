"""`binlake broker-api-versions`: each broker's supported API versions, printed as
kafka-broker-api-versions.sh prints them (ApiVersions to every live broker)."""

from __future__ import annotations

import click
from kio.index import UnknownEntity

from ..protocol.codec import ApiKey, request_class
from .wire_admin import WireAdmin, bootstrap_option, check

API_VERSIONS_VERSION = 3


def highest_known(api_key: int, broker_max: int) -> int:
    """The newest version up to `broker_max` that this tool's protocol schemas (kio's) have: Kafka's
    tool prints that as `usable`; -1 when none."""
    for version in range(broker_max, -1, -1):
        try:
            request_class(api_key, version)
            return version
        except (UnknownEntity, ValueError):
            continue
    return -1


@click.command("broker-api-versions")
@bootstrap_option
def broker_api_versions_command(bootstrap_server: str) -> None:
    """Print the API versions each live broker supports."""
    admin = WireAdmin(bootstrap_server, client_id="binlake-broker-api-versions")
    try:
        for broker in sorted(admin.metadata([]).brokers, key=lambda b: b.node_id):
            answer = admin.call(ApiKey.API_VERSIONS, API_VERSIONS_VERSION,
                                {"client_software_name": "binlake", "client_software_version": "1"},
                                (broker.host, broker.port))
            check(answer.error_code, f"ApiVersions to broker {broker.node_id}")
            click.echo(f"{broker.host}:{broker.port} (id: {broker.node_id} rack: {broker.rack or 'null'} "
                       f"isFenced: false) -> (")
            lines = []
            for api in sorted(answer.api_keys, key=lambda a: a.api_key):
                name = "".join(part.capitalize() for part in ApiKey(api.api_key).name.split("_")) \
                    if api.api_key in ApiKey._value2member_map_ else f"UNKNOWN({api.api_key})"
                usable = highest_known(api.api_key, api.max_version)
                lines.append(f"\t{name}({api.api_key}): {api.min_version} to {api.max_version} [usable: {usable}]")
            click.echo(",\n".join(lines))
            click.echo(")")
    finally:
        admin.close()
