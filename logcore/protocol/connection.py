"""Sans-IO server side of one Kafka connection: bytes in, request events out, response bytes out.

Owns framing (framing.py: 4-byte big-endian size, `max_frame_size`), header parsing and the choice of header
versions. It never touches a socket; `logcore.server` shrinks to read → feed → dispatch → write.
Errors say whose fault they are: `RemoteProtocolError` means the peer broke the framing and the
connection must close; a request that frames fine but cannot be parsed becomes a `Request` with
`error` set, to be answered with that error code.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from . import codec
from .bounds import MalformedRequest
from .codec import ErrorCode
from .framing import DEFAULT_MAX_FRAME, NEED_DATA, Frames, RemoteProtocolError, _NeedData

__all__ = ["DEFAULT_MAX_FRAME", "NEED_DATA", "RemoteProtocolError", "Request", "ServerConnection"]


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # kio request entity; None when `error` is set
    error: ErrorCode | None = None
    error_message: str = ""
    error_kind: str = ""  # what went wrong, in a few words, for the bad-input summary in the log


class ServerConnection:
    """Event-loop only; one per accepted socket. `supported` maps api_key → (min, max) version."""

    def __init__(self, supported: dict[int, tuple[int, int]], max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self._supported = supported
        self._frames = Frames(max_frame_size, 8, "socket.request.max.bytes")  # 8: api key, version, correlation id

    def receive_data(self, data: bytes) -> None:
        """Bytes as they arrive; b"" once the peer closed."""
        self._frames.receive_data(data)

    def next_event(self) -> Request | _NeedData | None:
        """The next whole request, NEED_DATA, or None once the peer closed and nothing is left."""
        frame = self._frames.next_frame()
        if frame is NEED_DATA or frame is None:
            return frame
        return self._parse(frame)

    def _parse(self, frame: bytes | memoryview) -> Request:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        limits = self._supported.get(api_key)
        if limits is None or not limits[0] <= version <= limits[1]:
            what = "api key" if limits is None else f"version {version} of api key"
            return Request(api_key, version, correlation_id, None, None, ErrorCode.unsupported_version,
                           f"{what} {api_key} is not supported (supported: {limits})", "unsupported api or version")
        cls = codec.request_class(api_key, version)
        try:
            header, body = codec.read_request(memoryview(frame), cls)
        except MalformedRequest as exc:
            return Request(api_key, version, correlation_id, None, None, ErrorCode.invalid_request,
                           f"malformed {cls.__name__} v{version}: {exc}", exc.kind)
        except Exception as exc:  # kio raises assorted errors on what the bounds check lets through (bad UTF-8, ...)
            return Request(api_key, version, correlation_id, None, None, ErrorCode.invalid_request,
                           f"malformed {cls.__name__} v{version}: {exc!r}", type(exc).__name__)
        return Request(api_key, version, correlation_id, header.client_id, body)

    def send(self, request: Request, data: dict) -> list[bytes | codec.FileRegion]:
        """Frame the response to `request` from neutral handler data."""
        return codec.encode_response(request.api_key, request.api_version, request.correlation_id, data)

    def send_error(self, request: Request, code: ErrorCode) -> list[bytes | codec.FileRegion]:
        """Answer a request we could not serve with `code` at the top level of its response."""
        if request.api_key == codec.ApiKey.API_VERSIONS:
            # Kafka answers an unknown ApiVersions version with v0 and the full table, so the
            # client can retry with a version both sides have.
            return self.send(Request(request.api_key, 0, request.correlation_id, None, None),
                             {"error_code": code, "api_keys": supported_api_keys(self._supported)})
        if codec.has_schema(request.api_key, request.api_version):
            return self.send(request, {"error_code": code})
        return [codec.encode_error_frame(request.correlation_id, code)]


def supported_api_keys(supported: dict[int, tuple[int, int]]) -> list[dict]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(supported.items())]
