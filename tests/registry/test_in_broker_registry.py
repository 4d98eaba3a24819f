"""`schema.registry.listeners` in a broker's config: the broker's own process serves the schema registry,
its schemas in the broker's `_schemas` topic; driven by confluent-kafka's SchemaRegistryClient, through
a SIGKILL of the broker. Wrong `schema.registry.*` settings stop the broker before it starts, saying why."""

from __future__ import annotations

import json
import re
import subprocess

import click
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from binlake.broker_cmd import InBrokerRegistry
from brokerproc import NO_REBALANCE_DELAY
from sandbox.process import free_port
from test_schema_registry import V1, V2
from testkit.brokerproc import BINLAKE, ROOT
from waiting import wait_for


def registered(url: str, subject: str, schema: str) -> int | None:
    """The id of `schema` registered under `subject`, or None while the registry is not serving yet."""
    try:
        return SchemaRegistryClient({"url": url}).register_schema(subject, Schema(schema, "AVRO"))
    except SchemaRegistryError as exc:
        assert exc.http_status_code >= 500, exc  # (leader not elected yet, the store catching up)
    except Exception as exc:  # (the listener not open yet)
        assert "Connect" in type(exc).__name__ or "connect" in str(exc).lower(), exc
    return None


def test_a_broker_serves_the_registry_in_process_and_its_schemas_survive_a_sigkill(broker_factory):
    url = f"http://127.0.0.1:{free_port()}"
    broker = broker_factory({**NO_REBALANCE_DELAY, "schema.registry.listeners": url})
    first = wait_for(lambda: registered(url, "items-value", V1), "the in-broker registry to serve")
    second = SchemaRegistryClient({"url": url}).register_schema("items-value", Schema(V2, "AVRO"))
    assert second > first
    admin = AdminClient({"bootstrap.servers": broker.address})
    [config] = [future.result(30) for future in admin.describe_configs([ConfigResource("topic", "_schemas")]).values()]
    assert config["cleanup.policy"].value == "compact"  # the schemas are in the broker's log

    broker.kill()
    broker.start()
    sr = SchemaRegistryClient({"url": url})
    wait_for(lambda: _versions(sr, "items-value") == [1, 2], "the registry back with both versions")
    assert json.loads(sr.get_schema(first).schema_str) == json.loads(V1)
    assert wait_for(lambda: registered(url, "items-value", V2), "a lookup after the restart") == second


def _versions(sr: SchemaRegistryClient, subject: str) -> list[int] | None:
    try:
        return sr.get_versions(subject)
    except Exception:
        return None


@pytest.mark.parametrize("settings, says", [
    ({"listeners": "https://127.0.0.1:1"}, "serves http only"),
    ({"listeners": "127.0.0.1:1"}, "expected one http://HOST:PORT"),
    ({"listeners": "http://127.0.0.1:1", "topik": "x"}, "unknown setting(s) schema.registry.topik"),
    ({"topic": "x"}, "without schema.registry.listeners"),
    ({"listeners": "http://127.0.0.1:1", "basic.auth.users": "/nonexistent"}, "cannot read the users file"),
    ({"listeners": "http://127.0.0.1:1", "topic.replication.factor": "0"}, "expected a positive number"),
])
def test_wrong_registry_settings_are_refused_saying_why(settings, says):
    with pytest.raises(click.ClickException, match=re.escape(says)):
        InBrokerRegistry.take_from({f"schema.registry.{k}": v for k, v in settings.items()})


def test_a_broker_with_a_wrong_registry_setting_stops_before_it_starts(tmp_path):
    done = subprocess.run([*BINLAKE, "broker", "--data-dir", str(tmp_path / "data"), "--listen",
                           f"127.0.0.1:{free_port()}", "--override", "schema.registry.listeners=https://127.0.0.1:1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "serves http only" in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()
