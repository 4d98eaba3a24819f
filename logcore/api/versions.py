"""ApiVersions: the supported-versions table, derived from the registered handlers. A version the
broker lacks never reaches here: the connection answers it in v0 with the table (see connection.py)."""

import re

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.connection import supported_api_keys
from ..protocol.errors import InvalidRequest
from . import SUPPORTED, handles

# Kafka's rule for the v3+ client software name and version (KIP-511)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx, request) -> dict:
    for name in ("client_software_name", "client_software_version"):
        value = getattr(request, name, None)
        if value is not None and not _SOFTWARE.fullmatch(value):
            raise InvalidRequest(f"{name} {value!r} must be letters, digits, '.' and '-', "
                                 "starting and ending with a letter or digit")
    return {"error_code": ErrorCode.none, "api_keys": supported_api_keys(SUPPORTED), "finalized_features_epoch": -1}
