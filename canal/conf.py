"""A Canal 1.1.x conf directory, read as Canal reads it, and each destination as a binlake connector.

    CONF_DIR/canal.properties                 the server: canal.serverMode, canal.destinations, canal.mq.*,
                                              kafka.*, and canal.instance.* defaults
    CONF_DIR/<destination>/instance.properties one destination: its MySQL, filters, routing

A destination's properties are canal.properties overlaid with its instance.properties, `${...}` resolved
(canal.instance.destination is its name), as Canal's Spring placeholder configurer sees them. Every key is
classified by canal/keys.py; all problems of all files are reported together (connect.config.ConfigError).
A `canal.*` key set in the environment (`env canal.port=11112 binlake canal run conf`) overrides both files, as
Canal reads its keys from the system properties and the environment first (CanalController.getProperty, and
Spring's placeholder configurer for an instance's keys). With canal.destinations empty, the directories holding an instance.properties are the destinations (Canal's
auto scan, done once at start).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from connect import config as connect_config

from . import keys, properties
from .server import DestinationLog

_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
ZK_SESSION_TIMEOUT_MS = 18_000      # binlake.zookeeper.session.timeout.ms (Kafka's zookeeper.session.timeout.ms)


@dataclass(frozen=True)
class Destination:
    name: str
    properties: dict[str, str]
    """canal.properties overlaid with this destination's instance.properties, resolved."""
    source: str


@dataclass
class CanalConf:
    directory: Path
    server: dict[str, str]
    destinations: list[Destination]
    ignored: list[tuple[str, str, str]] = field(default_factory=list)
    """(key, reason, file) of each key read and not used."""
    unknown: list[tuple[str, str]] = field(default_factory=list)
    """(key, file) of each key Canal's stock files do not have."""

    @property
    def server_mode(self) -> str:
        return self.server.get("canal.serverMode", "tcp").lower() or "tcp"

    @property
    def zk_servers(self) -> str:
        """canal.zkServers: empty, or the ZooKeeper ensemble of the servers' high availability (canal/ha.py)."""
        return self.server.get("canal.zkServers", "")

    @property
    def zk_session_timeout_s(self) -> float:
        return int(self.server.get("binlake.zookeeper.session.timeout.ms") or ZK_SESSION_TIMEOUT_MS) / 1000


def load(directory: str | Path, environ: Mapping[str, str] | None = None) -> CanalConf:
    """Read and check CONF_DIR, with the `canal.*` keys of `environ` (default: os.environ) over it; ConfigError
    naming every refused key and bad value of every file."""
    directory = Path(directory)
    problems: list[tuple[str, str]] = []
    server_file = directory / "canal.properties"
    overrides = {k: v for k, v in (os.environ if environ is None else environ).items() if k.startswith("canal.")}
    try:
        file_raw = properties.load(server_file)
    except properties.PropertiesError as exc:
        raise connect_config.ConfigError(str(directory), [("", str(exc))]) from None
    server_raw = {**file_raw, **overrides}
    server = properties.resolve({"canal.conf.dir": str(directory), **server_raw})
    conf = CanalConf(directory, server, [])
    _classify(file_raw, server, str(server_file), conf, problems)
    _classify(overrides, server, "environment", conf, problems)
    timeout = server.get("binlake.zookeeper.session.timeout.ms", "")
    if timeout and not (timeout.isdigit() and int(timeout) > 0):
        problems.append((f"{server_file}: binlake.zookeeper.session.timeout.ms", f"{timeout!r} is not a positive "
                         "number of milliseconds"))
    mode = conf.server_mode
    if mode not in ("kafka", "tcp"):
        problems.append((f"{server_file}: canal.serverMode", f"{mode}: binlake writes to a Kafka-protocol log "
                         "only; set canal.serverMode = tcp (Canal's clients) or kafka (FlatMessages in topics)"))
    names = [n.strip() for n in server.get("canal.destinations", "").split(",") if n.strip()]
    if not names:
        names = sorted(p.parent.name for p in directory.glob("*/instance.properties"))
        if not names:
            problems.append((f"{server_file}: canal.destinations", f"no destination is named, and no directory of "
                             f"{directory} holds an instance.properties"))
    for name in names:
        instance_file = directory / name / "instance.properties"
        try:
            instance_raw = properties.load(instance_file)
        except properties.PropertiesError as exc:
            problems.append((f"{name}", str(exc)))
            continue
        merged = properties.resolve({"canal.conf.dir": str(directory), **server_raw, **instance_raw, **overrides,
                                     "canal.instance.destination": name})
        _classify(instance_raw, merged, str(instance_file), conf, problems)
        conf.destinations.append(Destination(name, merged, str(instance_file)))
    if problems:
        raise connect_config.ConfigError(str(directory), problems)
    return conf


