"""Broker and topic configuration, with Kafka's names, types and defaults.

A topic config's value comes from, in order: the topic's own override, the broker's `--config`
file (under the broker synonym, e.g. `log.retention.ms`), the Kafka default. `TopicConfig` is an
immutable snapshot; altering a topic makes a new one.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .protocol.errors import InvalidConfig, InvalidRequest

_INTEGER = re.compile(r"\s*[-+]?[0-9]+\s*")
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigSource(enum.IntEnum):
    """Where a value comes from, numbered as Kafka's DescribeConfigs ConfigSource."""

    TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


Synonym = tuple[str, Any, ConfigSource]  # (config name, typed value, where it is set)


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # boolean | int | long | double | string | list | class | password
    default: Any
    doc: str
    broker_synonyms: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None  # returns why a value is wrong


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _connection_overrides(value: str) -> str | None:
    try:
        parse_connection_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


def parse_connection_overrides(value: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: `host:count,host:count` (an IPv6 host keeps its colons)."""
    overrides = {}
    for item in _split_list(value):
        host, _, count = item.rpartition(":")
        if not host or not _INTEGER.fullmatch(count) or int(count) < 0:
            raise ValueError(f"expected host:count with a count of at least 0, got {item!r}")
        overrides[host] = int(count)
    return overrides


def _host_port(value: str | None) -> str | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    return None if sep and port.isdigit() and int(port) < 65536 else f"must be HOST:PORT, e.g. 0.0.0.0:9308 (got {value!r})"


def _one_of(*allowed: str, empty_ok: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        values = v if isinstance(v, list) else [v]
        bad = [x for x in values if x not in allowed]
        return f"must be one of {', '.join(allowed)}" if bad or not (values or empty_ok) else None
    return check


def _not_preallocated(value: bool) -> str | None:
    return ("is not supported: segment files grow as they are written (an accepted setting that did nothing "
            "would be a lie); leave it false") if value else None


TOPIC_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    ConfigDef("cleanup.policy", "list", ["delete"],
              "delete old segments, compact by key, both, or neither (empty: keep everything, KAFKA-19112)",
              ("log.cleanup.policy",), _one_of("delete", "compact", empty_ok=True)),
    ConfigDef("compression.type", "string", "producer",
              "codec batches are stored in: as the producer sent them, or recompressed to this one",
              ("compression.type",), _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigDef("delete.retention.ms", "long", 86400000, "how long delete tombstones are kept when compacting",
              ("log.cleaner.delete.retention.ms",), _at_least(0)),
    ConfigDef("file.delete.delay.ms", "long", 60000, "delay before a deleted segment's files go",
              ("log.segment.delete.delay.ms",), _at_least(0)),
    ConfigDef("flush.messages", "long", LONG_MAX, "fsync after this many messages (1 = every append)",
              ("log.flush.interval.messages",), _at_least(1)),
    ConfigDef("flush.ms", "long", LONG_MAX, "fsync when data is older than this", ("log.flush.interval.ms",),
              _at_least(0)),
    ConfigDef("index.interval.bytes", "int", 4096, "bytes between offset index entries",
              ("log.index.interval.bytes",), _at_least(0)),
    ConfigDef("max.compaction.lag.ms", "long", LONG_MAX, "max time a message stays uncompacted",
              ("log.cleaner.max.compaction.lag.ms",), _at_least(1)),
    ConfigDef("max.message.bytes", "int", 1048588, "largest record batch accepted", ("message.max.bytes",),
              _at_least(0)),
    ConfigDef("message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime",
              ("log.message.timestamp.type",), _one_of("CreateTime", "LogAppendTime")),
    ConfigDef("message.timestamp.before.max.ms", "long", LONG_MAX, "how far in the past a timestamp may be",
              ("log.message.timestamp.before.max.ms",), _at_least(0)),
    ConfigDef("message.timestamp.after.max.ms", "long", 3600000, "how far in the future a timestamp may be",
              ("log.message.timestamp.after.max.ms",), _at_least(0)),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5, "dirty share of the log that triggers compaction",
              ("log.cleaner.min.cleanable.ratio",), _between(0, 1)),
    ConfigDef("min.compaction.lag.ms", "long", 0, "min time a message stays uncompacted",
              ("log.cleaner.min.compaction.lag.ms",), _at_least(0)),
    ConfigDef("min.insync.replicas", "int", 1, "replicas that must acknowledge acks=all writes",
              ("min.insync.replicas",), _at_least(1)),
    ConfigDef("preallocate", "boolean", False, "preallocate segment files (not supported: only false)",
              ("log.preallocate",), _not_preallocated),
    ConfigDef("retention.bytes", "long", -1, "size a partition may keep before old segments go (-1: no limit)",
              ("log.retention.bytes",)),
    ConfigDef("retention.ms", "long", 604800000, "age after which segments go (-1: keep forever)",
              ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    ConfigDef("segment.bytes", "int", 1073741824, "segment file size before a new one is rolled",
              ("log.segment.bytes",), _at_least(14)),
    ConfigDef("segment.index.bytes", "int", 10485760, "maximum size of a segment's offset index",
              ("log.index.size.max.bytes",), _at_least(8)),
    ConfigDef("segment.jitter.ms", "long", 0, "random jitter subtracted from segment.ms",
              ("log.roll.jitter.ms",), _at_least(0)),
    ConfigDef("segment.ms", "long", 604800000, "age after which a new segment is rolled", ("log.roll.ms",),
              _at_least(1)),
    ConfigDef("unclean.leader.election.enable", "boolean", False, "allow out-of-ISR leaders",
              ("unclean.leader.election.enable",)),
]}

BROKER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    ConfigDef("auto.create.topics.enable", "boolean", True, "create unknown topics on metadata requests"),
    ConfigDef("num.partitions", "int", 1, "partitions of auto-created topics", check=_at_least(1)),
    ConfigDef("default.replication.factor", "int", 1, "replication factor of auto-created topics",
              check=_at_least(1)),
    ConfigDef("delete.topic.enable", "boolean", True, "allow DeleteTopics"),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, "how often retention runs", check=_at_least(1)),
    ConfigDef("log.flush.scheduler.interval.ms", "long", 1000, "how often flush.ms is checked", check=_at_least(1)),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, "how often recovery points are written",
              check=_at_least(0)),
    ConfigDef("num.recovery.threads.per.data.dir", "int", 1,
              "threads that open (and after a crash recover) the logs at a start", check=_at_least(1)),
    ConfigDef("socket.request.max.bytes", "int", 104857600, "largest request frame", check=_at_least(1)),
    ConfigDef("max.connections", "int", INT_MAX, "connections the broker accepts at once; more are closed",
              check=_at_least(0)),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, "connections one IP address may hold; more are closed",
              check=_at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", "",
              "per-IP exceptions to max.connections.per.ip, as host:count,host:count", check=_connection_overrides),
    ConfigDef("connections.max.idle.ms", "long", 600000, "close connections idle this long (-1: never)",
              check=_at_least(-1)),
    ConfigDef("queued.max.requests", "int", 500,
              "requests read and not yet handled, across connections, before the broker stops reading",
              check=_at_least(1)),
    ConfigDef("max.request.partition.size.limit", "int", 2000,
              "most partitions one DescribeTopicPartitions response describes", check=_at_least(1)),
    ConfigDef("fetch.max.bytes", "int", 57671680, "most record bytes one fetch response carries", check=_at_least(0)),
    ConfigDef("log.retention.hours", "int", 168, "retention.ms in hours, when log.retention.ms is unset"),
    ConfigDef("log.retention.minutes", "int", None, "retention.ms in minutes, when log.retention.ms is unset"),
    # listeners and security (logcore/security, docs/security.md)
    ConfigDef("listeners", "string", None,
              "NAME://HOST:PORT,... to listen on, each with its security protocol (unset: PLAINTEXT on --listen)"),
    ConfigDef("advertised.listeners", "string", None,
              "NAME://HOST:PORT,... clients are told to connect to, per listener (unset: the bound addresses)"),
    ConfigDef("listener.security.protocol.map", "string", None,
              "NAME:PROTOCOL,... for listeners not named after their protocol (INTERNAL:PLAINTEXT)"),
    ConfigDef("inter.broker.listener.name", "string", None, "the listener brokers replicate over"),
    ConfigDef("sasl.enabled.mechanisms", "list", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms offered on SASL listeners (Kafka's default, GSSAPI, is not offered)"),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
              "SASL mechanism brokers authenticate to each other with, on a SASL inter-broker listener "
              "(Kafka's default, GSSAPI, is not offered: set PLAIN or SCRAM-SHA-256/512)"),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https",
              "https: a broker checks the host name in another broker's certificate; empty: it does not"),
    ConfigDef("sasl.jaas.config", "password", None,
              "a JAAS line; a PlainLoginModule's user_<name>=\"<password>\" options are the PLAIN users"),
    ConfigDef("ssl.keystore.location", "string", None, "PEM file with the broker's private key and certificates"),
    ConfigDef("ssl.keystore.type", "string", "PEM", "PEM (the only type binlake reads)"),
    ConfigDef("ssl.key.password", "password", None, "password of the keystore's private key, if encrypted"),
    ConfigDef("ssl.truststore.location", "string", None, "PEM file with the CAs that sign client certificates"),
    ConfigDef("ssl.truststore.type", "string", "PEM", "PEM (the only type binlake reads)"),
    ConfigDef("ssl.client.auth", "string", "none", "none, requested or required: ask clients for a certificate",
              check=lambda v: None if v.lower() in ("none", "requested", "required")
              else "write none, requested or required"),
    ConfigDef("authorizer.class.name", "string", None,
              "set to Kafka's kafka.security.authorizer.AclAuthorizer (or StandardAuthorizer) to enforce ACLs",
              check=_one_of("kafka.security.authorizer.AclAuthorizer",
                            "org.apache.kafka.metadata.authorizer.StandardAuthorizer", empty_ok=True)),
    ConfigDef("super.users", "string", None, "User:NAME;User:NAME... allowed everything whatever the ACLs say"),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", False,
              "with an authorizer: allow anyone on a resource no ACL applies to"),
    ConfigDef("connections.max.reauth.ms", "long", 0,
              "how long a SASL session lasts before the client must re-authenticate (KIP-368); 0: for ever",
              check=_at_least(0)),
    ConfigDef("prometheus.listener", "string", None,
              "HOST:PORT where the broker serves Prometheus metrics at /metrics (unset: no endpoint)",
              check=_host_port),
    ConfigDef("broker.id", "int", 0, "this broker's id (--broker-id overrides it)", check=_at_least(0)),
    ConfigDef("broker.rack", "string", None, "the rack this broker is in, as Metadata and DescribeCluster show it"),
    # a replicated cluster (logcore/cluster, logcore/replication)
    ConfigDef("zookeeper.connect", "string", None,
              "HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble to join a cluster through"),
    ConfigDef("zookeeper.session.timeout.ms", "int", 18000,
              "how long ZooKeeper keeps a silent broker's registration", check=_at_least(1)),
    ConfigDef("zookeeper.connection.timeout.ms", "int", 18000, "how long the broker waits to reach ZooKeeper",
              check=_at_least(1)),
    ConfigDef("replica.lag.time.max.ms", "long", 30000,
              "a follower that has not caught up for this long leaves the ISR", check=_at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, "how long a follower's fetch waits for new records",
              check=_at_least(0)),
    ConfigDef("replica.fetch.min.bytes", "int", 1, "bytes a follower's fetch waits for", check=_at_least(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, "bytes a follower fetches per partition",
              check=_at_least(1)),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, "bytes a follower fetches per request",
              check=_at_least(1)),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000, "how long a follower waits after a failed fetch",
              check=_at_least(0)),
    ConfigDef("replica.socket.timeout.ms", "int", 30000, "how long a follower waits for its leader's answer",
              check=_at_least(1)),
    ConfigDef("auto.leader.rebalance.enable", "boolean", True,
              "the controller gives leaderships back to preferred replicas when brokers are imbalanced"),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300,
              "how often the controller checks the leaders' balance", check=_at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10,
              "share of a broker's preferred partitions led elsewhere that triggers a rebalance",
              check=_at_least(0)),
    ConfigDef("controlled.shutdown.enable", "boolean", True,
              "on SIGTERM, move this broker's leaderships to in-sync followers before stopping"),
    ConfigDef("controlled.shutdown.max.retries", "int", 3,
              "a controlled shutdown waits max.retries x retry.backoff.ms for leaderships to move", check=_at_least(1)),
    ConfigDef("controlled.shutdown.retry.backoff.ms", "long", 5000,
              "a controlled shutdown waits max.retries x retry.backoff.ms for leaderships to move", check=_at_least(0)),
    # consumer groups (logcore/coordinator)
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, "wait for more members before the first rebalance",
              check=_at_least(0)),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, "smallest session.timeout.ms a member may ask for",
              check=_at_least(0)),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, "largest session.timeout.ms a member may ask for",
              check=_at_least(0)),
    ConfigDef("group.max.size", "int", INT_MAX, "most members one group may have", check=_at_least(1)),
    # the consumer group protocol (KIP-848, logcore/coordinator/consumer_*.py) and the group configs'
    # defaults and bounds (logcore/group_configs.py)
    ConfigDef("group.coordinator.rebalance.protocols", "list", ["classic", "consumer", "share"],
              "the group protocols the coordinator serves: classic (JoinGroup/SyncGroup), consumer "
              "(ConsumerGroupHeartbeat) and share (KIP-932 share groups)", check=_one_of("classic", "consumer", "share")),
    ConfigDef("group.consumer.assignors", "list", ["uniform", "range"],
              "the server-side assignors of consumer groups, the first the default", check=_one_of("uniform", "range")),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000, "a consumer group member's session timeout",
              check=_at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000,
              "smallest consumer.session.timeout.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000,
              "largest consumer.session.timeout.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000,
              "how often a consumer group member heartbeats", check=_at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000,
              "smallest consumer.heartbeat.interval.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000,
              "largest consumer.heartbeat.interval.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.consumer.max.size", "int", INT_MAX, "most members one consumer group may have",
              check=_at_least(1)),
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
              "which online migrations between the classic and consumer protocols a group may make: upgrade "
              "(a consumer-protocol member joins a classic group), downgrade (a consumer group's last "
              "consumer-protocol member leaves classic ones), bidirectional (both) or disabled",
              check=lambda v: _one_of("bidirectional", "upgrade", "downgrade", "disabled")(v.lower())),  # (as Kafka: any case)
    ConfigDef("group.share.session.timeout.ms", "int", 45000, "a share group member's session timeout",
              check=_at_least(1)),
    ConfigDef("group.share.min.session.timeout.ms", "int", 45000,
              "smallest share.session.timeout.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", "int", 60000,
              "largest share.session.timeout.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", "int", 5000, "how often a share group member heartbeats",
              check=_at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", "int", 5000,
              "smallest share.heartbeat.interval.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", "int", 15000,
              "largest share.heartbeat.interval.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.share.max.size", "int", 200, "most members one share group may have", check=_at_least(1)),
    ConfigDef("group.share.delivery.count.limit", "int", 5,
              "deliveries of a record to a share group after which it is archived, not redelivered",
              check=_between(2, 10)),
    ConfigDef("group.share.partition.max.record.locks", "int", 2000,
              "records of one share-partition that may be in flight (acquired or waiting) at once",
              check=_at_least(100)),
    ConfigDef("group.share.state.topic.num.partitions", "int", 50, "partitions of __share_group_state",
              check=_at_least(1)),
    ConfigDef("group.share.record.lock.duration.ms", "int", 30000,
              "how long a share group member holds the records it acquired", check=_at_least(1)),
    ConfigDef("group.share.min.record.lock.duration.ms", "int", 15000,
              "smallest share.record.lock.duration.ms a group config may set", check=_at_least(1)),
    ConfigDef("group.share.max.record.lock.duration.ms", "int", 60000,
              "largest share.record.lock.duration.ms a group config may set", check=_at_least(1)),
    ConfigDef("offsets.topic.num.partitions", "int", 50, "partitions of __consumer_offsets", check=_at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, "segment size of __consumer_offsets",
              check=_at_least(14)),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000,
              "how long an offset commit waits for the in-sync replicas before it fails", check=_at_least(1)),
    ConfigDef("offsets.topic.replication.factor", "int", 3,
              "replicas of __consumer_offsets, at most the brokers alive when it is created", check=_at_least(1)),
    ConfigDef("offsets.retention.minutes", "int", 10080, "how long an empty group's committed offsets are kept",
              check=_at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, "how often expired offsets are removed",
              check=_at_least(1)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096, "largest metadata string of a committed offset",
              check=_at_least(0)),
    # the log cleaner (logcore/storage/log_cleaner.py, compaction.py)
    ConfigDef("log.cleaner.enable", "boolean", True, "compact topics with cleanup.policy=compact"),
    ConfigDef("log.cleaner.threads", "int", 1, "cleaner worker processes", check=_at_least(1)),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134217728,
              "memory for the cleaners' key maps, shared by the workers", check=_at_least(1)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308,
              "bytes per second the cleaners read and write together", check=_between(1, float("inf"))),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000, "pause when no log needs cleaning", check=_at_least(0)),
    # idempotent and transactional producers (logcore/coordinator/transaction*.py, storage/producer_state.py)
    ConfigDef("transaction.state.log.num.partitions", "int", 50, "partitions of __transaction_state",
              check=_at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, "segment size of __transaction_state",
              check=_at_least(14)),
    ConfigDef("transaction.state.log.replication.factor", "int", 3,
              "replicas of __transaction_state, at most the brokers alive when it is created", check=_at_least(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 2,
              "min.insync.replicas of __transaction_state, at most its replication factor", check=_at_least(1)),
    ConfigDef("transaction.version", "int", 2,
              "the transaction.version feature finalized in ApiVersions: 2 lets clients run transactions v2 "
              "(KIP-890: the epoch bumped at each commit or abort, partitions added by the produce requests), "
              "0 keeps them on the protocol of KIP-98 (the broker serves both either way)",
              check=_between(0, 2)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, "largest transaction.timeout.ms a producer may ask for",
              check=_at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "how often transactions past their timeout are aborted", check=_at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000,
              "how long an idle transactional id is remembered", check=_at_least(1)),
    ConfigDef("producer.id.expiration.ms", "int", 86400000,
              "how long a partition remembers an idle producer's sequence numbers", check=_at_least(1)),
]}
# Broker-level synonyms of topic configs are valid broker config keys too.
for _topic_def in TOPIC_CONFIGS.values():
    for _synonym in _topic_def.broker_synonyms:
        BROKER_CONFIGS.setdefault(_synonym, ConfigDef(_synonym, _topic_def.type, _topic_def.default,
                                                      _topic_def.doc, check=_topic_def.check))


def parse_value(definition: ConfigDef, raw: Any) -> Any:
    """Convert a string (or already typed) value; InvalidConfig with the reason when it is wrong."""
    if raw is None:
        return None
    try:
        if definition.type == "boolean":
            value = raw if isinstance(raw, bool) else {"true": True, "false": False}[str(raw).strip().lower()]
        elif definition.type in ("int", "long"):
            if isinstance(raw, str) and not _INTEGER.fullmatch(raw):
                raise ValueError  # int() would also take "1_000"
            value = int(raw)
            limit = INT_MAX if definition.type == "int" else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError
        elif definition.type == "double":
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError
        elif definition.type == "list":
            value = raw if isinstance(raw, list) else _split_list(str(raw))
        else:
            value = str(raw)
    except (KeyError, ValueError):
        raise InvalidConfig(f"invalid value {raw!r} for configuration {definition.name}: expected a {definition.type}") from None
    if definition.check and (why := definition.check(value)):
        raise InvalidConfig(f"invalid value {raw!r} for configuration {definition.name}: {why}")
    return value


def _split_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def format_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


_LISTENER_KEY = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(?:(plain|scram-sha-256|scram-sha-512)\.)?"
                           r"(ssl\.[a-z.]+|sasl\.[a-z.]+)$")


def is_listener_setting(key: str) -> bool:
    """A `listener.name.<name>.…` key binlake reads (logcore/security/per_listener.py)."""
    return _LISTENER_KEY.match(key) is not None


def is_broker_setting(key: str) -> bool:
    """A key binlake reads from a broker's config: one of BROKER_CONFIGS, or a listener's own."""
    return key in BROKER_CONFIGS or is_listener_setting(key)


def read_properties(path: str) -> dict[str, str]:
    """The key=value lines of a server.properties-style file (`#` and `!` start comments)."""
    values = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            if "=" not in line:
                raise InvalidConfig(f"{path}:{number}: expected key=value, got {line!r}")
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


class BrokerConfig:
    """A broker's settings (static: a restart changes them). Only settings binlake knows are taken;
    `binlake broker`, like Kafka, warns about the other keys of its file and --override and leaves
    them out (logcore/tools/broker_cmd.py)."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.raw: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        for key, raw in (values or {}).items():
            self.set(key, raw)

    def set(self, key: str, raw: str) -> None:
        """Set one setting from its text; InvalidConfig for a key binlake does not know (a typo must
        not pass for the default) or a value its definition refuses."""
        if not is_broker_setting(key):
            raise InvalidConfig(f"broker setting {key!r} is not one binlake knows (a typo, or a Kafka setting binlake "
                                "does not have); `binlake configs --describe --all --entity-type brokers` lists them")
        self.raw[key] = raw
        if (definition := BROKER_CONFIGS.get(key)) is not None:
            self.values[key] = parse_value(definition, raw)

    def get(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        return BROKER_CONFIGS[key].default

    def connection_overrides(self) -> dict[str, int]:
        return parse_connection_overrides(self.get("max.connections.per.ip.overrides"))

    def topic_synonyms(self, definition: ConfigDef) -> list[Synonym]:
        """Broker-level places a topic config can be set, highest precedence first: the synonyms
        set in the config file (as written there, e.g. hours), then Kafka's default."""
        found: list[Synonym] = [(name, self.values[name], ConfigSource.STATIC_BROKER_CONFIG)
                                for name in definition.broker_synonyms if self.values.get(name) is not None]
        default_name = definition.broker_synonyms[0] if definition.broker_synonyms else definition.name
        found.append((default_name, definition.default, ConfigSource.DEFAULT_CONFIG))
        return found

    def topic_default(self, definition: ConfigDef) -> tuple[Any, ConfigSource]:
        """(value, source) of a topic config that the topic does not override."""
        name, value, source = self.topic_synonyms(definition)[0]
        return _in_topic_units(name, value), source

    def describe(self, key: str) -> ConfigEntry:
        """A broker setting as DescribeConfigs shows it. All are static: changing one means a restart."""
        definition = BROKER_CONFIGS[key]
        synonyms: list[Synonym] = []
        if key in self.values:
            synonyms.append((key, self.values[key], ConfigSource.STATIC_BROKER_CONFIG))
        synonyms.append((key, definition.default, ConfigSource.DEFAULT_CONFIG))
        return ConfigEntry(definition, self.get(key), synonyms[0][2], tuple(synonyms), read_only=True)


_TOPIC_UNITS = {"log.retention.minutes": 60000, "log.retention.hours": 3600000}


def _in_topic_units(broker_key: str, value: Any) -> Any:
    """A broker synonym's value in its topic config's unit (hours → ms); negative means unlimited."""
    scale = _TOPIC_UNITS.get(broker_key)
    if scale is None:
        return value
    return -1 if value < 0 else value * scale


@dataclass(frozen=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it: the effective value, where it comes from, and
    every place it is set (`synonyms`, highest precedence first, values as written there)."""

    definition: ConfigDef
    value: Any
    source: ConfigSource
    synonyms: tuple[Synonym, ...]
    read_only: bool


def overridable_entry(broker: BrokerConfig, definition: ConfigDef, value: Any, overrides: dict[str, Any],
                      source: ConfigSource) -> ConfigEntry:
    """A topic's or a group's config as DescribeConfigs shows it: its own override (from `source`), then
    the broker's synonyms and Kafka's default."""
    synonyms = broker.topic_synonyms(definition)
    if definition.name in overrides:
        synonyms.insert(0, (definition.name, overrides[definition.name], source))
    return ConfigEntry(definition, value, synonyms[0][2], tuple(synonyms), read_only=False)


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs operations, numbered as on the wire."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def validate_topic_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """Typed copy of a topic's overrides; InvalidConfig names the unknown key or the bad value."""
    typed = {}
    for key, raw in overrides.items():
        typed[key] = parse_value(_topic_definition(key), raw)
    return typed


def _topic_definition(key: str) -> ConfigDef:
    return known_definition(TOPIC_CONFIGS, "topic", key)


def known_definition(definitions: dict[str, ConfigDef], kind: str, key: str) -> ConfigDef:
    """`definitions[key]`; InvalidConfig naming the known keys when `key` is not one of them."""
    definition = definitions.get(key)
    if definition is None:
        raise InvalidConfig(f"unknown {kind} config {key!r}; known: {', '.join(sorted(definitions))}")
    return definition


class TopicConfig:
    """Effective configuration of one topic: overrides on top of broker defaults. Immutable."""

    def __init__(self, broker: BrokerConfig, overrides: dict[str, Any]) -> None:
        self.broker = broker
        self.raw = dict(overrides)
        self.overrides = validate_topic_overrides(overrides)
        # Resolved once: produce and fetch read these on every request.
        self._values = {key: self.overrides[key] if key in self.overrides else broker.topic_default(d)[0]
                        for key, d in TOPIC_CONFIGS.items()}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def describe(self, key: str) -> ConfigEntry:
        return overridable_entry(self.broker, TOPIC_CONFIGS[key], self[key], self.overrides, ConfigSource.TOPIC_CONFIG)

    def altered(self, ops: list[tuple[str, AlterOp, str | None]]) -> dict[str, str]:
        """The override set after IncrementalAlterConfigs `ops` (validated; nothing is changed here).
        APPEND / SUBTRACT work on list configs, starting from the effective value."""
        raw = dict(self.raw)
        for key, op, value in ops:
            definition = _topic_definition(key)
            if op is AlterOp.DELETE:
                raw.pop(key, None)
                continue
            if value is None:
                raise InvalidRequest(f"{op.name} of {key} needs a value; only DELETE takes none")
            if op is AlterOp.SET:
                raw[key] = value
                continue
            if definition.type != "list":
                raise InvalidConfig(f"{op.name} works on list configs only; {key} is a {definition.type}")
            current = parse_value(definition, raw[key]) if key in raw else self.broker.topic_default(definition)[0]
            items = _split_list(value)
            if op is AlterOp.APPEND:
                updated = current + [item for item in items if item not in current]
            else:
                updated = [item for item in current if item not in items]
            raw[key] = ",".join(updated)
        validate_topic_overrides(raw)
        return raw

    @property
    def compacted(self) -> bool:
        return "compact" in self["cleanup.policy"]
