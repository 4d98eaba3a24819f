"""The pipeline against a secured broker with ACLs, configured from its YAML only: the mysql
connector writes over SASL_SSL with a SCRAM user allowed its own topics and transactional ids and
nothing else, the Spark sink reads over SASL_SSL into Delta, and the Delta table equals MySQL. (The
test reads its checks over the broker's PLAINTEXT listener, whose User:ANONYMOUS is a super user
here.)"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   NewTopic, ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)
from sql_fixtures import by_default_on
from e2e_harness import mysql_config, read_committed, write_config
from sink_harness import delta_table, mysql_table, run_sink


def wait_for_events(broker, topic: str, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            events = asyncio.run(read_committed(broker.address("PLAINTEXT"), [topic]))
        except AssertionError:  # (the topic is not there yet)
            events = []
        if len(events) >= count:
            return
        assert time.monotonic() < deadline, f"only {len(events)} of {count} events on {topic}"
        time.sleep(0.5)


@by_default_on("mariadb")
def test_the_connector_and_the_sink_reach_a_sasl_ssl_listener_from_their_yaml(secure_broker, certs, server,
                                                                             connector, spark, tmp_path):
    broker = secure_broker(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                              "super.users": "User:ANONYMOUS"})
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    grants = [(ResourceType.TOPIC, "secure"), (ResourceType.TOPIC, "binlake-offsets"),  # changes, history, offsets
              (ResourceType.TRANSACTIONAL_ID, "binlake-connect-secure-"),
              (ResourceType.GROUP, "binlake-sink-schemas")]  # (librdkafka finds the coordinator of any group.id)
    for future in admin.create_acls([AclBinding(resource_type, name, ResourcePatternType.PREFIXED, "User:pipeline",
                                                "*", AclOperation.ALL, AclPermissionType.ALLOW)
                                     for resource_type, name in grants]).values():
        future.result(30)
    upsert = UserScramCredentialUpsertion("pipeline", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"pipeline-secret")
    admin.alter_user_scram_credentials([upsert])["pipeline"].result(30)
    security = {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "username": "pipeline",
                "password": "pipeline-secret", "ca_file": str(certs / "ca.pem")}
    secured = SimpleNamespace(address=broker.address("SASL_SSL"))

    db = server.new_database()
    server.sql(f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(8,2))",
                f"INSERT INTO {db}.items VALUES (1, 'mug', 12.50), (2, 'tee', 19.90)")
    connector(write_config(tmp_path / "secure.yaml", **mysql_config("secure", secured, server, [rf"{db}\..*"],
                                                                    security=security)))
    topic = f"secure.{db}.items"
    wait_for_events(broker, topic, 2)  # the snapshot's reads
    server.sql(f"UPDATE {db}.items SET price = 14.00 WHERE id = 1", f"DELETE FROM {db}.items WHERE id = 2",
                f"INSERT INTO {db}.items VALUES (3, 'cap', 9.00)")
    wait_for_events(broker, topic, 6)  # then the update, the delete and its tombstone, the insert

    delta_root = tmp_path / "delta"
    run_sink(spark, {"bootstrap_servers": broker.address("SASL_SSL"), "security": security, "topics": [topic],
                     "format": "debezium", "schema_topic": "secure", "checkpoint": str(tmp_path / "checkpoint"),
                     "trigger": "available_now", "target": {"delta": {"path": str(delta_root)}}})
    columns, key, expected = mysql_table(server, db, "items")
    assert delta_table(spark, f"{delta_root}/{db}/items", key, columns) == expected
    assert "failed SASL authentication" not in broker.process.log()
    # the ACLs held: the pipeline's user reaches no topic beyond its own
    as_pipeline = AdminClient({"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "pipeline",
                         "sasl.password": "pipeline-secret", "ssl.ca.location": str(certs / "ca.pem")})
    admin.create_topics([NewTopic("elsewhere", 1, 1)])["elsewhere"].result(30)
    visible = set(as_pipeline.list_topics(timeout=30).topics)
    assert topic in visible and "elsewhere" not in visible, visible
