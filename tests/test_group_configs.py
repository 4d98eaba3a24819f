"""Group configs (ConfigResource type GROUP, 32) and the empty-users DescribeUserScramCredentials,
through confluent-kafka's AdminClient; `binlake configs --entity-type groups` and `binlake groups
list --type`."""

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from binlake.cli import main
from brokerproc import NO_REBALANCE_DELAY
from waiting import wait_for

TIMEOUT = 15
GROUP_CONFIG, DEFAULT_CONFIG, STATIC_BROKER_CONFIG = 8, 5, 4


def group_resource(group: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> ConfigResource:
    return ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])


def alter(admin: AdminClient, group: str, *entries, validate_only: bool = False) -> None:
    resource = group_resource(group, *entries)
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(TIMEOUT)


def describe(admin: AdminClient, group: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.GROUP, group)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def refusal(admin: AdminClient, group: str, *entries) -> str:
    with pytest.raises(KafkaException) as info:
        alter(admin, group, *entries)
    return info.value.args[0].str()


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


def test_group_configs_are_described_altered_validated_and_kept_across_a_restart(broker_factory):
    broker = broker_factory({"group.consumer.min.session.timeout.ms": "6000",
                             "group.consumer.heartbeat.interval.ms": "3000"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    before = describe(admin, "g1")  # (the group need not exist)
    assert before["consumer.session.timeout.ms"].value == "45000"
    assert before["consumer.session.timeout.ms"].source == DEFAULT_CONFIG
    assert before["consumer.heartbeat.interval.ms"].value == "3000"  # the broker's setting
    assert before["consumer.heartbeat.interval.ms"].source == STATIC_BROKER_CONFIG
    assert before["share.auto.offset.reset"].value == "latest"

    alter(admin, "g1", ("consumer.session.timeout.ms", "8000", SET), ("consumer.heartbeat.interval.ms", "5000", SET),
          ("share.auto.offset.reset", "earliest", SET), ("share.record.lock.duration.ms", "20000", SET))
    after = describe(admin, "g1")
    assert {k: (after[k].value, after[k].source) for k in ("consumer.session.timeout.ms",
                                                            "consumer.heartbeat.interval.ms",
                                                            "share.auto.offset.reset",
                                                            "share.record.lock.duration.ms")} == {
        "consumer.session.timeout.ms": ("8000", GROUP_CONFIG), "consumer.heartbeat.interval.ms": ("5000", GROUP_CONFIG),
        "share.auto.offset.reset": ("earliest", GROUP_CONFIG), "share.record.lock.duration.ms": ("20000", GROUP_CONFIG)}
    assert describe(admin, "g2")["consumer.session.timeout.ms"].value == "45000"  # another group: untouched

    assert "outside the broker's bounds [6000, 60000]" in refusal(admin, "g1", ("consumer.session.timeout.ms", "5000", SET))
    assert "must be less than consumer.session.timeout.ms" in refusal(
        admin, "g1", ("consumer.heartbeat.interval.ms", "9000", SET))
    assert "unknown group config 'consumer.bogus.ms'" in refusal(admin, "g1", ("consumer.bogus.ms", "1", SET))
    assert "by_duration" in refusal(admin, "g1", ("share.auto.offset.reset", "sometimes", SET))
    alter(admin, "g1", ("share.auto.offset.reset", "by_duration:PT1H", SET), validate_only=True)
    assert describe(admin, "g1")["share.auto.offset.reset"].value == "earliest"  # validate_only changed nothing

    broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    assert describe(admin, "g1")["consumer.session.timeout.ms"].value == "8000"
    alter(admin, "g1", ("consumer.session.timeout.ms", None, DELETE), ("consumer.heartbeat.interval.ms", None, DELETE))
    assert describe(admin, "g1")["consumer.session.timeout.ms"].value == "45000"


def test_describe_user_scram_credentials_with_no_users_named_lists_every_user(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
               for user in ("alice", "bob")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(TIMEOUT)
    described = admin.describe_user_scram_credentials().result(TIMEOUT)  # (sends an empty users array)
    assert sorted(described) == ["alice", "bob"]
    assert described["alice"].scram_credential_infos[0].iterations == 4096


def test_binlake_configs_and_groups_tools_handle_groups(broker_factory):
    broker = broker_factory(config=NO_REBALANCE_DELAY)  # (the classic group: one member)
    def run(*args: str) -> str:
        result = CliRunner().invoke(main, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    run("configs", "--bootstrap-server", broker.address, "--alter", "--entity-type", "groups", "--entity-name", "g9",
        "--add-config", "share.auto.offset.reset=earliest")
    out = run("configs", "--bootstrap-server", broker.address, "--describe", "--entity-type", "groups",
              "--entity-name", "g9")
    assert out.splitlines()[1].startswith("  share.auto.offset.reset=earliest ")
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("tg", 1, 1)])["tg"].result(15)
    consumers = []
    for group, protocol in (("g-modern", "consumer"), ("g-classic", "classic")):
        c = Consumer({"bootstrap.servers": broker.address, "group.id": group, "group.protocol": protocol})
        c.subscribe(["tg"])
        consumers.append(c)
    wait_for(lambda: all(c.poll(0.05) is None and c.assignment() for c in consumers), "both groups to form")
    rows = [line.split() for line in run("groups", "list", "--bootstrap-server", broker.address, "--type").splitlines()]
    assert ["g-classic", "CLASSIC"] in rows and ["g-modern", "CONSUMER"] in rows
    for c in consumers:
        c.close()
