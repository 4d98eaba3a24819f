"""Group configs (KIP-848, KIP-932): per-group overrides of the broker's group settings, as Kafka's
GroupConfig — the ConfigResource type GROUP (32) of DescribeConfigs and IncrementalAlterConfigs.

A group config's value comes from the group's own override, else the broker's `group.*` setting
(`consumer.session.timeout.ms` ← `group.consumer.session.timeout.ms`), else the Kafka default. An
override must lie within the broker's bounds (`group.consumer.min.session.timeout.ms` ...). The
group need not exist. A broker alone keeps the overrides in `group-configs.json` in its data
directory; a cluster in ZooKeeper under /config/groups/<group> ({"version": 1, "config": {...}}),
beside /config/topics, so the group's coordinator reads them wherever they were set.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

from .config import (AlterOp, BrokerConfig, ConfigDef, ConfigEntry, ConfigSource, _one_of, known_definition,
                     overridable_entry, parse_value)
from .protocol.errors import InvalidConfig, InvalidRequest
from .storage.files import write_atomically


GROUPS = "/config/groups"

log = logging.getLogger(__name__)

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
BY_DURATION = "by_duration:"


def duration_ms(reset: str) -> int:
    """The milliseconds of a `by_duration:` share.auto.offset.reset (validated: `_offset_reset`)."""
    days, hours, minutes, seconds = _DURATION.fullmatch(reset[len(BY_DURATION):]).groups()
    return int((((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60 + float(seconds or 0)) * 1000)


def _offset_reset(value: str) -> str | None:
    if value in ("latest", "earliest"):
        return None
    if value.startswith(BY_DURATION) and _DURATION.fullmatch(value[12:]) and value[12:] not in ("P", "PT"):
        return None
    return "must be latest, earliest or by_duration:<ISO-8601 duration> (by_duration:PT1H)"


GROUP_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    ConfigDef("consumer.session.timeout.ms", "int", 45000,
              "a consumer group member's session timeout", ("group.consumer.session.timeout.ms",)),
    ConfigDef("consumer.heartbeat.interval.ms", "int", 5000,
              "how often a consumer group member heartbeats", ("group.consumer.heartbeat.interval.ms",)),
    ConfigDef("share.session.timeout.ms", "int", 45000,
              "a share group member's session timeout", ("group.share.session.timeout.ms",)),
    ConfigDef("share.heartbeat.interval.ms", "int", 5000,
              "how often a share group member heartbeats", ("group.share.heartbeat.interval.ms",)),
    ConfigDef("share.record.lock.duration.ms", "int", 30000,
              "how long a share group member holds the records it acquired",
              ("group.share.record.lock.duration.ms",)),
    ConfigDef("share.auto.offset.reset", "string", "latest",
              "where a share group starts on a partition it has no offset for", check=_offset_reset),
    ConfigDef("share.isolation.level", "string", "read_uncommitted",
              "whether a share group reads records of open or aborted transactions",
              check=_one_of("read_committed", "read_uncommitted")),
]}

# Each bounded config: the broker settings of its least and greatest value.
_BOUNDS = {
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
}
# (heartbeat interval, session timeout): the first must be below the second.
_BELOW = [("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"),
          ("share.heartbeat.interval.ms", "share.session.timeout.ms")]


def validate_group_id(group: str) -> None:
    if not group:
        raise InvalidRequest("a group config resource needs the group's id, got an empty name")


def _definition(key: str) -> ConfigDef:
    return known_definition(GROUP_CONFIGS, "group", key)


def effective_group_config(broker: BrokerConfig, store, group_id: str) -> "GroupConfig":
    """Group `group_id`'s configs from `store` (its overrides) over the broker's; the broker's alone,
    with a warning, when the overrides no longer fit the broker's bounds (changed since they were set)."""
    try:
        return GroupConfig(broker, store.get(group_id))
    except InvalidConfig as exc:
        log.warning("group %s: ignoring its configs (%s); using the broker's", group_id, exc)
        return GroupConfig(broker, {})


