"""`binlake broker-api-versions`: each broker's supported API versions, printed as
kafka-broker-api-versions.sh prints them (ApiVersions to every live broker)."""

from __future__ import annotations

import click

from ..protocol.client import newest_known_version
from ..protocol.codec import ApiKey
from .wire_admin import WireAdmin, bootstrap_option, check, command_config_option

API_VERSIONS_VERSION = 3


@click.command("broker-api-versions")
@bootstrap_option
@command_config_option
def broker_api_versions_command(bootstrap_server: str, security) -> None:
    """Print the API versions each live broker supports."""
    admin = WireAdmin(bootstrap_server, client_id="binlake-broker-api-versions", security=security)
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
                usable = newest_known_version(api.api_key, api.max_version)  # what Kafka's tool prints as usable
                lines.append(f"\t{name}({api.api_key}): {api.min_version} to {api.max_version} [usable: {usable}]")
            click.echo(",\n".join(lines))
            click.echo(")")
    finally:
        admin.close()
