"""Fetch semantics on the wire: byte limits (KIP-74), long polls, errors, topic ids, and
incremental fetch sessions (KIP-227). Data goes in through a real client; fetches are raw so
every field of the request and response can be checked."""

import dataclasses
import datetime
import importlib
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from logcore.protocol.codec import ErrorCode
from logcore.protocol.errors import FetchSessionIdNotFound
from logcore.protocol.fetch_session import INITIAL_EPOCH, FetchPartition, FetchSessionCache
from wire import WireClient


@pytest.fixture
def broker(broker_factory):
    return broker_factory({"num.partitions": "2"})


def produce(address: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    """One record batch per value (each is flushed alone)."""
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0, "enable.idempotence": False})
    for value in values:
        producer.produce(topic, value, partition=partition)
        assert producer.flush(10) == 0


def create(client: WireClient, topic: str) -> uuid.UUID:
    """Auto-creates `topic` through Metadata; returns its topic id."""
    response = client.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                           allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    return response.topics[0].topic_id


def fetch(version: int, partitions, max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 50 << 20,
          session_id: int = 0, session_epoch: int = -1, forgotten=()):
    """A Fetch request of `version`; partitions are (topic name or id, partition, offset, partition max bytes)."""
    schema = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    by_topic: dict = {}
    for topic, partition, offset, limit in partitions:
        by_topic.setdefault(topic, []).append(schema.FetchPartition(partition=partition, fetch_offset=offset,
                                                                    partition_max_bytes=limit))
    name = "topic_id" if version >= 13 else "topic"
    wanted = dict(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
        session_id=session_id, session_epoch=session_epoch, replica_id=-1,
        topics=tuple(schema.FetchTopic(**{name: t}, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(schema.ForgottenTopic(**{name: t}, partitions=tuple(ps)) for t, ps in forgotten))
    has = {f.name for f in dataclasses.fields(schema.FetchRequest)}
    return schema.FetchRequest(**{k: v for k, v in wanted.items() if k in has})  # older versions lack some


def batches(records: bytes | None) -> list[int]:
    """Base offsets of the whole batches in `records` (a cut-off last batch is left out)."""
    offsets, position, data = [], 0, records or b""
    while position + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        if position + 12 + length > len(data):
            break
        offsets.append(base)
        position += 12 + length
    return offsets


def partitions_of(response) -> dict:
    return {(t.topic_id if hasattr(t, "topic_id") else t.topic, p.partition_index): p
            for t in response.responses for p in t.partitions}


def test_partition_max_bytes_and_max_bytes(broker):
    with WireClient(broker.address) as client:
        create(client, "limits")
        produce(broker.address, "limits", [bytes([i]) * 1000 for i in range(5)], partition=0)
        produce(broker.address, "limits", [bytes([i]) * 1000 for i in range(5)], partition=1)
        whole = partitions_of(client.call(fetch(12, [("limits", 0, 0, 1 << 20)])))[("limits", 0)]
        batch_size = len(whole.records) // 5

        got = partitions_of(client.call(fetch(12, [("limits", 0, 0, 2 * batch_size + 10)])))[("limits", 0)]
        assert len(got.records) == 2 * batch_size + 10 and batches(got.records) == [0, 1]

        # The response budget runs out inside partition 1: it gets the rest, partition 0 got its share.
        got = partitions_of(client.call(fetch(12, [("limits", 0, 0, 1 << 20), ("limits", 1, 0, 1 << 20)],
                                              max_bytes=6 * batch_size)))
        assert len(got[("limits", 0)].records) == 5 * batch_size
        assert batches(got[("limits", 1)].records) == [0] and len(got[("limits", 1)].records) == batch_size


def test_first_batch_is_whole_even_past_every_limit(broker):
    """KIP-74: a consumer must make progress even when one batch exceeds its limits."""
    with WireClient(broker.address) as client:
        create(client, "big")
        produce(broker.address, "big", [b"x" * 20_000, b"y" * 20_000], partition=1)
        got = partitions_of(client.call(fetch(12, [("big", 0, 0, 100), ("big", 1, 0, 100)], max_bytes=100)))
        assert got[("big", 0)].records in (None, b"")
        assert batches(got[("big", 1)].records) == [0] and len(got[("big", 1)].records) > 20_000
        # Only the first partition with data gets that exemption; the next one gets nothing.
        produce(broker.address, "big", [b"z" * 20_000], partition=0)
        got = partitions_of(client.call(fetch(12, [("big", 1, 1, 100), ("big", 0, 0, 100)], max_bytes=100)))
        assert batches(got[("big", 1)].records) == [1]
        assert got[("big", 0)].records in (None, b"") and got[("big", 0)].high_watermark == 1


def test_a_later_partition_gets_no_cut_first_batch(broker):
    """Past the first partition with data, a batch that does not fit the remaining budget is not
    sent cut in two (a record set holding only a partial batch makes aiokafka fail)."""
    with WireClient(broker.address) as client:
        create(client, "cut")
        produce(broker.address, "cut", [b"a" * 1000, b"b" * 1000], partition=0)
        produce(broker.address, "cut", [b"c" * 5000], partition=1)
        first = partitions_of(client.call(fetch(12, [("cut", 0, 0, 1 << 20)])))[("cut", 0)]
        got = partitions_of(client.call(fetch(12, [("cut", 0, 0, 1 << 20), ("cut", 1, 0, 1 << 20)],
                                              max_bytes=len(first.records) + 2000)))
        assert batches(got[("cut", 0)].records) == [0, 1]
        assert got[("cut", 1)].records in (None, b"") and got[("cut", 1)].high_watermark == 1


def test_offset_out_of_range_answers_at_once(broker):
    with WireClient(broker.address) as client:
        create(client, "oor")
        produce(broker.address, "oor", [b"a", b"b", b"c"])
        for offset in (4, 1000, -5):
            started = time.monotonic()
            response = client.call(fetch(12, [("oor", 0, offset, 1 << 20)], max_wait_ms=5000))
            assert time.monotonic() - started < 2, "an error must not wait out max_wait"
            got = partitions_of(response)[("oor", 0)]
            assert got.error_code == ErrorCode.offset_out_of_range
        # The end of the log is in range: an empty answer, not an error.
        assert partitions_of(client.call(fetch(12, [("oor", 0, 3, 1 << 20)])))[("oor", 0)].error_code == 0


def test_topic_ids_from_v13(broker):
    with WireClient(broker.address) as client:
        topic_id = create(client, "ids")
        produce(broker.address, "ids", [b"one", b"two"])
        for version in (13, 15, 16, 17):
            response = client.call(fetch(version, [(topic_id, 0, 0, 1 << 20)]))
            got = partitions_of(response)[(topic_id, 0)]
            assert (got.error_code, got.high_watermark, batches(got.records)) == (0, 2, [0, 1])
        unknown = uuid.uuid4()
        started = time.monotonic()
        response = client.call(fetch(16, [(unknown, 0, 0, 1 << 20)], max_wait_ms=5000))
        assert time.monotonic() - started < 2
        assert partitions_of(response)[(unknown, 0)].error_code == ErrorCode.unknown_topic_id


def test_long_poll_wakes_when_data_arrives_and_honours_min_bytes(broker):
    with WireClient(broker.address) as client:
        create(client, "poll")
        timer = threading.Timer(0.5, produce, (broker.address, "poll", [b"wake up"]))
        started = time.monotonic()
        timer.start()
        response = client.call(fetch(12, [("poll", 0, 0, 1 << 20)], max_wait_ms=5000))
        elapsed = time.monotonic() - started
        assert batches(partitions_of(response)[("poll", 0)].records) == [0]
        assert 0.4 < elapsed < 3, elapsed

        # min_bytes: one small batch is not enough, so the broker waits for max_wait
        started = time.monotonic()
        response = client.call(fetch(12, [("poll", 0, 0, 1 << 20)], max_wait_ms=700, min_bytes=100_000))
        assert time.monotonic() - started >= 0.65
        assert batches(partitions_of(response)[("poll", 0)].records) == [0]


def test_incremental_fetch_session(broker):
    with WireClient(broker.address) as client:
        for topic in ("s1", "s2"):
            create(client, topic)
        produce(broker.address, "s1", [b"first"])
        full = client.call(fetch(12, [("s1", 0, 0, 1 << 20), ("s2", 0, 0, 1 << 20)], session_epoch=0))
        session = full.session_id
        assert session != 0 and set(partitions_of(full)) == {("s1", 0), ("s2", 0)}

        # Nothing changed since: an incremental fetch (the client moved s1 past its record) is empty.
        quiet = client.call(fetch(12, [("s1", 0, 1, 1 << 20)], max_wait_ms=200, session_id=session, session_epoch=1))
        assert (quiet.error_code, quiet.session_id, quiet.responses) == (0, session, ())

        # New data on s2 only: only s2 is reported, though the request names no partition at all.
        produce(broker.address, "s2", [b"news"])
        news = client.call(fetch(12, [], max_wait_ms=2000, session_id=session, session_epoch=2))
        assert list(partitions_of(news)) == [("s2", 0)]
        assert batches(partitions_of(news)[("s2", 0)].records) == [0]

        # Forgetting s2: its next record is not reported, s1's is.
        produce(broker.address, "s2", [b"unheard"])
        produce(broker.address, "s1", [b"heard"])
        after = client.call(fetch(12, [("s1", 0, 1, 1 << 20)], session_id=session, session_epoch=3,
                                  forgotten=[("s2", [0])]))
        assert list(partitions_of(after)) == [("s1", 0)]

        stale = client.call(fetch(12, [], session_id=session, session_epoch=3))
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
        unknown = client.call(fetch(12, [], session_id=session + 1, session_epoch=1))
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found

        # Epoch -1 closes the session and is answered without one.
        closing = client.call(fetch(12, [("s1", 0, 0, 1 << 20)], session_id=session, session_epoch=-1))
        assert closing.session_id == 0 and set(partitions_of(closing)) == {("s1", 0)}
        gone = client.call(fetch(12, [], session_id=session, session_epoch=5))
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_session_may_not_switch_between_names_and_ids(broker):
    with WireClient(broker.address) as client:
        topic_id = create(client, "switch")
        session = client.call(fetch(12, [("switch", 0, 0, 1 << 20)], session_epoch=0)).session_id
        switched = client.call(fetch(16, [(topic_id, 0, 0, 1 << 20)], session_id=session, session_epoch=1))
        assert switched.error_code == ErrorCode.fetch_session_topic_id_error


@pytest.mark.parametrize("version", [4, 7, 11, 12, 16, 17])
def test_every_version_reads_the_same_records(broker, version):
    with WireClient(broker.address) as client:
        topic_id = create(client, "allv")
        produce(broker.address, "allv", [b"a", b"b", b"c"])
        key = topic_id if version >= 13 else "allv"
        got = partitions_of(client.call(fetch(version, [(key, 0, 1, 1 << 20)])))[(key, 0)]
        assert (got.error_code, got.high_watermark, batches(got.records)) == (0, 3, [1, 2])
        assert getattr(got, "log_start_offset", 0) == 0  # from v5


def test_full_session_cache_evicts_only_idle_sessions():
    """The session cache alone (no broker): a full cache serves new clients without a session
    until its least recently used session idled past the eviction time."""
    now = [0.0]
    cache = FetchSessionCache(max_sessions=2, eviction_s=120, clock=lambda: now[0])

    def new_session() -> int:
        context = cache.context(0, INITIAL_EPOCH, [FetchPartition("t", 0, 0, 1 << 20)], [])
        context.respond({("t", 0): {"error_code": 0, "high_watermark": 0, "log_start_offset": 0,
                                    "last_stable_offset": 0, "records": b""}})
        return context.session_id

    first, second = new_session(), new_session()
    assert 0 not in (first, second) and first != second
    now[0] = 100
    assert new_session() == 0, "both sessions are fresh: the newcomer goes sessionless"
    cache.context(first, 1, [], [])  # the first client keeps using its session
    now[0] = 200
    third = new_session()  # `second` idled 200 s: it goes, `first` (idle 100 s) stays
    assert third != 0 and len(cache) == 2
    cache.context(first, 2, [], [])
    with pytest.raises(FetchSessionIdNotFound):
        cache.context(second, 1, [], [])
