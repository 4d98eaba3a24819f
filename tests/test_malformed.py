"""Hostile and odd bytes on real sockets against a real broker: each bad connection is answered or
closed, and the broker keeps serving everyone else."""

import datetime
import socket
import struct
import threading
import time

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
