"""Request handlers: one per API key, never per version.

A handler is `async def handler(ctx, request) -> dict | None`: it reads the kio request entity of
whatever version arrived and returns neutral response data (see `logcore.protocol.codec.build`),
or None when no response is due (produce with acks=0). The version range it declares is exactly
what ApiVersions advertises.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..protocol.codec import ApiKey

if TYPE_CHECKING:
    from ..broker import Broker

Handler = Callable[["RequestContext", Any], Awaitable[dict | None]]
HANDLERS: dict[int, Handler] = {}
SUPPORTED: dict[int, tuple[int, int]] = {}


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: "Broker"
    api_version: int
    client_id: str | None
    client_host: str
    listener: str = "PLAINTEXT"        # the listener the request came in on: Metadata answers with its addresses
    principal: str = "User:ANONYMOUS"  # who sent it: the SASL user, else Kafka's anonymous principal


def handles(api_key: ApiKey, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    # kio's schema modules load on first use: importing all ~400 of them costs 2 s per broker start.
    # tests/test_api_schemas.py checks that kio has every version declared here.
    def register(handler: Handler) -> Handler:
        HANDLERS[api_key] = handler
        SUPPORTED[api_key] = (min_version, max_version)
        return handler

    return register


def load_handlers() -> dict[int, tuple[int, int]]:
    """Import every handler module of this package; returns the supported-versions table."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return SUPPORTED
