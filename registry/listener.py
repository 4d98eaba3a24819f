"""The REST listener's security: TLS (server certificate, optional client certificates) and HTTP Basic
authentication against a users file, as Confluent's registry offers (`listeners=https://...`,
`ssl.*`, `authentication.method=BASIC`).

The users file is the format Confluent's registry reads through Jetty's PropertyFileLoginModule, one
user a line: `name: password[,role...]` (roles are read and ignored: every user may do everything).
Jetty's obfuscated and hashed forms (`OBF:`, `MD5:`, `CRYPT:`) are refused, naming the line.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ssl
from pathlib import Path

from aiohttp import web

REALM = "SchemaRegistry"


class ListenerConfigError(ValueError):
    pass


def server_tls(cert_file: str, key_file: str | None, ca_file: str | None, client_auth: str) -> ssl.SSLContext:
    """TLS 1.2+ with `cert_file` (and `key_file`, or the key in `cert_file`); `client_auth` none,
    requested or required, the client certificates checked against `ca_file`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
        if ca_file:
            context.load_verify_locations(ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ListenerConfigError(f"cannot load the listener's TLS files ({cert_file}, {key_file}, {ca_file}): "
                                  f"{exc}") from None
    if client_auth != "none" and not ca_file:
        raise ListenerConfigError(f"--tls-client-auth {client_auth} needs --tls-ca: the CAs that sign client "
                                  "certificates")
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[client_auth]
    return context


def client_tls(ca_file: str | None, cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """How an instance forwards a write to the leader over TLS: it trusts `ca_file` (else the system's
    CAs) and shows its own certificate, for a leader that requires client certificates."""
    context = ssl.create_default_context(cafile=ca_file)
    context.load_cert_chain(cert_file, key_file)
    return context


def load_users(path: str) -> dict[str, str]:
    """name -> password from a users file."""
    users: dict[str, str] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ListenerConfigError(f"cannot read the users file: {exc}") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, colon, rest = line.partition(":")
        password = rest.split(",")[0].strip()
        if not colon or not name.strip() or not password:
            raise ListenerConfigError(f"{path}:{number}: expected `name: password[,role...]`")
        if password.startswith(("OBF:", "MD5:", "CRYPT:")):
            raise ListenerConfigError(f"{path}:{number}: {password.split(':')[0]}: passwords are not supported; "
                                      "give the password itself (and protect the file)")
        users[name.strip()] = password
    if not users:
        raise ListenerConfigError(f"{path}: no user (lines `name: password[,role...]`)")
    return users


def basic_auth(users: dict[str, str]):
    """A middleware that answers 401 (Confluent's body, and a Basic challenge) unless the request carries
    the password of a user."""
    def unauthorized(message: str) -> web.Response:
        return web.json_response({"error_code": 401, "message": message}, status=401,
                                 headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})

    @web.middleware
    async def authenticate(request: web.Request, handler):
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return unauthorized("Unauthorized: this registry asks for HTTP Basic credentials")
        try:
            name, _, password = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return unauthorized("Unauthorized: the Basic credentials are not base64 of name:password")
        expected = users.get(name)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return unauthorized("Unauthorized")
        return await handler(request)
    return authenticate