def _classify(raw: dict[str, str], resolved: dict[str, str], source: str, conf: CanalConf,
              problems: list[tuple[str, str]]) -> None:
    for key in raw:
        value = resolved.get(key, "")
        kind = keys.classify(key)
        if kind == "ignored":
            conf.ignored.append((key, keys.ignored_reason(key), source))
        elif kind == "checked":
            accepts, reason = keys.ALLOWED[key]
            if accepts(value):
                conf.ignored.append((key, f"it is {value or 'empty'}, so there is nothing to do (otherwise refused: "
                                          f"{reason})", source))
            else:
                problems.append((f"{source}: {key}", f"{value!r} is refused: {reason}"))
        elif kind == "unknown":
            if key.startswith("kafka.ssl."):
                problems.append((f"{source}: {key}", "Kafka TLS through Java keystores is not supported: binlake "
                                 "reaches TLS brokers with PEM files (security.ca_file in a connector's YAML)"))
            else:
                conf.unknown.append((key, source))


# -- a destination as a connector --------------------------------------------------------------------

def entries_topic(destination: str) -> str:
    """The entry log of a destination in tcp mode: Canal's entries, in binlog order, on one partition."""
    return f"{destination}.canal-entries"


def connector_spec(destination: Destination, mode: str, environ: dict | None = None) -> connect_config.ConnectorSpec:
    """The mysql connector that runs `destination` in server mode `mode` (tcp: it writes the destination's entry
    log; kafka: Canal's FlatMessages where Canal's routing says), validated; ConfigError naming the Canal keys at
    fault."""
    p = destination.properties
    problems: list[tuple[str, str]] = []

    def need(key: str) -> str:
        value = p.get(key, "")
        if not value:
            problems.append((key, "required: Canal needs it too"))
        return value

    address = need("canal.instance.master.address")
    host, _, port = address.rpartition(":") if ":" in address else (address, "", "3306")
    raw = {
        "name": destination.name, "connector": "mysql",
        "bootstrap_servers": p.get("kafka.bootstrap.servers") or need("canal.mq.servers"),
        "security": _security(p, problems),
        "producer": _producer(p, problems),
        "database": {"host": host, "port": _int(port, "canal.instance.master.address", problems),
                     "user": need("canal.instance.dbUsername"), "password": p.get("canal.instance.dbPassword", ""),
                     "server_id": _server_id(destination.name, p.get("canal.instance.mysql.slaveId", ""), problems)},
        "tables": {"include": _regexes(p.get("canal.instance.filter.regex", "")),
                   "exclude": _regexes(p.get("canal.instance.filter.black.regex", ""))},
        "snapshot": "no_data",
        "format": "canal",
        "restart_by": "gtid" if p.get("canal.instance.gtidon", "false").lower() == "true" else "position",
    }
    raw["canal_skip"] = _skipped(p)
    _standby(p, address, raw, problems)
    fields = {side: _fields(p.get(key, ""), key, problems) for side, key in
              (("include", "canal.instance.filter.field"), ("exclude", "canal.instance.filter.black.field"))}
    if any(fields.values()):
        raw["canal_fields"] = fields
    if (start := _start(p, raw["restart_by"] == "gtid", problems)) is not None:
        raw["start"] = start
    if mode == "tcp":
        raw["canal_entries"] = entries_topic(destination.name)
    else:
        raw["canal"] = {
            "topic": need("canal.mq.topic"), "dynamic_topic": p.get("canal.mq.dynamicTopic", ""),
            "partition": _int(p.get("canal.mq.partition") or "0", "canal.mq.partition", problems),
            "partitions_num": _int(p["canal.mq.partitionsNum"], "canal.mq.partitionsNum", problems)
            if p.get("canal.mq.partitionsNum") else None,
            "partition_hash": p.get("canal.mq.partitionHash", ""),
            "dynamic_topic_partition_num": p.get("canal.mq.dynamicTopicPartitionNum", ""),
            "database_hash": p.get("canal.mq.database.hash", "true").lower() == "true",
            "flat_message_rows": p.get("binlake.flat_message_rows", "event"),
            "flat_message": p.get("canal.mq.flatMessage", "true").lower() == "true",
            # (Canal's MQ producer drops BEGIN and END unless the key says false; its TCP server keeps them)
            "transaction_entries": p.get("canal.instance.filter.transaction.entry", "true").lower() != "true"}
    if ssl_mode := p.get("canal.instance.master.sslMode", "").lower():
        if ssl_mode.startswith("verify"):
            problems.append(("canal.instance.master.sslMode", f"{ssl_mode.upper()} verifies the server with a CA "
                             "that Canal gives as a Java keystore, which binlake does not read: use REQUIRED, or "
                             "the connector's YAML (database.ssl_mode, database.ssl_ca: a PEM file)"))
        raw["database"]["ssl_mode"] = ssl_mode
    if problems:
        raise connect_config.ConfigError(destination.source, problems)
    try:
        return connect_config.validate(_escaped(raw), destination.source, environ or {})
    except connect_config.ConfigError as exc:
        raise connect_config.ConfigError(destination.source, [(_canal_key(path), message)
                                                             for path, message in exc.problems]) from None


