"""DescribeTopicPartitions (KIP-966), the paged topic description of Kafka 3.8+ admin clients:
name order, a partition limit per response and a cursor to go on from. Kafka's Java admin client uses
it for `kafka-topics --describe` (tests/reference/test_java_tools.py); here the paging, on the wire."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest

from logcore.protocol.codec import ErrorCode
from wire import WireClient


def describe(client: WireClient, topics: list[str], limit: int, cursor: tuple[str, int] | None = None):
    return client.call(DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(name=t) for t in topics), response_partition_limit=limit,
        cursor=Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None))


def test_topics_are_described_page_by_page_in_name_order(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    for name, count in (("b", 3), ("a", 2), ("c", 1)):
        admin.create_topics([NewTopic(name, count, 1)])[name].result(30)
    seen, cursor = [], None
    with WireClient(broker.address) as client:
        while True:
            response = describe(client, ["c", "a", "b"], limit=2, cursor=cursor)
            assert sum(len(t.partitions) for t in response.topics) <= 2
            seen += [(t.name, p.partition_index, p.leader_id) for t in response.topics for p in t.partitions]
            if response.next_cursor is None:
                break
            cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)
        assert seen == [("a", 0, 0), ("a", 1, 0), ("b", 0, 0), ("b", 1, 0), ("b", 2, 0), ("c", 0, 0)]
        [unknown] = describe(client, ["nope"], limit=10).topics
        assert unknown.error_code == ErrorCode.unknown_topic_or_partition and unknown.name == "nope"
    assert "nope" not in admin.list_topics(timeout=10).topics  # described, never created
