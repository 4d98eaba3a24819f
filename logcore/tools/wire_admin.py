"""A blocking Kafka-protocol connection for short-lived admin commands that need APIs no Python
client library offers (WriteTxnMarkers, DescribeTransactions, a debugging Fetch from followers):
the sans-IO `ClientConnection` (protocol/client.py) over one socket per broker, with TLS and SASL
from the clients' security settings (`KafkaSecurity`, which `--command-config` gives)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import click

from common.kafka_security import KafkaSecurity

from ..protocol.client import NEED_DATA, ClientConnection, RemoteProtocolError
from ..protocol.codec import ApiKey, ErrorCode
from ..security.sasl import AuthenticationFailed
from ..security.sasl_client import SaslLogin
from .command_config import kafka_security

TIMEOUT_S = 30.0
READ_SIZE = 1 << 16

bootstrap_option = click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                                help="brokers to connect to (the first that answers)")
command_config_option = click.option(
    "--command-config", "security", type=click.Path(exists=True, dir_okay=False), callback=lambda _c, _p, path:
    kafka_security(path), help="client properties for a secured listener (as Kafka's tools take them)")


@dataclass
class _Link:
    sock: socket.socket
    conn: ClientConnection


class WireAdmin:
    def __init__(self, bootstrap: str, client_id: str, security: KafkaSecurity | None = None) -> None:
        self.bootstraps = []
        for server in bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise click.BadParameter(f"expected HOST:PORT, got {server!r}", param_hint="--bootstrap-server")
            self.bootstraps.append((host, int(port)))
        self.client_id = client_id
        self.security = security
        self._links: dict[tuple[str, int], _Link] = {}

    def close(self) -> None:
        for link in self._links.values():
            link.sock.close()

    def call(self, api_key: ApiKey, version: int, data: dict, address: tuple[str, int] | None = None):
        """Ask `address`, or the first bootstrap server that answers."""
        link = self._connect(address) if address else self._bootstrap()
        return self._exchange(link, link.conn.send_data(api_key, version, data))

    def _exchange(self, link: _Link, frame: bytes):
        try:
            link.sock.sendall(frame)
            while (event := link.conn.next_event()) is NEED_DATA:
                link.conn.receive_data(link.sock.recv(READ_SIZE))
        except RemoteProtocolError as exc:
            raise click.ClickException(f"the broker broke the protocol: {exc}") from None
        if event is None:
            raise click.ClickException("the broker closed the connection")
        return event.body

    def _connect(self, address: tuple[str, int]) -> _Link:
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = self._open(address)
        return link

    def _open(self, address: tuple[str, int]) -> _Link:
        security = self.security or KafkaSecurity()
        try:
            sock = socket.create_connection(address, timeout=TIMEOUT_S)
            if security.tls:
                sock = security.aiokafka()["ssl_context"].wrap_socket(sock, server_hostname=address[0])
        except OSError as exc:  # (ssl.SSLError among them)
            raise click.ClickException(f"cannot connect to {address[0]}:{address[1]}: {exc}") from None
        link = _Link(sock, ClientConnection(self.client_id))
        if security.sasl:
            login = SaslLogin(security.sasl_mechanism, security.username, security.password.get_secret_value())
            try:
                request = login.first()
                while request is not None:
                    request = login.answer(self._exchange(link, link.conn.send(request)))
            except AuthenticationFailed as exc:
                sock.close()
                raise click.ClickException(f"cannot authenticate to {address[0]}:{address[1]}: {exc}") from None
        return link

    def _bootstrap(self) -> _Link:
        for address in self.bootstraps[:-1]:
            try:
                return self._connect(address)
            except click.ClickException:
                continue
        return self._connect(self.bootstraps[-1])

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
