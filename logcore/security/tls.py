"""The TLS side of SSL and SASL_SSL listeners, from Kafka's `ssl.*` settings, with the standard
library's `ssl`. Key and certificates are PEM files (Kafka's `ssl.keystore.type=PEM`, KIP-651):

    ssl.keystore.type=PEM
    ssl.keystore.location=/etc/binlake/broker.pem        # private key and certificate chain
    ssl.key.password=...                                 # if the key is encrypted
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/binlake/ca.pem          # CAs that sign client certificates
    ssl.client.auth=required                             # or requested, none (the default)

Each may be set for one listener as `listener.name.<name>.ssl.<key>`.
"""

from __future__ import annotations

import ssl

from ..protocol.errors import InvalidConfig

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(setting) -> ssl.SSLContext:
    """`setting(key)`: the listener's value of `ssl.<key>` (its own, else the broker's)."""
    for kind in ("keystore", "truststore"):
        store_type = (setting(f"ssl.{kind}.type") or "PEM").upper()
        if store_type != "PEM":
            raise InvalidConfig(f"ssl.{kind}.type={store_type}: binlake reads PEM files only; convert the store "
                                f"(e.g. `openssl pkcs12 -in store.p12 -nodes -out store.pem`) and set "
                                f"ssl.{kind}.type=PEM")
    keystore = setting("ssl.keystore.location")
    if not keystore:
        raise InvalidConfig("an SSL or SASL_SSL listener needs ssl.keystore.location: a PEM file with the "
                            "broker's private key and certificate chain")
    client_auth = (setting("ssl.client.auth") or "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise InvalidConfig(f"ssl.client.auth={client_auth}: write one of {', '.join(CLIENT_AUTH)}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=setting("ssl.key.password"))
        truststore = setting("ssl.truststore.location")
        if truststore:
            context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfig(f"cannot load the listener's TLS files ({keystore}): {exc}") from None
    if client_auth != "none" and not setting("ssl.truststore.location"):
        raise InvalidConfig(f"ssl.client.auth={client_auth} needs ssl.truststore.location: the CAs that sign "
                            f"client certificates")
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_context(setting) -> ssl.SSLContext:
    """A broker's TLS as the client of another broker: it trusts `ssl.truststore.location` (else the
    system's CAs), shows its own certificate (for `ssl.client.auth`), and checks the other's host
    name unless `ssl.endpoint.identification.algorithm` is empty, as Kafka does."""
    truststore = setting("ssl.truststore.location")
    try:
        context = ssl.create_default_context(cafile=truststore or None)
        context.load_cert_chain(setting("ssl.keystore.location"), password=setting("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfig(f"cannot load the TLS files brokers connect to each other with: {exc}") from None
    context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    return context
