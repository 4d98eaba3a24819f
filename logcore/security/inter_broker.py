"""How a broker reaches the others over the inter-broker listener (replica fetches, transaction
markers): that listener's protocol, its TLS as a client, and for SASL the mechanism
`sasl.mechanism.inter.broker.protocol` with the `username` and `password` options of the listener's
JAAS line for it, as in Kafka:

    inter.broker.listener.name=INTERNAL
    listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL
    sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
    listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\
        required username="broker" password="broker-secret";

With an authorizer, that user is the brokers' principal: make it a super user.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from ..protocol.errors import InvalidConfig
from . import jaas, tls
from .listeners import Listener
from .per_listener import setting
from .sasl import MECHANISMS


@dataclass(frozen=True)
class PeerSecurity:
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None  # SASL, with these credentials
    username: str = ""
    password: str = ""


def peer_security(config, listener: Listener) -> PeerSecurity | None:
    """What connecting over `listener` takes (None: PLAINTEXT)."""
    if not (listener.tls or listener.sasl):
        return None
    context = tls.client_context(lambda key: setting(config, listener, key)) if listener.tls else None
    if not listener.sasl:
        return PeerSecurity(context)
    mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
    if mechanism not in MECHANISMS:
        raise InvalidConfig(f"sasl.mechanism.inter.broker.protocol={mechanism}: brokers authenticate to each other "
                            f"over {listener.name} ({listener.protocol}) with one of {', '.join(MECHANISMS)}")
    line = setting(config, listener, "sasl.jaas.config", mechanism)
    options = jaas.parse(f"the JAAS line of listener {listener.name} for {mechanism}", line).options if line else {}
    if not options.get("username") or "password" not in options:
        raise InvalidConfig(f"brokers authenticate to each other over {listener.name} with {mechanism}: give its JAAS "
                            f"line (listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config) "
                            f'username="…" password="…" options')
    return PeerSecurity(context, mechanism, options["username"], options["password"])
