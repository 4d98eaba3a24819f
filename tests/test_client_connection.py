"""Sans-IO tests of ClientConnection against ServerConnection: requests out, response bytes in,
response events out, with no socket between them."""

import struct

import pytest

from logcore.protocol.client import NEED_DATA, ClientConnection, RemoteProtocolError, newest_known_version
from logcore.protocol.codec import ApiKey, ErrorCode, FileRegion, build, encode_response, request_class, response_class
from logcore.protocol.connection import ServerConnection
from logcore.security.sasl import AuthenticationFailed
from logcore.security.sasl_client import SaslLogin

SUPPORTED = {ApiKey.METADATA: (0, 13), ApiKey.API_VERSIONS: (0, 4), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0)}
METADATA = {"cluster_id": "c", "controller_id": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092}],
            "topics": []}


def wire(chunks) -> bytes:
    return b"".join(c.read() if isinstance(c, FileRegion) else c for c in chunks)


def served(client: ClientConnection, frame: bytes, data: dict) -> bytes:
    """The response bytes a server sends back for `frame` with handler data `data`."""
    server = ServerConnection(SUPPORTED)
    server.receive_data(frame)
    request = server.next_event()
    assert request.error is None and request.client_id == client.client_id
    return wire(server.send(request, data))


def test_a_response_split_at_every_byte_reads_as_its_request_version():
    client = ClientConnection("tool")
    frame = client.send_data(ApiKey.METADATA, 12, {"topics": None})
    answer = served(client, frame, METADATA)
    for b in answer[:-1]:
        client.receive_data(bytes([b]))
        assert client.next_event() is NEED_DATA
    client.receive_data(answer[-1:])
    event = client.next_event()
    assert (event.correlation_id, event.api_key, event.api_version) == (1, ApiKey.METADATA, 12)
    assert [(b.node_id, b.host, b.port) for b in event.body.brokers] == [(1, "h", 9092)]
    assert client.in_flight == 0 and client.next_event() is NEED_DATA


def test_pipelined_requests_are_answered_in_order_with_their_own_versions():
    client = ClientConnection("tool")
    first = client.send_data(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    second = client.send_data(ApiKey.METADATA, 1, {"topics": None})
    assert client.in_flight == 2
    client.receive_data(served(client, first, {"api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}]})
                        + served(client, second, METADATA))
    answers = [client.next_event(), client.next_event()]
    assert [(e.correlation_id, e.api_version) for e in answers] == [(1, 3), (2, 1)]
    assert answers[0].body.api_keys[0].max_version == 12 and answers[1].body.brokers[0].host == "h"


def test_an_answer_to_another_request_is_the_peers_fault():
    client = ClientConnection("tool")
    client.send_data(ApiKey.METADATA, 12, {"topics": None})
    client.receive_data(wire(encode_response(ApiKey.METADATA, 12, 7, METADATA)))
    with pytest.raises(RemoteProtocolError, match="answered request 7 instead of 1"):
        client.next_event()


def test_a_response_to_no_request_is_the_peers_fault():
    client = ClientConnection("tool")
    client.receive_data(wire(encode_response(ApiKey.METADATA, 12, 1, METADATA)))
    with pytest.raises(RemoteProtocolError, match="to no request"):
        client.next_event()


def test_a_response_that_does_not_read_as_its_schema_is_the_peers_fault():
    client = ClientConnection("tool")
    client.send_data(ApiKey.METADATA, 12, {"topics": None})
    client.receive_data(struct.pack(">ii", 9, 1) + b"\x00\xff\xff\xff\xff\xff")
    with pytest.raises(RemoteProtocolError, match="unreadable METADATA v12 response"):
        client.next_event()


def test_a_close_between_responses_ends_and_inside_one_is_the_peers_fault():
    client = ClientConnection("tool")
    frame = client.send_data(ApiKey.METADATA, 12, {"topics": None})
    answer = served(client, frame, METADATA)
    client.receive_data(answer)
    client.receive_data(b"")
    assert client.next_event().correlation_id == 1
    assert client.next_event() is None

    client = ClientConnection("tool")
    client.send(build(request_class(ApiKey.METADATA, 12), {"topics": None}))
    client.receive_data(answer[:-1])
    client.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="closed inside"):
        client.next_event()


def test_a_transaction_not_started_reads_with_start_time_zero():
    """Kafka sends -1 as the start time of a transaction that has none yet; kio refuses negative times."""
    client = ClientConnection("tool")
    frame = client.send_data(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["t"]})
    client.receive_data(served(client, frame, {"transaction_states": [
        {"transactional_id": "t", "transaction_state": "Empty", "transaction_timeout_ms": 60000,
         "transaction_start_time_ms": -1, "producer_id": 5, "producer_epoch": 0, "topics": []}]}))
    state = client.next_event().body.transaction_states[0]
    assert state.producer_id == 5 and state.transaction_start_time.timestamp() == 0


def test_newest_known_version_is_the_newest_kio_can_write_up_to_the_brokers():
    assert newest_known_version(ApiKey.METADATA, 12) == 12
    assert newest_known_version(ApiKey.METADATA, 10_000) < 10_000
    assert newest_known_version(10_000, 3) == -1


def test_sasl_login_is_a_handshake_then_the_mechanisms_tokens():
    login = SaslLogin("PLAIN", "alice", "secret")
    handshake = login.first()
    assert (handshake.__api_key__, handshake.__version__, handshake.mechanism) == (ApiKey.SASL_HANDSHAKE, 1, "PLAIN")
    authenticate = login.answer(build(response_class(ApiKey.SASL_HANDSHAKE, 1), {"mechanisms": ["PLAIN"]}))
    assert (authenticate.__api_key__, authenticate.auth_bytes) == (ApiKey.SASL_AUTHENTICATE, b"\0alice\0secret")
    assert login.answer(build(response_class(ApiKey.SASL_AUTHENTICATE, 2), {})) is None

    refused = build(response_class(ApiKey.SASL_HANDSHAKE, 1), {"error_code": ErrorCode.unsupported_sasl_mechanism})
    with pytest.raises(AuthenticationFailed, match="SaslHandshake for PLAIN refused"):
        SaslLogin("PLAIN", "alice", "secret").answer(refused)
    login = SaslLogin("PLAIN", "alice", "wrong")
    login.answer(build(response_class(ApiKey.SASL_HANDSHAKE, 1), {}))
    failed = build(response_class(ApiKey.SASL_AUTHENTICATE, 2), {"error_code": ErrorCode.sasl_authentication_failed,
                                                                 "error_message": "Invalid username or password"})
    with pytest.raises(AuthenticationFailed, match="authenticating as alice: Invalid username"):
        login.answer(failed)
