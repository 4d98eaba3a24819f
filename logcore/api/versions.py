"""ApiVersions: the supported-versions table, derived from the registered handlers."""

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.connection import supported_api_keys
from . import SUPPORTED, handles


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx, request) -> dict:
    return {"error_code": ErrorCode.none, "api_keys": supported_api_keys(SUPPORTED), "finalized_features_epoch": -1}
