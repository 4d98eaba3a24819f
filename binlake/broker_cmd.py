"""`binlake broker`: logcore's broker, and, when its config has `schema.registry.listeners`, a schema
registry in the same process (as Redpanda serves one beside its broker). The registry is an ordinary
client of the broker: it reaches the log over the broker's PLAINTEXT listener and keeps its schemas in
`_schemas`, so instances on several brokers of a cluster elect one leader for writes as separate
`binlake schema-registry` processes do. The broker itself knows nothing of it (layers point down)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import click

from logcore.broker import Broker
from logcore.tools.broker_cmd import broker_options, build_broker, configure_logging, run, settings_from

log = logging.getLogger(__name__)

PREFIX = "schema.registry."
RETRY_S = 5.0


@dataclass(frozen=True)
class InBrokerRegistry:
    """The `schema.registry.*` settings of a broker's config."""

    host: str
    port: int
    topic: str
    group_id: str
    replication_factor: int | None
    users: dict[str, str] | None  # HTTP Basic authentication's, by name

    KEYS = {"listeners": "http://HOST:PORT the registry's REST API listens on",
            "topic": "the compacted topic of its schemas (default _schemas)",
            "group.id": "the group its instances elect a leader in (default schema-registry)",
            "topic.replication.factor": "of the topic when created (default: up to 3, as many as there are brokers)",
            "basic.auth.users": "a users file (`name: password[,role...]` a line): HTTP Basic authentication"}

    @classmethod
    def take_from(cls, values: dict[str, str]) -> "InBrokerRegistry | None":
        """Removes the `schema.registry.*` keys from `values` (they are not the broker's) and reads them."""
        given = {key[len(PREFIX):]: values.pop(key) for key in [k for k in values if k.startswith(PREFIX)]}
        if unknown := sorted(set(given) - set(cls.KEYS)):
            raise click.ClickException(f"unknown setting(s) {', '.join(PREFIX + k for k in unknown)}; the in-broker "
                                       "schema registry takes " + ", ".join(
                                           f"{PREFIX}{k} ({what})" for k, what in cls.KEYS.items()))
        if not given:
            return None
        if "listeners" not in given:
            raise click.ClickException(f"{PREFIX}* settings without {PREFIX}listeners: set it (http://HOST:PORT) "
                                       "to serve a schema registry in the broker")
        scheme, sep, address = given["listeners"].partition("://")
        host, colon, port = address.rpartition(":")
        if scheme == "https":
            raise click.ClickException(f"{PREFIX}listeners: the in-broker registry serves http only; for HTTPS run "
                                       "`binlake schema-registry --tls-cert ...` beside the broker (docs/registry.md)")
        if scheme != "http" or not sep or not colon or not port.isdigit() or "," in address:
            raise click.ClickException(f"{PREFIX}listeners: expected one http://HOST:PORT, got {given['listeners']!r}")
        factor = given.get("topic.replication.factor")
        if factor is not None and not (factor.isdigit() and int(factor) > 0):
            raise click.ClickException(f"{PREFIX}topic.replication.factor: expected a positive number, got {factor!r}")
        users = None
        if users_file := given.get("basic.auth.users"):
            from registry.listener import ListenerConfigError, load_users
            try:
                users = load_users(users_file)
            except ListenerConfigError as exc:
                raise click.ClickException(f"{PREFIX}basic.auth.users: {exc}") from None
        return cls(host or "0.0.0.0", int(port), given.get("topic", "_schemas"), given.get("group.id", "schema-registry"),
                   int(factor) if factor else None, users)

    async def serve(self, broker: Broker, stop: asyncio.Event) -> None:
        """Serve beside the broker until it stops; a failure (the topic cannot be created yet, the cluster
        is short of brokers) is logged and retried, never taken down with the broker."""
        from registry.election import Identity
        from registry.listener import basic_auth
        from registry.server import Listener, Settings, serve

        plaintext = [listener for listener in broker.listeners if listener.protocol == "PLAINTEXT"]
        if not plaintext:
            log.error("%slisteners: the in-broker registry reaches the log over a PLAINTEXT listener and this broker "
                      "has none; run `binlake schema-registry --kafka-security ...` instead", PREFIX)
            return
        bootstrap = "{}:{}".format(*broker.endpoint(plaintext[0]))
        advertised = self.host if self.host not in ("0.0.0.0", "::") else broker.advertised[0]
        settings = Settings(bootstrap, self.host, self.port, Identity(advertised, self.port, "http", True), self.topic,
                            self.replication_factor, self.group_id,
                            listener=Listener(None, None, basic_auth(self.users) if self.users else None))
        while not stop.is_set():
            try:
                await serve(settings, stop)
            except Exception as exc:  # (the registry's trouble is not the broker's)
                log.error("the in-broker schema registry stopped: %s; retrying in %.0f s", exc, RETRY_S)
                try:
                    await asyncio.wait_for(stop.wait(), RETRY_S)
                except TimeoutError:
                    pass


@click.command("broker")
@broker_options
def broker_command(data_dir: str, listen: str, broker_id: int | None, zookeeper: str | None, config_file: str | None,
                   override) -> None:
    """Run a Kafka-protocol broker in the foreground.

    With schema.registry.listeners in its config, it serves a schema registry too (docs/registry.md)."""
    configure_logging()
    values = settings_from(config_file, override, broker_id, zookeeper)
    registry = InBrokerRegistry.take_from(values)
    broker = build_broker(data_dir, listen, values)
    asyncio.run(run(broker, registry.serve if registry else None))
