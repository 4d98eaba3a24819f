"""Kafka's listener settings: `listeners`, `advertised.listeners`, `listener.security.protocol.map`
and `inter.broker.listener.name`, read into one `Listener` per bound socket.

    listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093
    listeners=INTERNAL://:9092,EXTERNAL://:9093
    listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL

Every problem is an InvalidConfig naming the setting and what to write instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.errors import InvalidConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}


@dataclass(frozen=True)
class Listener:
    name: str          # PLAINTEXT, SASL_SSL, or a name the protocol map gives a protocol (INTERNAL)
    protocol: str      # one of PROTOCOLS
    host: str          # to bind ("" or 0.0.0.0: every interface)
    port: int          # 0: any free port
    advertised_host: str | None = None  # what Metadata tells clients, if not the bound address
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_endpoints(setting: str, value: str) -> list[tuple[str, str, int]]:
    """`NAME://host:port,...` → [(NAME, host, port)]."""
    endpoints = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon or not port.isdigit():
            raise InvalidConfig(f"{setting}: {item!r} is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092)")
        endpoints.append((name.upper(), host.strip("[]"), int(port)))
    names = [name for name, _, _ in endpoints]
    if len(set(names)) < len(names):
        raise InvalidConfig(f"{setting}: each listener name may appear once, got {', '.join(names)}")
    return endpoints


def parse_protocol_map(value: str | None) -> dict[str, str]:
    if not value:
        return dict(DEFAULT_PROTOCOL_MAP)
    mapping = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise InvalidConfig(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                                f"{', '.join(PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol.upper()
    return mapping


def listeners_from(config, default_host: str, default_port: int) -> tuple[list[Listener], Listener]:
    """(every listener, the one brokers replicate over) from the broker config; without `listeners`,
    one PLAINTEXT listener on --listen's address."""
    protocols = parse_protocol_map(config.get("listener.security.protocol.map"))
    configured = config.get("listeners")
    bound = parse_endpoints("listeners", configured) if configured else [("PLAINTEXT", default_host, default_port)]
    advertised = {}
    raw_advertised = config.get("advertised.listeners")
    if raw_advertised:
        if "://" not in raw_advertised:  # (binlake's earlier form: one host:port for the only listener)
            raw_advertised = f"{bound[0][0]}://{raw_advertised}"
        advertised = {name: (host, port) for name, host, port in parse_endpoints("advertised.listeners", raw_advertised)}
    listeners = []
    for name, host, port in bound:
        if name not in protocols:
            raise InvalidConfig(f"listeners: listener {name} has no security protocol: name one of {', '.join(PROTOCOLS)} "
                                f"or map it in listener.security.protocol.map (e.g. {name}:SASL_SSL)")
        shown = advertised.get(name, (None, None))
        listeners.append(Listener(name, protocols[name], host, port, *shown))
    unknown = sorted(set(advertised) - {listener.name for listener in listeners})
    if unknown:
        raise InvalidConfig(f"advertised.listeners: {', '.join(unknown)} is not in listeners")
    inter = config.get("inter.broker.listener.name")
    if inter is None:
        inter_listener = next((l for l in listeners if l.name == "PLAINTEXT"), listeners[0])
    else:
        inter_listener = next((l for l in listeners if l.name == inter.upper()), None)
        if inter_listener is None:
            raise InvalidConfig(f"inter.broker.listener.name: {inter} is not in listeners "
                                f"({', '.join(l.name for l in listeners)})")
    return listeners, inter_listener
