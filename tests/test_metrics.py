"""The broker's Prometheus endpoint (`prometheus.listener`), scraped over HTTP and parsed with
prometheus-client's own parser after real clients produced, consumed, committed and used a transaction."""

from __future__ import annotations

import json
import re

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from brokerproc import ROOT
from prometheus_scrape import endpoint, sample, scrape
from waiting import wait_for


def test_the_broker_reports_traffic_state_lag_and_transactions(broker_factory):
    broker = broker_factory(config={"prometheus.listener": "127.0.0.1:0"})
    url = wait_for(lambda: endpoint(broker.log()), "the metrics endpoint")
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.create_topics([NewTopic("m", 3, 1), NewTopic("mc", 1, 1, config={
            "cleanup.policy": "compact"})]).values():
        future.result(30)

    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 5})
    for i in range(100):
        producer.produce("m", key=b"%d" % i, value=b"x" * 50, partition=i % 3)
        producer.produce("mc", key=b"k%d" % (i % 10), value=b"v")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition("m", p, 0) for p in range(3)])
    read = 0
    while read < 100:
        message = consumer.poll(5)
        assert message is not None and not message.error()
        read += 1
    consumer.commit(offsets=[TopicPartition("m", 0, 10), TopicPartition("m", 1, 33), TopicPartition("m", 2, 30)],
                    asynchronous=False)
    consumer.close()
    transactional = Producer({"bootstrap.servers": broker.address, "transactional.id": "metrics-txn"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce("m", value=b"in a transaction", partition=0)
    transactional.flush(30)  # left open: the coordinator holds it as Ongoing

    samples = scrape(url)
    assert sample(samples, "binlake_broker_messages_in_total", topic="m") == 101
    assert sample(samples, "binlake_broker_messages_in_total", topic="mc") == 100
    assert sample(samples, "binlake_broker_bytes_in_total", topic="m") > 100 * 50
    assert sample(samples, "binlake_broker_bytes_out_total", topic="m") > 100 * 50
    assert sample(samples, "binlake_broker_request_seconds_count", api="produce") >= 2
    assert sample(samples, "binlake_broker_request_seconds_count", api="fetch") >= 1
    assert sample(samples, "binlake_broker_request_seconds_count", api="create_topics") == 1
    ends = [sample(samples, "binlake_broker_log_end_offset", topic="m", partition=str(p)) for p in range(3)]
    assert ends == [35, 33, 33]  # 34 + the open transaction's record, 33, 33
    assert sample(samples, "binlake_broker_log_size_bytes", topic="m", partition="1") > 33 * 50
    # Lag against the high watermark: the open transaction's record counts, as in kafka-consumer-groups.
    assert [sample(samples, "binlake_broker_consumer_lag", group="readers", topic="m", partition=str(p))
            for p in range(3)] == [25, 0, 3]
    hosted = sum(len(t.partitions) for t in admin.list_topics(timeout=30).topics.values())  # internal ones too
    assert sample(samples, "binlake_broker_partitions", role="leader") == hosted
    assert sample(samples, "binlake_broker_under_replicated_partitions") == 0
    assert sample(samples, "binlake_broker_offline_partitions") == 0
    assert sample(samples, "binlake_broker_groups", state="Empty") == 1
    assert sample(samples, "binlake_broker_transactions", state="Ongoing") == 1
    assert sample(samples, "binlake_broker_cleaner_dirty_bytes", topic="mc", partition="0") == 0  # all in the active segment
    transactional.abort_transaction(30)

    # The example Grafana dashboard asks only for series the broker exports (of the broker's; the
    # demo's test checks the others against the connector, the sink and the stream workers).
    dashboard = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    asked = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"binlake_broker_\w+", target["expr"])}
    exported = {name for name, _ in samples}
    assert asked and asked <= exported, asked - exported


def test_a_wrong_listener_is_refused_with_the_reason(broker_factory):
    with pytest.raises(RuntimeError, match=r"prometheus.listener.*HOST:PORT"):
        broker_factory(config={"prometheus.listener": "everywhere"})