_CANAL_KEYS = {
    "bootstrap_servers": "kafka.bootstrap.servers", "database.host": "canal.instance.master.address",
    "database.hosts": "canal.instance.master.address / canal.instance.standby.address",
    "database.port": "canal.instance.master.address", "database.user": "canal.instance.dbUsername",
    "database.server_id": "canal.instance.mysql.slaveId", "database.ssl_mode": "canal.instance.master.sslMode",
    "tables.include": "canal.instance.filter.regex", "tables.exclude": "canal.instance.filter.black.regex",
    "canal.topic": "canal.mq.topic", "canal.dynamic_topic": "canal.mq.dynamicTopic",
    "canal.partition": "canal.mq.partition", "canal.partitions_num": "canal.mq.partitionsNum",
    "canal.partition_hash": "canal.mq.partitionHash",
    "canal.dynamic_topic_partition_num": "canal.mq.dynamicTopicPartitionNum",
    "canal.flat_message_rows": "binlake.flat_message_rows", "producer.compression_type": "kafka.compression.type",
    "start": "canal.instance.master.journal.name / position / timestamp / gtid",
    "canal_fields.include": "canal.instance.filter.field", "canal_fields.exclude": "canal.instance.filter.black.field",
    "producer.max_batch_size": "kafka.batch.size", "producer.linger_ms": "kafka.linger.ms",
    "security": "kafka.security.protocol / kafka.sasl.*",
}


def _canal_key(path: str) -> str:
    """The Canal key behind a connector key's path (canal: the routing's own checks; tables.include[0])."""
    for prefix, key in sorted(_CANAL_KEYS.items(), key=lambda kv: -len(kv[0])):
        if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "["):
            return key
    return {"canal": "canal.mq.*"}.get(path, path)


def _escaped(value):
    """Canal's values are final: `${` in one (a password) must not be read as an environment reference."""
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value.replace("${", "$${") if isinstance(value, str) else value


def _int(text: str, key: str, problems: list) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        problems.append((key, f"{text!r} is not a whole number"))
        return None


_DETECTING = ("canal.instance.detecting.enable", "canal.instance.detecting.heartbeatHaEnable")


def _standby(p: dict[str, str], address: str, raw: dict, problems: list) -> None:
    """canal.instance.standby.address: the connector's database.hosts, [master, standby], followed by GTID set
    (cdc/failover.py) when the binlog connection is lost. Canal's detecting heartbeat, which switches it there,
    is then what binlake's connection does; without a standby it is refused."""
    standby = p.get("canal.instance.standby.address", "").strip()
    for key in _DETECTING:
        if p.get(key, "false").lower() not in ("", "false") and not standby:
            problems.append((key, f"{p[key]!r} is refused: binlake has no detecting SQL, it notices a lost server "
                                  "from the binlog connection (and then switches to canal.instance.standby.address, "
                                  "when one is set); set it to false"))
    if not standby:
        return
    if raw["restart_by"] != "gtid":
        problems.append(("canal.instance.standby.address", "binlake follows a switch to the standby by GTID set, "
                         "so set canal.instance.gtidon=true (MySQL: gtid_mode=ON; MariaDB always has GTIDs)"))
    database = raw["database"]
    del database["host"], database["port"]
    database["hosts"] = [address, standby]


def _fields(text: str, key: str, problems: list) -> dict[str, list[str]]:
    """Canal's column filter syntax, `db.table:col1/col2,db2.table2:col3` (Canal drops a malformed entry in
    silence; binlake names it)."""
    tables: dict[str, list[str]] = {}
    for entry in filter(str.strip, text.split(",")):
        name, colon, columns = entry.partition(":")
        if not colon or ":" in columns or name.strip().count(".") != 1 or not columns.strip():
            problems.append((key, f"{entry.strip()!r} is not db.table:column/column"))
            continue
        tables[name.strip()] = [c.strip() for c in columns.split("/")]
    return tables


