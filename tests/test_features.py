"""UpdateFeatures: `transaction.version` changed while brokers run, as `kafka-features upgrade|downgrade`
does it, seen in ApiVersions' finalized features (what clients read to pick transactions v2), kept
across a restart, and in a cluster the same on every broker."""

from __future__ import annotations

from waiting import wait_for
from wire import WireClient

from logcore.protocol.codec import ApiKey, ErrorCode, build, request_class
from testkit.clusterproc import LocalCluster

UPGRADE, SAFE_DOWNGRADE = 1, 2


def call(address: str, api_key: ApiKey, version: int, data: dict):
    with WireClient(address) as client:
        return client.call(build(request_class(api_key, version), data))


def finalized(address: str) -> tuple[dict[str, int], int]:
    answer = call(address, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return {f.name: f.max_version_level for f in answer.finalized_features}, answer.finalized_features_epoch


def update(address: str, level: int, upgrade_type: int = UPGRADE, feature: str = "transaction.version",
           validate_only: bool = False):
    return call(address, ApiKey.UPDATE_FEATURES, 1, {
        "timeout": 30000, "validate_only": validate_only,
        "feature_updates": [{"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}]})


def test_transaction_version_goes_down_and_up_only_as_asked_and_survives_a_restart(broker):
    levels, epoch = finalized(broker.address)
    assert levels["transaction.version"] == 2
    assert update(broker.address, 0, SAFE_DOWNGRADE, validate_only=True).error_code == ErrorCode.none
    assert finalized(broker.address) == (levels, epoch)  # (validate_only applies nothing)

    refused = update(broker.address, 0, UPGRADE)  # a downgrade that does not say so
    assert refused.error_code == ErrorCode.invalid_update_version and "downgrade" in refused.error_message
    for feature, level, word in (("group.version", 0, "group.coordinator.rebalance.protocols"),
                                 ("no.such.feature", 1, "unknown feature"),
                                 ("transaction.version", 3, "outside")):
        refused = update(broker.address, level, SAFE_DOWNGRADE if level == 0 else UPGRADE, feature=feature)
        assert refused.error_code == ErrorCode.invalid_update_version and word in refused.error_message, refused
    assert finalized(broker.address) == (levels, epoch)

    done = update(broker.address, 0, SAFE_DOWNGRADE)
    assert done.error_code == ErrorCode.none and done.results[0].error_code == ErrorCode.none
    levels_now, epoch_now = finalized(broker.address)
    assert "transaction.version" not in levels_now and epoch_now > epoch  # (level 0 is not listed)
    broker.kill()
    broker.start()
    assert finalized(broker.address) == (levels_now, epoch_now)
    assert update(broker.address, 2).error_code == ErrorCode.none
    assert finalized(broker.address)[0]["transaction.version"] == 2


def test_in_a_cluster_every_broker_finalizes_the_level_one_broker_was_given(tmp_path):
    nodes = LocalCluster(tmp_path / "cluster", 2, {}).start()
    try:
        first, second = (b.address for b in nodes.brokers)
        assert update(first, 1, SAFE_DOWNGRADE).error_code == ErrorCode.none
        wait_for(lambda: finalized(second)[0].get("transaction.version") == 1, "the level on the other broker")
        assert finalized(first)[1] == finalized(second)[1]  # the same epoch
    finally:
        nodes.stop()
