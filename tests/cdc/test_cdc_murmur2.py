"""Kafka's default partitioner, checked against Kafka's own test vectors and librdkafka placing keys."""

from __future__ import annotations

import random

import pytest

from cdc.murmur2 import murmur2, partition_for, partitions_for

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


def test_many_keys_are_placed_as_one_at_a_time():
    """partitions_for hashes keys of one length together in the lanes of one big integer; every
    length (below and past 4 bytes, each remainder of 4), group size (either side of the threshold
    for lanes) and partition count gives partition_for's answer."""
    rng = random.Random(32)
    for _ in range(400):
        lengths = rng.choice([[13], [0], [3], [4], [0, 1, 2, 3], list(range(70)), [8, 9, 10, 11, 12], [5, 6, 7]])
        keys = [rng.randbytes(rng.choice(lengths)) for _ in range(rng.choice([0, 1, 15, 16, 17, 300, 1000]))]
        partitions = rng.choice([1, 2, 6, 7, 1000, 2**31 - 1])
        assert partitions_for(keys, partitions) == [partition_for(key, partitions) for key in keys]
    keys = [bytes([255]) * length for length in range(4, 40) for _ in range(20)]   # every bit set: the carries
    assert partitions_for(keys, 7) == [partition_for(key, 7) for key in keys]


def test_a_tables_remembered_keys_are_the_keys_it_would_compute(monkeypatch):
    """The emitter's key cache (a row changed again skips JSON and murmur2) gives the same key bytes
    and partition as computing them, one row or a run of rows at a time, also once it is full and
    starts again."""
    from cdc import emitter

    monkeypatch.setattr(emitter, "KNOWN_KEYS", 50)

    def expected(row):
        key = b'{"id":%b}' % (b"%d" % row["id"] if isinstance(row["id"], int) else b'"\xc3\xa9"')
        return key, partition_for(key, 6)

    key_of, keys_of = emitter._keyers(("id",), 6)
    rows = [{"id": i % 120, "name": "x"} for i in range(600)] + [{"id": "é"}, {"id": "é"}]
    for row in rows:
        assert key_of(row) == expected(row)
    key_of, keys_of = emitter._keyers(("id",), 6)
    for start, stop in ((0, 30), (30, 31), (31, 200), (200, 202), (202, 602)):
        assert keys_of(rows[start:stop]) == [expected(row) for row in rows[start:stop]]
    assert key_of(rows[5]) == expected(rows[5])
    two, many = emitter._keyers(("a", "b"), 6)
    assert two({"a": 1, "b": "z"}) == (b'{"a":1,"b":"z"}', partition_for(b'{"a":1,"b":"z"}', 6))
    pairs = [{"a": i, "b": "z"} for i in range(40)]
    assert many(pairs) == [two(row) for row in pairs]
    none, nones = emitter._keyers((), 6)
    assert none({"a": 1}) == (None, 0) and nones([{"a": 1}] * 3) == [(None, 0)] * 3
