"""Hostile and odd bytes on real sockets against a real broker: each bad connection is answered or
closed, and the broker keeps serving everyone else."""

import datetime
import socket
import struct
import threading
import time

import confluent_kafka
import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from logcore.protocol.codec import ApiKey, ErrorCode, decode_response, encode_request
from wire import WireClient, raw_frame

API_VERSIONS = ApiVersionsRequest(client_software_name="test", client_software_version="1")


def metadata(*topics: str, create: bool = True) -> MetadataRequest:
    return MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
                           allow_auto_topic_creation=create, include_topic_authorized_operations=False)


def long_poll(topic: str, wait_ms: int) -> FetchRequest:
    """A fetch at the end of an empty partition, so the broker waits the whole `wait_ms`."""
    return FetchRequest(max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, session_epoch=-1,
                        topics=(FetchTopic(topic=topic, partitions=(
                            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
                        forgotten_topics_data=())


def assert_closed_by_broker(client: WireClient) -> None:
    assert client.read_frame() is None, "the broker should have closed this connection"


def assert_logged(broker, text: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while text not in broker.log():
        assert time.monotonic() < deadline, f"broker never logged {text!r}"
        time.sleep(0.05)


def assert_still_serving(address: str) -> None:
    with WireClient(address) as client:
        assert client.call(API_VERSIONS).error_code == ErrorCode.none


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # size field reads as ~1.2 GB
    struct.pack(">i", -1) + b"\0" * 12,
    struct.pack(">i", -2**31),
    struct.pack(">i", 3) + b"abc",  # too short to hold a request header
    struct.pack(">i", 2**31 - 1) + b"\0" * 100,  # beyond socket.request.max.bytes
], ids=["http", "negative", "most-negative", "tiny", "oversized"])
def test_unframeable_bytes_close_only_that_connection(broker, garbage):
    with WireClient(broker.address) as bystander, WireClient(broker.address) as bad:
        bad.sock.sendall(garbage)
        assert_closed_by_broker(bad)
        assert bystander.call(API_VERSIONS).error_code == ErrorCode.none
    assert_logged(broker, "closing connection")


def test_truncated_request_then_close(broker):
    wire = encode_request(metadata("trunc"), correlation_id=1)
    for cut in (2, 4, 10, len(wire) - 1):
        with WireClient(broker.address) as bad:
            bad.sock.sendall(wire[:cut])
    assert_logged(broker, "closed inside")
    assert_still_serving(broker.address)


def test_request_split_at_every_byte_on_the_socket(broker):
    with WireClient(broker.address) as client:
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wire = encode_request(API_VERSIONS, correlation_id=99)
        for i in range(len(wire)):
            client.sock.sendall(wire[i:i + 1])
            time.sleep(0.002)
        correlation_id, response = client.receive(API_VERSIONS)
    assert correlation_id == 99 and response.error_code == ErrorCode.none


def test_unknown_api_key_is_answered_and_the_connection_stays_usable(broker):
    with WireClient(broker.address) as client:
        client.sock.sendall(raw_frame(9999, 0, 41))
        assert client.read_frame() == struct.pack(">ih", 41, ErrorCode.unsupported_version)
        assert client.call(API_VERSIONS).error_code == ErrorCode.none


def test_too_new_api_versions_gets_the_table_in_v0(broker):
    with WireClient(broker.address) as client:
        client.sock.sendall(raw_frame(ApiKey.API_VERSIONS, 127, 8))
        correlation_id, response = decode_response(client.read_frame(), ApiKey.API_VERSIONS, 0)
        assert correlation_id == 8 and response.error_code == ErrorCode.unsupported_version
        table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert table[ApiKey.API_VERSIONS] == (0, 4) and table[ApiKey.FETCH][1] >= 13
        # what a client does next: retry with a version from the table
        assert client.call(ApiVersionsV0()).error_code == ErrorCode.none


def test_api_versions_with_an_invalid_software_name_is_refused(broker):
    with WireClient(broker.address) as client:
        client.send(ApiVersionsRequest(client_software_name="bad name!", client_software_version="1"), 6)
        correlation_id, response = decode_response(client.read_frame(), ApiKey.API_VERSIONS, 0)
        assert (correlation_id, response.error_code) == (6, ErrorCode.invalid_request)
        assert response.api_keys, "the table still comes along, so the client can retry"


def test_advertised_versions_are_exactly_what_the_broker_parses(broker):
    """Every advertised (api, version) is accepted; one past either end of the range is refused."""
    with WireClient(broker.address) as client:
        table = {k.api_key: (k.min_version, k.max_version) for k in client.call(API_VERSIONS).api_keys}
        for api_key, (low, high) in table.items():
            for version in (low - 1, high + 1):
                if version < 0:
                    continue
                client.sock.sendall(raw_frame(api_key, version, 5))
                frame = client.read_frame()
                assert frame is not None and frame[:4] == struct.pack(">i", 5), (api_key, version)
    assert_still_serving(broker.address)


def test_malformed_body_is_answered_with_invalid_request(broker):
    with WireClient(broker.address) as client:
        client.sock.sendall(raw_frame(ApiKey.METADATA, 1, 3, b"\x00\x00\x00\x05\x00"))  # 5 topics, 1 byte
        correlation_id, response = decode_response(client.read_frame(), ApiKey.METADATA, 1)
        assert correlation_id == 3 and response.topics == ()
        assert client.call(metadata("after-bad-body")).topics[0].name == "after-bad-body"
    assert_logged(broker, "invalid_request")


def test_responses_keep_request_order_behind_a_long_poll(broker):
    with WireClient(broker.address) as client, WireClient(broker.address) as other:
        client.call(metadata("order"))
        requests = [long_poll("order", 800), API_VERSIONS, metadata("order")]
        started = time.monotonic()
        ids = [client.send(r) for r in requests]
        # the long poll on `client` holds nobody else up
        assert other.call(API_VERSIONS).error_code == ErrorCode.none
        assert time.monotonic() - started < 0.5
        answered = [client.receive(r)[0] for r in requests]
        assert answered == ids
        assert time.monotonic() - started >= 0.75, "the fetch should have waited out max_wait"


def test_many_connections_pipelining_concurrently(broker):
    with WireClient(broker.address) as setup:
        setup.call(metadata("busy"))
    failures: list[str] = []

    def pipeline(n: int) -> None:
        try:
            with WireClient(broker.address) as client:
                requests = [long_poll("busy", 50) if i % 5 == 0 else API_VERSIONS if i % 2 else metadata("busy")
                            for i in range(20)]
                ids = [client.send(r, correlation_id=n * 1000 + i) for i, r in enumerate(requests)]
                got = [client.receive(r)[0] for r in requests]
                if got != ids:
                    failures.append(f"connection {n}: {got} != {ids}")
        except Exception as exc:  # reported below with the connection number
            failures.append(f"connection {n}: {exc!r}")

    threads = [threading.Thread(target=pipeline, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []


def test_peer_closing_during_a_long_poll_leaves_the_broker_healthy(broker):
    with WireClient(broker.address) as client:
        client.call(metadata("gone"))
        client.send(long_poll("gone", 2000))
    assert_still_serving(broker.address)
    assert broker.proc.poll() is None


# -- lengths and nulls (logcore/protocol/bounds.py) ---------------------------------------------


def test_the_frame_that_aborted_the_broker_is_answered(broker):
    """Metadata v12 whose topics array claims 0xFFFFFFFE elements: kio's native reader reserved
    32 GiB for them and the broker died of SIGABRT. Now: INVALID_REQUEST, and the broker serves on."""
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 21, -1) + b"\0"  # header v2: no client id, no tags
    frame = header + bytes.fromhex("ffffffff0f")
    with WireClient(broker.address) as client:
        client.sock.sendall(struct.pack(">i", len(frame)) + frame)
        correlation_id, response = decode_response(client.read_frame(), ApiKey.METADATA, 12)
        assert correlation_id == 21 and response.topics == ()
        assert client.call(API_VERSIONS).error_code == ErrorCode.none
    assert broker.proc.poll() is None
    assert_logged(broker, "MetadataRequest.topics: array of 4294967294 elements")


def test_a_null_array_where_none_is_allowed_is_invalid_request(broker):
    """ListOffsets v1 with a null topics array reached its handler as None (TypeError there)."""
    with WireClient(broker.address) as client:
        client.sock.sendall(raw_frame(ApiKey.LIST_OFFSETS, 1, 4, struct.pack(">ii", -1, -1)))  # replica, topics
        frame = client.read_frame()
        assert frame[:4] == struct.pack(">i", 4)
        assert client.call(API_VERSIONS).error_code == ErrorCode.none
    assert_logged(broker, "ListOffsetsRequest.topics: null array where the schema allows none")
    assert "Traceback" not in broker.log()


def test_bad_input_is_summarized_not_logged_frame_by_frame(broker):
    bad = raw_frame(ApiKey.METADATA, 1, 3, b"\x00\x00\x00\x05\x00")  # 5 topics in 1 byte
    with WireClient(broker.address) as client:
        for _ in range(20):
            client.sock.sendall(bad * 100)
            for _ in range(100):
                assert client.read_frame() is not None
    assert_logged(broker, "answering invalid_request")
    assert_logged(broker, "more bad requests or connections from 127.0.0.1", timeout=20)
    lines = [line for line in broker.log().splitlines() if "MetadataRequest" in line or "more bad requests" in line]
    assert len(lines) <= 4, lines
    assert "1,999 length past the end of the frame" in broker.log()


# -- connection limits, with Kafka's names ------------------------------------------------------


def admitted(address: str, timeout: float = 10) -> WireClient:
    """A connection the broker accepted and answers. Retried: the broker counts a closed connection
    (the fixture's readiness probe, a test's last client) free only once it has seen the close."""
    deadline = time.monotonic() + timeout
    while True:
        client = WireClient(address)
        client.send(API_VERSIONS, correlation_id=1)
        if client.read_frame() is not None:
            return client
        client.close()
        assert time.monotonic() < deadline, "the broker never admitted a connection within its limits"
        time.sleep(0.05)


def test_max_connections_per_ip_closes_the_extra_ones(broker_factory):
    broker = broker_factory({"max.connections.per.ip": "3"})
    clients = [admitted(broker.address) for _ in range(3)]
    try:
        with WireClient(broker.address) as extra:
            assert_closed_by_broker(extra)
        assert_logged(broker, "max.connections.per.ip=3 reached for 127.0.0.1")
        clients.pop().close()
        admitted(broker.address).close()  # the freed slot serves a new connection
    finally:
        for client in clients:
            client.close()


def test_max_connections_overrides_per_ip(broker_factory):
    broker = broker_factory({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:2"})
    with admitted(broker.address), admitted(broker.address), WireClient(broker.address) as third:
        assert_closed_by_broker(third)


def test_max_connections_in_all(broker_factory):
    broker = broker_factory({"max.connections": "2"})
    with admitted(broker.address), admitted(broker.address), WireClient(broker.address) as third:
        assert_closed_by_broker(third)
    assert_logged(broker, "max.connections=2 reached")


def test_idle_connections_are_closed_but_not_during_a_long_poll(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": "300"})
    with WireClient(broker.address) as polling:
        polling.call(metadata("idle"))       # (creates the topic: the idle connection opens after it)
        polling.send(long_poll("idle", 1500))
        with WireClient(broker.address) as idle:
            idle.call(API_VERSIONS)
            assert_closed_by_broker(idle)  # within the socket timeout, long before it
        correlation_id, response = polling.receive(long_poll("idle", 1500))
        assert response.error_code == ErrorCode.none, "the long poll outlived the idle limit and was answered"


def test_queued_max_requests_of_one_still_answers_everyone_in_order(broker_factory):
    broker = broker_factory({"queued.max.requests": "1"})
    with WireClient(broker.address) as setup:
        setup.call(metadata("queued"))
    failures: list[str] = []

    def pipeline(n: int) -> None:
        try:
            with WireClient(broker.address) as client:
                requests = [long_poll("queued", 30) if i % 4 == 0 else metadata("queued") for i in range(40)]
                ids = [client.send(r, correlation_id=n * 1000 + i) for i, r in enumerate(requests)]
                if [client.receive(r)[0] for r in requests] != ids:
                    failures.append(f"connection {n}: out of order")
        except Exception as exc:  # reported below with the connection number
            failures.append(f"connection {n}: {exc!r}")

    threads = [threading.Thread(target=pipeline, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []


def test_a_client_that_never_reads_cannot_grow_the_broker(broker):
    """Pipelined fetches of 50 KB each from a client that reads nothing: the broker stops reading
    that connection once its unsent answers back up, so the client's sends stall (long before
    200,000 requests, 10 GB of answers) and the broker's memory stays flat; when the client
    finally reads, the answers arrive, in order."""
    topic = "unread"
    with WireClient(broker.address) as setup:
        setup.call(metadata(topic))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.address, "linger.ms": 0})
    producer.produce(topic, b"x" * 50_000, partition=0)
    producer.flush(30)
    fetch = FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, session_epoch=-1,
                         topics=(FetchTopic(topic=topic, partitions=(
                             FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
                         forgotten_topics_data=())
    frames = b"".join(encode_request(fetch, i) for i in range(1000))
    before = broker.rss_bytes()
    with WireClient(broker.address, timeout=60) as client:
        client.sock.setblocking(False)
        sent, pending = 0, memoryview(frames)
        stalled_since = time.monotonic()
        while sent < 200 * len(frames) and time.monotonic() - stalled_since < 3:  # until the broker stops reading
            try:
                n = client.sock.send(pending)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            sent += n
            pending = pending[n:] or memoryview(frames)
            stalled_since = time.monotonic()
        grown = broker.rss_bytes() - before
        assert sent < 200 * len(frames), "the broker should have stopped reading a client that never reads"
        assert grown < 40 * 2**20, f"the broker grew {grown / 2**20:.0f} MiB for a client that does not read"
        client.sock.setblocking(True)
        for i in range(1000):  # the first answers, in order
            answer = client.read_frame()
            assert answer is not None and answer[:4] == struct.pack(">i", i)
