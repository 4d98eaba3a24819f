"""Sans-IO tests of ServerConnection: bytes in, request events out, response frames out. No sockets."""

import os
import struct
import uuid

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from logcore.protocol import codec
from logcore.protocol.codec import ApiKey, ErrorCode, FileRegion
from logcore.protocol.connection import NEED_DATA, RemoteProtocolError, Request, ServerConnection
from wire import raw_frame

# A fixed table, so these tests exercise the connection alone (the broker's table is tested end to end).
SUPPORTED = {ApiKey.PRODUCE: (3, 11), ApiKey.FETCH: (4, 17), ApiKey.METADATA: (0, 13), ApiKey.API_VERSIONS: (0, 4)}
API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="test", client_software_version="1.0")


def joined(chunks) -> bytes:
    return b"".join(c.read() if isinstance(c, FileRegion) else c for c in chunks)


def decode(wire: bytes, api_key: int, version: int):
    (size,) = struct.unpack_from(">i", wire)
    assert size == len(wire) - 4, "size prefix must cover exactly the rest of the frame"
    return codec.decode_response(wire[4:], api_key, version)


def test_request_split_at_every_byte():
    conn, wire = ServerConnection(SUPPORTED), codec.encode_request(API_VERSIONS_V3, correlation_id=7)
    for b in wire[:-1]:
        conn.receive_data(bytes([b]))
        assert conn.next_event() is NEED_DATA
    conn.receive_data(wire[-1:])
    event = conn.next_event()
    assert isinstance(event, Request) and event.error is None
    assert (event.api_key, event.api_version, event.correlation_id, event.client_id) == (18, 3, 7, "binlake")
    assert event.body.client_software_name == "test"
    assert conn.next_event() is NEED_DATA


def test_pipelined_requests_in_one_chunk_come_out_in_order():
    conn = ServerConnection(SUPPORTED)
    requests = [API_VERSIONS_V3, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False), ApiVersionsV0()]
    conn.receive_data(b"".join(codec.encode_request(r, correlation_id=100 + i) for i, r in enumerate(requests)))
    events = [conn.next_event() for _ in requests]
    assert [(e.api_key, e.api_version, e.correlation_id) for e in events] == [(18, 3, 100), (3, 12, 101), (18, 0, 102)]
    assert conn.next_event() is NEED_DATA


def test_flexible_request_carries_topic_ids():
    topic_id = uuid.uuid4()
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(codec.encode_request(MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=topic_id, name=None),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), correlation_id=1))
    assert conn.next_event().body.topics[0].topic_id == topic_id


@pytest.mark.parametrize("size", [-1, -2**31, 0, 7, 100 * 1024 * 1024 + 1])
def test_impossible_frame_size_is_the_peers_fault(size):
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(struct.pack(">i", size) + b"\0" * 16)
    with pytest.raises(RemoteProtocolError, match="frame size"):
        conn.next_event()


def test_max_frame_size_is_configurable():
    wire = codec.encode_request(API_VERSIONS_V3, correlation_id=1)
    conn = ServerConnection(SUPPORTED, max_frame_size=len(wire) - 5)
    conn.receive_data(wire)
    with pytest.raises(RemoteProtocolError, match="socket.request.max.bytes"):
        conn.next_event()


def test_close_inside_a_frame_is_the_peers_fault():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(codec.encode_request(API_VERSIONS_V3, correlation_id=1)[:-3])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="closed inside"):
        conn.next_event()


def test_close_between_frames_ends_cleanly_after_the_last_request():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(codec.encode_request(API_VERSIONS_V3, correlation_id=1))
    conn.receive_data(b"")
    assert conn.next_event().correlation_id == 1
    assert conn.next_event() is None


def test_unknown_api_key_is_answered_with_unsupported_version():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(raw_frame(9999, 0, 42))
    event = conn.next_event()
    assert event.error is ErrorCode.unsupported_version and "9999" in event.error_message
    wire = joined(conn.send_error(event, event.error))
    assert wire == struct.pack(">iih", 6, 42, ErrorCode.unsupported_version)