def _start(p: dict[str, str], gtid_on: bool, problems: list) -> dict | None:
    """Canal's canal.instance.master.* start, for a destination with no stored position (as Canal: a stored one
    wins): with gtidon, the GTID set; else the journal (binlog file) with its position, or with a timestamp to
    search it for; else a timestamp alone (every binlog searched); nothing: the server's current position."""
    journal, position, timestamp, gtid = (p.get(f"canal.instance.master.{key}", "").strip()
                                          for key in ("journal.name", "position", "timestamp", "gtid"))
    if gtid and not gtid_on:
        problems.append(("canal.instance.master.gtid", "a start GTID set is followed with GTIDs on: set "
                         "canal.instance.gtidon=true (Canal would ignore it and start elsewhere)"))
    if gtid:
        return {"gtids": gtid}
    if position and not journal:
        problems.append(("canal.instance.master.position", "a position needs its binlog file: set "
                         "canal.instance.master.journal.name too"))
        return None
    start: dict = {}
    if journal:
        start["file"] = journal
        if not position and not timestamp:
            problems.append(("canal.instance.master.journal.name", "a binlog file needs a position in it "
                             "(canal.instance.master.position) or a time to search it for (master.timestamp)"))
    if position:
        start["pos"] = _int(position, "canal.instance.master.position", problems)
    elif timestamp:
        start["timestamp_ms"] = _int(timestamp, "canal.instance.master.timestamp", problems)
    return start or None


_EVENT_FILTERS = {"canal.instance.filter.dml.insert": ["insert"], "canal.instance.filter.dml.update": ["update"],
                  "canal.instance.filter.dml.delete": ["delete"], "canal.instance.filter.query.ddl": ["ddl"],
                  "canal.instance.filter.rows": ["insert", "update", "delete"]}


def _skipped(p: dict[str, str]) -> list[str]:
    """Canal's event filters that are on: the changes the destination leaves out."""
    skipped = [kind for key, kinds in _EVENT_FILTERS.items() if p.get(key, "false").lower() == "true" for kind in kinds]
    return list(dict.fromkeys(skipped))


def _regexes(text: str) -> list[str]:
    """Canal's table filter: `,`-separated regexes over `db.table`, matched whole and case-insensitively."""
    return [f"(?i){pattern}" for pattern in text.split(",") if pattern]


def _server_id(destination: str, text: str, problems: list) -> int | None:
    """canal.instance.mysql.slaveId, or (absent or 0, Canal's "auto") one derived from the destination's name,
    stable across restarts."""
    value = _int(text, "canal.instance.mysql.slaveId", problems) if text else 0
    if value == 0:
        return 10_000 + zlib.crc32(destination.encode()) % (2**31)
    return value


def _producer(p: dict[str, str], problems: list) -> dict:
    producer = {}
    compression = p.get("kafka.compression.type", "none").lower()
    if compression and compression != "none":
        producer["compression_type"] = compression
    if p.get("kafka.batch.size"):
        producer["max_batch_size"] = _int(p["kafka.batch.size"], "kafka.batch.size", problems)
    if p.get("kafka.linger.ms"):
        producer["linger_ms"] = _int(p["kafka.linger.ms"], "kafka.linger.ms", problems)
    return producer


def _security(p: dict[str, str], problems: list) -> dict:
    security = {"protocol": p.get("kafka.security.protocol") or "PLAINTEXT"}
    if mechanism := p.get("kafka.sasl.mechanism"):
        security["sasl_mechanism"] = mechanism
    if jaas := p.get("kafka.sasl.jaas.config"):
        found = dict(_JAAS_FIELD.findall(jaas))
        if set(found) != {"username", "password"}:
            problems.append(("kafka.sasl.jaas.config", "no username=\"...\" and password=\"...\" in it: binlake takes "
                             "SASL PLAIN and SCRAM credentials from a PlainLoginModule or ScramLoginModule line"))
        security.update(found)
    return security


def destination_log(destination: Destination, spec: connect_config.ConnectorSpec) -> DestinationLog:
    """How the TCP server serves `destination` (its connector's `spec` says where the log is)."""
    p = destination.properties
    memsize = p.get("canal.instance.memory.batch.mode", "MEMSIZE").upper()
    if memsize not in ("MEMSIZE", "ITEMSIZE"):
        raise connect_config.ConfigError(destination.source, [("canal.instance.memory.batch.mode",
                                                                f"{memsize!r} is not MEMSIZE or ITEMSIZE")])
    problems: list[tuple[str, str]] = []
    capacity = _int(p.get("canal.instance.memory.buffer.size") or "16384", "canal.instance.memory.buffer.size",
                    problems)
    memunit = _int(p.get("canal.instance.memory.buffer.memunit") or "1024", "canal.instance.memory.buffer.memunit",
                   problems)
    if problems:
        raise connect_config.ConfigError(destination.source, problems)
    return DestinationLog(destination.name, entries_topic(destination.name), spec.runtime.bootstrap_servers,
                          spec.runtime.security, capacity, memunit if memsize == "MEMSIZE" else None,
                          p.get("canal.instance.filter.transaction.entry", "false").lower() != "true",
                          p.get("canal.instance.get.ddl.isolation", "false").lower() == "true")
