"""ApiVersions: the supported-versions table, derived from the registered handlers, and the
features (KIP-584) as Kafka 4 reports them. A version the broker lacks never reaches here: the
connection answers it in v0 with the table (see connection.py).

Features: `group.version` 1 means the consumer group protocol (KIP-848) is on; it is finalized at
1 when `group.coordinator.rebalance.protocols` has `consumer`, and then, only then, are
ConsumerGroupHeartbeat and ConsumerGroupDescribe listed. `share.version` 1 means share groups
(KIP-932) are on: finalized at 1 when the protocols have `share`, alone or in a ZooKeeper cluster,
and only then are the share APIs (ShareGroupHeartbeat ... DeleteShareGroupOffsets, and the
share coordinator's Initialize/Read/Write/DeleteShareGroupState and ReadShareGroupStateSummary
between brokers) listed. `transaction.version` 2 (the broker setting of that name, 2 by default)
tells producers to run transactions v2 (KIP-890 part 2: Produce v12 and TxnOffsetCommit v5 add
partitions to the transaction, EndTxn v5 bumps the epoch), as Kafka 4 does; the APIs of both
versions are listed either way, since a broker serves both. UpdateFeatures changes
`transaction.version` while the brokers run (logcore/features.py, api/features.py)."""

import re

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.connection import supported_api_keys
from ..protocol.errors import InvalidRequest
from . import SUPPORTED, handles

# Kafka's rule for the v3+ client software name and version (KIP-511)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


SUPPORTED_FEATURES = {"group.version": (0, 1), "share.version": (0, 1), "transaction.version": (0, 2)}  # name → (min, max) level this broker can run
CONSUMER_PROTOCOL_APIS = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)
SHARE_GROUP_APIS = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
                    ApiKey.SHARE_ACKNOWLEDGE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                    ApiKey.DELETE_SHARE_GROUP_OFFSETS, ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                    ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)


def feature_levels(config, features) -> dict[str, int]:
    """The level of each feature this broker runs at: the settings', then UpdateFeatures' (`features`)."""
    protocols = config.get("group.coordinator.rebalance.protocols")
    return {"group.version": 1 if "consumer" in protocols else 0,
            "share.version": 1 if "share" in protocols else 0,
            "transaction.version": config.get("transaction.version"), **features.levels}


def finalized_features(config, features) -> dict[str, int]:
    """The features as ApiVersions lists them (a level-0 feature is not listed, as in Kafka)."""
    levels = feature_levels(config, features)
    return {name: level for name, level in levels.items() if level}


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx, request) -> dict:
    for name in ("client_software_name", "client_software_version"):
        value = getattr(request, name, None)
        if value is not None and not _SOFTWARE.fullmatch(value):
            raise InvalidRequest(f"{name} {value!r} must be letters, digits, '.' and '-', "
                                 "starting and ending with a letter or digit")
    finalized = finalized_features(ctx.config, ctx.features)
    hidden = (() if finalized.get("group.version") else CONSUMER_PROTOCOL_APIS) + (
        () if finalized.get("share.version") else SHARE_GROUP_APIS)
    return {"error_code": ErrorCode.none,
            "api_keys": supported_api_keys({k: v for k, v in SUPPORTED.items() if k not in hidden}),
            "supported_features": [{"name": name, "min_version": low, "max_version": high}
                                   for name, (low, high) in SUPPORTED_FEATURES.items()],
            "finalized_features_epoch": ctx.features.epoch,
            "finalized_features": [{"name": name, "min_version_level": level, "max_version_level": level}
                                   for name, level in finalized.items()]}
