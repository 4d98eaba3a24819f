"""SaslHandshake and SaslAuthenticate, as ApiVersions advertises them. On a SASL listener the
connection answers them itself while it authenticates (logcore.server, logcore.security.sasl);
(re-authentication too, KIP-368); a request that reaches a handler here came on a listener
without SASL, so it is out of place."""

from ..protocol.codec import ApiKey, ErrorCode
from . import handles


# v0 is advertised because librdkafka before 2.x looks for it to call SASL supported at all; it then
# sends v1. A v0 handshake (bare SASL tokens after it, outside Kafka's framing) is refused.
@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx, request) -> dict:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx, request) -> dict:
    return {"error_code": ErrorCode.illegal_sasl_state, "auth_bytes": b"", "session_lifetime": 0,
            "error_message": "this listener has no SASL: connect to a SASL_PLAINTEXT or SASL_SSL listener"}
