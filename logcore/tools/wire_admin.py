"""A blocking Kafka-protocol connection for short-lived admin commands that need APIs no Python
client library offers (WriteTxnMarkers, DescribeTransactions, a debugging Fetch from followers):
kio requests through logcore's codec, one socket per broker, answers decoded."""

from __future__ import annotations

import socket
import struct

import click

from ..protocol.codec import ApiKey, ErrorCode, build, decode_response, encode_request, request_class

TIMEOUT_S = 30.0

bootstrap_option = click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                                help="brokers to connect to (the first that answers)")


class WireAdmin:
    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.bootstraps = []
        for server in bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise click.BadParameter(f"expected HOST:PORT, got {server!r}", param_hint="--bootstrap-server")
            self.bootstraps.append((host, int(port)))
        self.client_id = client_id
        self._socks: dict[tuple[str, int], socket.socket] = {}
        self._correlation = 0

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()

    def call(self, api_key: ApiKey, version: int, data: dict, address: tuple[str, int] | None = None):
        """Ask `address`, or the first bootstrap server that answers."""
        sock = self._connect(address) if address else self._bootstrap()
        self._correlation += 1
        sock.sendall(encode_request(build(request_class(api_key, version), data), self._correlation,
                                    client_id=self.client_id))
        size = struct.unpack(">i", self._read(sock, 4))[0]
        return self.decode(api_key, version, self._read(sock, size))

    def _connect(self, address: tuple[str, int]) -> socket.socket:
        sock = self._socks.get(address)
        if sock is None:
            try:
                sock = self._socks[address] = socket.create_connection(address, timeout=TIMEOUT_S)
            except OSError as exc:
                raise click.ClickException(f"cannot connect to {address[0]}:{address[1]}: {exc}") from None
        return sock

    def _bootstrap(self) -> socket.socket:
        for address in self.bootstraps[:-1]:
            try:
                return self._connect(address)
            except click.ClickException:
                continue
        return self._connect(self.bootstraps[-1])

    def decode(self, api_key: ApiKey, version: int, frame: bytes):
        return decode_response(frame, api_key, version)[1]

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise click.ClickException("the broker closed the connection")
            data += chunk
        return bytes(data)

    def metadata(self, topics: list[str] | None = None):
        """Metadata for `topics` (all when None)."""
        return self.call(ApiKey.METADATA, 9, {"topics": None if topics is None else [{"name": t} for t in topics],
                                              "allow_auto_topic_creation": False})

    def brokers(self, topic: str | None = None):
        """(broker id → (host, port), the topic's partition → leader id) from Metadata."""
        meta = self.metadata([topic] if topic else [])
        brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
        leaders = {}
        for t in meta.topics:
            check(t.error_code, f"topic {topic}")
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
        return brokers, leaders

    def leader_of(self, topic: str, partition: int) -> tuple[str, int]:
        brokers, leaders = self.brokers(topic)
        if leaders.get(partition, -1) not in brokers:
            raise click.ClickException(f"{topic}-{partition} has no leader (does the partition exist?)")
        return brokers[leaders[partition]]


def check(code: ErrorCode, doing: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise click.ClickException(f"{doing}: {message or code.name.upper()} ({code.name.upper()})")
