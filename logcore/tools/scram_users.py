"""`binlake configs --entity-type users`: kafka-configs' SCRAM credentials, over
AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554):

    binlake configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    binlake configs --bootstrap-server H:P --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    binlake configs --bootstrap-server H:P --describe --entity-type users [--entity-name alice]
"""

from __future__ import annotations

import click
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
DEFAULT_ITERATIONS = 4096  # kafka-configs' default


def _credential(mechanism: str, value: str) -> tuple[int, str]:
    """`iterations=N,password=P` (iterations optional) → (iterations, password)."""
    fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
    if "password" not in fields or set(fields) - {"iterations", "password"}:
        raise click.BadParameter(f"{mechanism} takes [password=...] or [iterations=N,password=...], got [{value}]",
                                 param_hint="--add-config")
    try:
        return int(fields.get("iterations", DEFAULT_ITERATIONS)), fields["password"]
    except ValueError:
        raise click.BadParameter(f"{mechanism}: iterations must be a number", param_hint="--add-config") from None


def _mechanism(name: str, option: str) -> ScramMechanism:
    if name not in MECHANISMS:
        raise click.BadParameter(f"users take {' or '.join(MECHANISMS)} configs, not {name}", param_hint=option)
    return MECHANISMS[name]


def alter(admin: AdminClient, user: str, add: dict[str, str], delete: list[str], timeout_s: float) -> None:
    changes = [UserScramCredentialUpsertion(user, ScramCredentialInfo(_mechanism(m, "--add-config"), iterations),
                                            password.encode())
               for m, value in add.items() for iterations, password in [_credential(m, value)]]
    changes += [UserScramCredentialDeletion(user, _mechanism(m, "--delete-config")) for m in delete]
    for future in admin.alter_user_scram_credentials(changes).values():
        future.result(timeout_s)
    click.echo(f"Completed updating config for user {user}.")


def describe(admin: AdminClient, user: str | None, timeout_s: float) -> None:
    futures = admin.describe_user_scram_credentials([user] if user else None)
    described = futures.result(timeout_s) if hasattr(futures, "result") else {
        name: future.result(timeout_s) for name, future in futures.items()}
    for name, description in sorted(described.items()):
        credentials = ", ".join(f"{ScramMechanism(i.mechanism).name.replace('_', '-')}=iterations={i.iterations}"
                                for i in description.scram_credential_infos)
        click.echo(f"SCRAM credential configs for user-principal '{name}' are {credentials}")
