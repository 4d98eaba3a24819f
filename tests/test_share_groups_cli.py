"""`binlake share-groups` (kafka-share-groups) and `binlake consume --share-group` against a real
broker, run as commands: list, describe, reset offsets, delete offsets, delete."""

from __future__ import annotations

import re
import subprocess
import sys

from test_share_groups import CONFIG, setup_topic
from waiting import wait_for


def binlake(*args: str, ok: bool = True) -> str:
    result = subprocess.run([sys.executable, "-m", "binlake.cli", *args], capture_output=True, text=True, timeout=90)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result.stdout + result.stderr


def consume(broker, group: str, count: int) -> list[str]:
    out = binlake("consume", "--bootstrap-server", broker.address, "--topic", "jobs", "--share-group", group,
                  "--max-messages", str(count), "--timeout-ms", "30000")
    return [line for line in out.splitlines() if not line.startswith(("Processed", "%"))]


def start_offsets(broker, group: str) -> dict[int, tuple[str, str]]:
    out = binlake("share-groups", "--bootstrap-server", broker.address, "--describe", "--group", group)
    return {int(p): (start, lag) for p, start, lag in re.findall(rf"^{group}\s+jobs\s+(\d+)\s+(\S+)\s+(\S+)$", out, re.M)}


def test_consume_describe_reset_and_delete_a_share_group(broker_factory):
    broker = broker_factory(CONFIG)
    setup_topic(broker.address, "jobs", "crew", batches=2, per_batch=5)
    assert sorted(consume(broker, "crew", 10), key=int) == [str(i) for i in range(10)]
    assert binlake("share-groups", "--bootstrap-server", broker.address, "--list").split() == ["crew"]
    assert start_offsets(broker, "crew") == {0: ("10", "0")}

    plan = binlake("share-groups", "--bootstrap-server", broker.address, "--reset-offsets", "--group", "crew",
                   "--topic", "jobs", "--to-earliest")
    assert "add --execute" in plan and start_offsets(broker, "crew") == {0: ("10", "0")}  # (only a plan)
    binlake("share-groups", "--bootstrap-server", broker.address, "--reset-offsets", "--group", "crew",
            "--topic", "jobs", "--to-offset", "6", "--execute")
    assert start_offsets(broker, "crew") == {0: ("6", "4")}
    assert sorted(consume(broker, "crew", 4), key=int) == ["6", "7", "8", "9"]

    binlake("share-groups", "--bootstrap-server", broker.address, "--reset-offsets", "--group", "crew",
            "--topic", "jobs", "--to-earliest", "--execute")
    assert start_offsets(broker, "crew") == {0: ("0", "10")}
    binlake("share-groups", "--bootstrap-server", broker.address, "--delete-offsets", "--group", "crew", "--topic", "jobs")
    assert start_offsets(broker, "crew") == {}
    binlake("share-groups", "--bootstrap-server", broker.address, "--delete", "--group", "crew")
    assert binlake("share-groups", "--bootstrap-server", broker.address, "--list").split() == []


def test_a_deleted_topics_share_partitions_go_with_it(broker_factory):
    from confluent_kafka.admin import AdminClient
    broker = broker_factory(CONFIG)
    setup_topic(broker.address, "jobs", "crew", batches=1, per_batch=3)
    assert sorted(consume(broker, "crew", 3), key=int) == ["0", "1", "2"]
    assert start_offsets(broker, "crew") == {0: ("3", "0")}
    admin = AdminClient({"bootstrap.servers": broker.address})  # (kept alive until the result is in)
    admin.delete_topics(["jobs"])["jobs"].result(30)
    wait_for(lambda: "deleted 1 share-partition(s) of deleted topics jobs" in broker.log(),
             "the share-partition to go with its topic")  # (a tombstone in __share_group_state)
    assert start_offsets(broker, "crew") == {}
    broker.kill()
    broker.start()
    loads = [line for line in broker.log().splitlines() if "share-partition(s) from" in line]
    assert len(loads) == 1 and "loaded 0 share-partition(s)" in loads[0]  # (the restart's load: the first had no topic)
