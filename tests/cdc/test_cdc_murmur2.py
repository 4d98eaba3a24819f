"""Kafka's default partitioner, checked against Kafka's own test vectors and librdkafka placing keys."""

from __future__ import annotations

import pytest

from cdc.murmur2 import murmur2, partition_for

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data,expected", KAFKA_VECTORS.items())
def test_kafka_vectors(data, expected):
    assert murmur2(data) == expected


def test_librdkafka_murmur2_random_places_keys_in_the_same_partitions(broker_factory):
    from confluent_kafka import Producer

    broker = broker_factory(config={"num.partitions": "7"})
    producer = Producer({"bootstrap.servers": broker.address, "partitioner": "murmur2_random"})
    placed: dict[bytes, int] = {}

    def delivered(err, msg):
        assert err is None, err
        placed[msg.key()] = msg.partition()

    keys = [b'{"id":%d}' % i for i in range(200)] + [b"", b"x", b"xy", b"xyz", "ключ".encode()]
    for key in keys:
        producer.produce("murmur", key=key, value=b"v", on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(set(placed.values())) == 7
    assert placed == {key: partition_for(key, 7) for key in keys}


def test_a_tables_remembered_keys_are_the_keys_it_would_compute(monkeypatch):
    """The emitter's key cache (a row changed again skips JSON and murmur2) gives the same key bytes
    and partition as computing them, also once it is full and starts again."""
    from cdc import emitter

    monkeypatch.setattr(emitter, "KNOWN_KEYS", 50)
    key_of = emitter._keyer(("id",), 6)
    rows = [{"id": i % 120, "name": "x"} for i in range(600)] + [{"id": "é"}, {"id": "é"}]
    for row in rows:
        key = b'{"id":%b}' % (b"%d" % row["id"] if isinstance(row["id"], int) else b'"\xc3\xa9"')
        assert key_of(row) == (key, partition_for(key, 6))
    two = emitter._keyer(("a", "b"), 6)
    assert two({"a": 1, "b": "z"}) == (b'{"a":1,"b":"z"}', partition_for(b'{"a":1,"b":"z"}', 6))