class GroupConfig:
    """One group's effective configs: its overrides over the broker's group settings. Immutable;
    building one validates the overrides against the broker's bounds."""

    def __init__(self, broker: BrokerConfig, overrides: dict[str, str]) -> None:
        self.broker = broker
        self.raw = dict(overrides)
        self.overrides = {key: parse_value(_definition(key), raw) for key, raw in overrides.items()}
        self._values = {key: self.overrides[key] if key in self.overrides else broker.topic_default(d)[0]
                        for key, d in GROUP_CONFIGS.items()}
        for key, value in self.overrides.items():
            if key in _BOUNDS:
                low, high = (broker.get(name) for name in _BOUNDS[key])
                if not low <= value <= high:
                    raise InvalidConfig(f"{key}={value} is outside the broker's bounds [{low}, {high}] "
                                        f"({_BOUNDS[key][0]}, {_BOUNDS[key][1]})")
        for shorter, longer in _BELOW:
            if (shorter in self.overrides or longer in self.overrides) and self[shorter] >= self[longer]:
                raise InvalidConfig(f"{shorter} ({self[shorter]}) must be less than {longer} ({self[longer]})")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def describe(self, key: str) -> ConfigEntry:
        return overridable_entry(self.broker, GROUP_CONFIGS[key], self[key], self.overrides, ConfigSource.GROUP_CONFIG)

    def altered(self, ops: list[tuple[str, AlterOp, str | None]]) -> dict[str, str]:
        """The override set after IncrementalAlterConfigs `ops`; none of the group configs is a list."""
        raw = dict(self.raw)
        for key, op, value in ops:
            _definition(key)
            if op is AlterOp.DELETE:
                raw.pop(key, None)
            elif op is not AlterOp.SET:
                raise InvalidConfig(f"{op.name} works on list configs only; {key} is not one")
            elif value is None:
                raise InvalidRequest(f"SET of {key} needs a value")
            else:
                raw[key] = value
        GroupConfig(self.broker, raw)  # validates
        return raw


class FileGroupConfigs:
    """A broker alone: group → overrides, in one JSON file replaced atomically. Event loop only."""

    def __init__(self, data_dir: str) -> None:
        self.path = Path(data_dir) / "group-configs.json"
        self.groups: dict[str, dict[str, str]] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, group: str) -> dict[str, str]:
        return dict(self.groups.get(group, {}))

    def names(self) -> list[str]:
        return sorted(self.groups)

    def put(self, group: str, overrides: dict[str, str]) -> None:
        if overrides:
            self.groups[group] = dict(overrides)
        else:
            self.groups.pop(group, None)
        write_atomically(str(self.path), json.dumps(self.groups, indent=1))


class ZooKeeperGroupConfigs:
    """A cluster: /config/groups/<group>. A group's overrides are read once (one ZooKeeper round trip,
    the first time the group is asked for) and then kept current by a watch, so the coordinator reads
    them on every heartbeat without a round trip; `put` and `names` block (call them off the event loop)."""

    def __init__(self, zk) -> None:
        self.zk = zk
        self._cache: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def get(self, group: str) -> dict[str, str]:
        with self._lock:
            cached = self._cache.get(group)
        if cached is None:
            from kazoo.recipe.watchers import DataWatch
            DataWatch(self.zk, f"{GROUPS}/{group}", lambda data, _stat, _event=None: self._changed(group, data))
            with self._lock:
                cached = self._cache.setdefault(group, {})
        return dict(cached)

    def _changed(self, group: str, data: bytes | None) -> None:
        config = json.loads(data).get("config", {}) if data else {}
        with self._lock:
            self._cache[group] = config

    def names(self) -> list[str]:
        return sorted(self.zk.get_children(GROUPS)) if self.zk.exists(GROUPS) else []

    def put(self, group: str, overrides: dict[str, str]) -> None:
        path = f"{GROUPS}/{group}"
        data = json.dumps({"version": 1, "config": overrides}).encode()
        from kazoo.exceptions import NodeExistsError  # (kazoo only in a cluster, as above)
        try:
            self.zk.create(path, data, makepath=True)
        except NodeExistsError:  # (or another broker created it a moment ago, for the same group)
            self.zk.set(path, data)
        self._changed(group, data)