def test_unsupported_api_versions_version_gets_v0_answer_with_the_table():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(raw_frame(ApiKey.API_VERSIONS, 99, 5))
    event = conn.next_event()
    assert event.error is ErrorCode.unsupported_version
    correlation_id, response = decode(joined(conn.send_error(event, event.error)), ApiKey.API_VERSIONS, 0)
    assert correlation_id == 5 and response.error_code == ErrorCode.unsupported_version
    table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert table == SUPPORTED


def test_unsupported_version_of_a_known_api_is_answered_not_parsed():
    conn = ServerConnection(SUPPORTED)
    produce_max = SUPPORTED[ApiKey.PRODUCE][1]
    conn.receive_data(raw_frame(ApiKey.PRODUCE, produce_max + 1, 9, b"garbage that is never parsed"))
    event = conn.next_event()
    assert (event.error, event.correlation_id, event.body) == (ErrorCode.unsupported_version, 9, None)
    assert f"version {produce_max + 1}" in event.error_message


def test_malformed_body_becomes_invalid_request():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(raw_frame(ApiKey.METADATA, 1, 3, b"\x7f\xff\xff\xff"))  # 2^31-1 topics, none present
    event = conn.next_event()
    assert event.error is ErrorCode.invalid_request and event.correlation_id == 3
    correlation_id, response = decode(joined(conn.send_error(event, event.error)), ApiKey.METADATA, 1)
    assert correlation_id == 3 and response.topics == ()
    conn.receive_data(codec.encode_request(API_VERSIONS_V3, correlation_id=4))
    assert conn.next_event().error is None, "one bad request must not poison the connection"


def test_api_versions_response_header_is_v0_even_when_flexible():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(codec.encode_request(API_VERSIONS_V3, correlation_id=11))
    event = conn.next_event()
    wire = joined(conn.send(event, {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0,
                                                                   "max_version": 4}]}))
    # size, correlation id, then the body at once: error_code 0 and a compact array of one key
    assert wire[4:8] == struct.pack(">i", 11) and wire[8:10] == b"\0\0" and wire[10] == 2
    assert decode(wire, ApiKey.API_VERSIONS, 3)[1].api_keys[0].max_version == 4


def test_flexible_response_header_has_tagged_fields():
    conn = ServerConnection(SUPPORTED)
    conn.receive_data(codec.encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                           include_topic_authorized_operations=False), 12))
    wire = joined(conn.send(conn.next_event(), {"cluster_id": "c", "controller_id": 0, "brokers": [], "topics": []}))
    assert wire[8] == 0  # response header v1: empty tagged fields
    correlation_id, response = decode(wire, ApiKey.METADATA, 12)
    assert (correlation_id, response.cluster_id) == (12, "c")


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_file_regions_are_spliced_between_response_bytes(tmp_path, version):
    records = [os.urandom(n) for n in (61, 300, 1)]
    path = tmp_path / "segment"
    path.write_bytes(b"HEAD" + b"".join(records) + b"TAIL")
    fd = os.open(path, os.O_RDONLY)
    try:
        regions, position = [], 4
        for r in records:
            regions.append(FileRegion(fd, position, len(r)))
            position += len(r)
        topic_id = uuid.uuid4()
        data = {"session_id": 0, "responses": [{"topic": "t", "topic_id": topic_id, "partitions": [
            {"partition_index": i, "high_watermark": 10 + i, "records": region} for i, region in enumerate(regions)]}]}
        request = Request(ApiKey.FETCH, version, 77, None, None)
        chunks = ServerConnection(SUPPORTED).send(request, data)
        assert [c for c in chunks if isinstance(c, FileRegion)] == regions, "regions must stay zero-copy"
        correlation_id, response = decode(joined(chunks), ApiKey.FETCH, version)
    finally:
        os.close(fd)
    assert correlation_id == 77
    topic = response.responses[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (topic_id if version >= 13 else "t")
    assert [(p.partition_index, p.high_watermark, p.records) for p in topic.partitions] == [
        (i, 10 + i, r) for i, r in enumerate(records)]
