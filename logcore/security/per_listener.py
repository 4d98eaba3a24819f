"""What each listener needs, from the broker config: its TLS context and its SASL sessions. Any
`ssl.*` or `sasl.*` setting may be given for one listener as `listener.name.<name>.<setting>`
(lower-case name), and a mechanism's JAAS line as `listener.name.<name>.<mechanism>.sasl.jaas.config`,
as in Kafka."""

from __future__ import annotations

from collections.abc import Callable

from ..protocol.errors import InvalidConfig
from . import jaas, tls
from .listeners import Listener
from .sasl import MECHANISMS, SCRAM_HASHES, Plain, SaslSession, Scram

def setting(config, listener: Listener, key: str, mechanism: str | None = None):
    """The listener's own value of `key` (`listener.name.<l>[.<mechanism>].<key>`), else the broker's."""
    prefix = f"listener.name.{listener.name.lower()}." + (f"{mechanism.lower()}." if mechanism else "")
    own = config.raw.get(prefix + key)
    return own if own is not None else config.get(key)


def tls_context(config, listener: Listener):
    return tls.server_context(lambda key: setting(config, listener, key)) if listener.tls else None


def sasl_sessions(config, listener: Listener, credentials) -> Callable[[], SaslSession] | None:
    """A factory of one connection's SaslSession, with the listener's enabled mechanisms; PLAIN's
    users come from the PlainLoginModule JAAS line, SCRAM's credentials from `credentials`."""
    if not listener.sasl:
        return None
    raw = setting(config, listener, "sasl.enabled.mechanisms")
    enabled = [m.strip().upper() for m in (raw if isinstance(raw, list) else str(raw).split(",")) if m.strip()]
    unsupported = [m for m in enabled if m not in MECHANISMS]
    if unsupported or not enabled:
        raise InvalidConfig(f"sasl.enabled.mechanisms for listener {listener.name}: binlake offers "
                            f"{', '.join(MECHANISMS)}; {', '.join(unsupported) or 'none is enabled'} cannot be used")
    factories: dict[str, Callable[[], Plain | Scram]] = {}
    for mechanism in enabled:
        if mechanism == "PLAIN":
            line = setting(config, listener, "sasl.jaas.config", "plain")
            entry = jaas.parse(f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config", line) if line else None
            if entry is None or entry.module != jaas.PLAIN_MODULE:
                raise InvalidConfig(f"listener {listener.name} enables PLAIN but has no users: set "
                                    f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config={jaas.PLAIN_MODULE} "
                                    f'required user_alice="alice-secret";')
            users = entry.plain_users
            factories["PLAIN"] = lambda users=users: Plain(users)
        else:
            assert mechanism in SCRAM_HASHES
            factories[mechanism] = lambda mechanism=mechanism: Scram(mechanism, credentials.get)
    lifetime_ms = config.get("connections.max.reauth.ms")
    return lambda: SaslSession(factories, lifetime_ms)
