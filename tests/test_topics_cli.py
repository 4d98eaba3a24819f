"""`binlake topics` end to end: the CLI in a subprocess against a real broker."""

import subprocess

from brokerproc import BINLAKE, ROOT


def topics(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BINLAKE, "topics", args[0], "--bootstrap-server", broker.address, *args[1:]],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def ok(broker, *args: str) -> str:
    done = topics(broker, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fails(broker, *args: str) -> str:
    done = topics(broker, *args)
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_create_list_describe_alter_delete(broker):
    assert ok(broker, "create", "--topic", "orders", "--partitions", "3", "--config", "retention.ms=86400000",
              "--config", "cleanup.policy=compact") == "Created topic orders.\n"
    assert ok(broker, "create", "--topic", "audit") == "Created topic audit.\n"
    assert ok(broker, "list") == "audit\norders\n"

    lines = ok(broker, "describe", "--topic", "orders").splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ")
    assert lines[0].endswith("\tPartitionCount: 3\tReplicationFactor: 1\t"
                             "Configs: cleanup.policy=compact,retention.ms=86400000")
    assert lines[1:] == [f"\tTopic: orders\tPartition: {i}\tLeader: 0\tReplicas: 0\tIsr: 0" for i in range(3)]

    assert ok(broker, "alter", "--topic", "orders", "--partitions", "5", "--config", "segment.bytes=1048576",
              "--delete-config", "retention.ms") == (
        "Topic orders now has 5 partitions.\nUpdated the configs of topic orders.\n")
    lines = ok(broker, "describe", "--topic", "orders").splitlines()
    assert "PartitionCount: 5" in lines[0]
    assert lines[0].endswith("Configs: cleanup.policy=compact,segment.bytes=1048576")
    assert len(lines) == 6

    described = ok(broker, "describe")  # every topic
    assert [line.split("\t")[0] for line in described.splitlines() if not line.startswith("\t")] == [
        "Topic: audit", "Topic: orders"]

    assert ok(broker, "delete", "--topic", "audit") == "Deleted topic audit.\n"
    assert ok(broker, "list") == "orders\n"


def test_create_errors_print_the_broker_message_and_exit_non_zero(broker):
    stderr = fails(broker, "create", "--topic", "wide", "--replication-factor", "4")
    assert "replication factor 4 larger than available brokers 1" in stderr
    assert "unknown topic config 'retention'" in fails(broker, "create", "--topic", "t", "--config", "retention=1")
    assert "illegal" in fails(broker, "create", "--topic", "no spaces")
    ok(broker, "create", "--topic", "t")
    assert "already exists" in fails(broker, "create", "--topic", "t")
    assert ok(broker, "create", "--topic", "t", "--if-not-exists") == ""


def test_refused_alter_changes_nothing_and_delete_if_exists(broker):
    ok(broker, "create", "--topic", "t", "--partitions", "2")
    # A refused change leaves the topic as it was, even when another change in the command was fine.
    stderr = fails(broker, "alter", "--topic", "t", "--partitions", "4", "--config", "segment.bytes=1")
    assert "invalid value '1' for configuration segment.bytes: must be at least 14" in stderr
    assert "has 2 partitions, more than the requested 1" in fails(broker, "alter", "--topic", "t", "--partitions", "1")
    assert "PartitionCount: 2" in ok(broker, "describe", "--topic", "t")
    assert "nothing to alter" in fails(broker, "alter", "--topic", "t")

    assert "Unknown topic or partition" in fails(broker, "describe", "--topic", "ghost")
    assert "Unknown topic or partition" in fails(broker, "delete", "--topic", "ghost")
    assert ok(broker, "delete", "--topic", "ghost", "--if-exists") == ""
