"""`binlake get-offsets` and `binlake broker-api-versions`, Kafka's kafka-get-offsets.sh and
kafka-broker-api-versions.sh, against a real broker."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokerproc import NO_REBALANCE_DELAY, ROOT


@pytest.fixture
def broker(broker_factory):
    return broker_factory(NO_REBALANCE_DELAY)  # (the consumer tools' groups: one member each)


def binlake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlake.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_get_offsets_at_each_kind_of_time(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
    producer = Producer({"bootstrap.servers": broker.address})
    for i in range(5):
        producer.produce("t", b"x", partition=0, timestamp=1000 + i * 10)
    producer.flush(30)

    def offsets(*args: str) -> list[str]:
        done = binlake("get-offsets", "--bootstrap-server", broker.address, "--topic", "t", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert offsets() == ["t:0:5", "t:1:0"]
    assert offsets("--time", "earliest") == offsets("--time", "-2") == ["t:0:0", "t:1:0"]
    assert offsets("--time", "1015", "--partitions", "0") == ["t:0:2"]  # the first record at or after it
    assert offsets("--time", "max-timestamp", "--partitions", "0") == ["t:0:4"]
    assert offsets("--time", "-4") == ["t:0:0", "t:1:0"]  # earliest local: the earliest, no tiered storage
    refused = binlake("get-offsets", "--bootstrap-server", broker.address, "--time", "yesterday")
    assert refused.returncode == 2 and "expected a timestamp in ms" in refused.stderr


def test_broker_api_versions_prints_kafkas_layout(broker):
    done = binlake("broker-api-versions", "--bootstrap-server", broker.address)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{broker.address} (id: 0 rack: null isFenced: false) -> (" and lines[-1] == ")"
    versions = dict(re.findall(r"^\t(\w+)\(\d+\): (\d+ to \d+) \[usable: \d+\],?$", done.stdout, re.M))
    assert len(versions) == len(lines) - 2
    assert versions["Produce"] == "3 to 12" and versions["DescribeTopicPartitions"] == "0 to 0"


def test_delete_records_moves_log_starts_as_the_json_file_says(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
    producer = Producer({"bootstrap.servers": broker.address})
    for partition in (0, 1):
        for _ in range(5):
            producer.produce("t", b"x", partition=partition)
    producer.flush(30)
    plan = tmp_path / "plan.json"
    plan.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 3},'
                    ' {"topic": "t", "partition": 1, "offset": -1}], "version": 1}')
    done = binlake("delete-records", "--bootstrap-server", broker.address, "--offset-json-file", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "partition: t-0\tlow_watermark: 3" in done.stdout and "partition: t-1\tlow_watermark: 5" in done.stdout
    earliest = binlake("get-offsets", "--bootstrap-server", broker.address, "--topic", "t", "--time", "earliest")
    assert earliest.stdout.split() == ["t:0:3", "t:1:5"]
    plan.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 99}], "version": 1}')
    beyond = binlake("delete-records", "--bootstrap-server", broker.address, "--offset-json-file", str(plan))
    assert beyond.returncode == 1 and "partition: t-0\terror:" in beyond.stdout
    plan.write_text('{"partitions": [{"topic": "t"}]}')
    malformed = binlake("delete-records", "--bootstrap-server", broker.address, "--offset-json-file", str(plan))
    assert malformed.returncode == 1 and "expected {" in malformed.stderr


def test_configs_describes_and_alters_topics_and_refuses_broker_changes(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("t", 1, 1, config={"cleanup.policy": "compact"})])["t"].result(30)

    def configs(*args: str) -> subprocess.CompletedProcess:
        return binlake("configs", "--bootstrap-server", broker.address, *args)

    described = configs("--entity-type", "topics", "--entity-name", "t", "--describe")
    assert described.stdout.splitlines() == [
        "Dynamic configs for topic t are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}"]
    altered = configs("--entity-type", "topics", "--entity-name", "t", "--alter",
                      "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert altered.returncode == 0 and altered.stdout == "Completed updating config for topic t.\n"
    every = configs("--entity-type", "topics", "--describe").stdout
    assert "  cleanup.policy=compact,delete " in every and "  retention.ms=1000 " in every
    assert configs("--entity-type", "topics", "--entity-name", "t", "--alter",
                   "--delete-config", "retention.ms").returncode == 0
    assert "retention.ms" not in configs("--entity-type", "topics", "--entity-name", "t", "--describe").stdout
    assert "segment.bytes=1073741824" in configs("--entity-type", "topics", "--entity-name", "t", "--describe",
                                                 "--all").stdout
    unknown = configs("--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "bogus=1")
    assert unknown.returncode == 1 and "unknown topic config 'bogus'" in unknown.stderr
    static = configs("--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config", "log.retention.ms=5")
    assert static.returncode == 1 and "cannot be changed at runtime" in static.stderr


def test_perf_tests_print_kafkas_lines(broker):
    produced = binlake("producer-perf-test", "--bootstrap-server", broker.address, "--topic", "perf",
                       "--num-records", "20000", "--record-size", "100", "--throughput", "-1",
                       "--producer-props", "acks=1", "linger.ms=5")
    assert produced.returncode == 0, produced.stderr
    assert re.fullmatch(r"20000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                        r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.",
                        produced.stdout.splitlines()[-1]), produced.stdout
    paced_start = time.monotonic()
    paced = binlake("producer-perf-test", "--bootstrap-server", broker.address, "--topic", "perf",
                    "--num-records", "1000", "--throughput", "1000")
    assert paced.returncode == 0 and time.monotonic() - paced_start >= 0.9  # 1,000 records at 1,000/s
    consumed = binlake("consumer-perf-test", "--bootstrap-server", broker.address, "--topic", "perf",
                       "--messages", "21000")
    assert consumed.returncode == 0, consumed.stderr
    header, values = consumed.stdout.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB")
    fields = values.split(", ")
    assert fields[4] == "21000" and abs(float(fields[2]) - 21000 * 100 / 1024 / 1024) < 0.01


def events(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_verifiable_producer_and_consumer_report_every_message_once(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("v", 3, 1)])["v"].result(30)
    produced = binlake("verifiable-producer", "--bootstrap-server", broker.address, "--topic", "v",
                       "--max-messages", "600", "--acks", "all", "--repeating-keys", "7",
                       "--transactional-id", "vp", "--transaction-size", "50")
    assert produced.returncode == 0, produced.stderr
    lines = events(produced.stdout)
    assert lines[0]["name"] == "startup_complete" and lines[-2]["name"] == "shutdown_complete"
    assert {k: lines[-1][k] for k in ("name", "sent", "acked")} == {"name": "tool_data", "sent": 600, "acked": 600}
    acked = [e for e in lines if e["name"] == "producer_send_success"]
    assert sorted(int(e["value"]) for e in acked) == list(range(600))
    consumed = binlake("verifiable-consumer", "--bootstrap-server", broker.address, "--topic", "v",
                       "--group-id", "vc", "--max-messages", "600", "--isolation-level", "read_committed", "--verbose")
    assert consumed.returncode == 0, consumed.stderr
    lines = events(consumed.stdout)
    assert [e["name"] for e in lines[:1]] == ["startup_complete"] and lines[-1]["name"] == "shutdown_complete"
    assigned = [p for e in lines if e["name"] == "partitions_assigned" for p in e["partitions"]]
    assert sorted(p["partition"] for p in assigned) == [0, 1, 2]
    records = [(e["partition"], e["offset"], e["value"]) for e in lines if e["name"] == "record_data"]
    assert sorted(records) == sorted((e["partition"], e["offset"], e["value"]) for e in acked)  # each once
    assert sum(e["count"] for e in lines if e["name"] == "records_consumed") == 600
    commits = [e for e in lines if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)
    last = {o["partition"]: o["offset"] for e in commits for o in e["offsets"]}
    written = {e["partition"] for e in acked}
    assert last == {p: 1 + max(e["offset"] for e in acked if e["partition"] == p) for p in written}
