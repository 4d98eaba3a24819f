"""Every key of Canal 1.1.8's stock canal.properties and example/instance.properties, and what binlake does
with it: honoured (canal/conf.py maps it), ignored with the reason logged once, or refused when its value would
make Canal behave in a way binlake does not (then ignoring it would change behaviour).

`ALLOWED[key]` is (a predicate over the value that may be ignored, the refusal's reason). A key in neither
table, nor under an ignored prefix, is unknown and named in a warning.
"""

from __future__ import annotations

from typing import Callable

HONOURED = frozenset({
    # canal.properties
    "canal.destinations", "canal.conf.dir", "canal.serverMode", "canal.mq.flatMessage", "canal.mq.database.hash",
    "canal.metrics.pull.port", "canal.ip", "canal.port", "canal.user", "canal.passwd", "canal.zkServers",
    "canal.register.ip",
    "canal.instance.memory.buffer.size", "canal.instance.memory.buffer.memunit", "canal.instance.memory.batch.mode",
    "canal.instance.filter.transaction.entry", "canal.instance.filter.dml.insert", "canal.instance.filter.dml.update",
    "canal.instance.filter.dml.delete", "canal.instance.filter.query.ddl", "canal.instance.filter.rows",
    "kafka.bootstrap.servers", "kafka.compression.type", "kafka.batch.size", "kafka.linger.ms",
    "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config",
    # instance.properties (or canal.instance.* defaults in canal.properties)
    "canal.instance.mysql.slaveId", "canal.instance.gtidon", "canal.instance.master.address",
    "canal.instance.master.sslMode", "canal.instance.dbUsername", "canal.instance.master.journal.name",
    "canal.instance.master.position", "canal.instance.master.timestamp", "canal.instance.master.gtid",
    "canal.instance.dbPassword", "canal.instance.filter.regex", "canal.instance.filter.black.regex",
    "canal.instance.filter.field", "canal.instance.filter.black.field", "canal.instance.standby.address",
    "canal.instance.detecting.enable", "canal.instance.detecting.heartbeatHaEnable", "canal.instance.get.ddl.isolation",
    "canal.mq.topic", "canal.mq.dynamicTopic", "canal.mq.partition", "canal.mq.partitionsNum",
    "canal.mq.partitionHash", "canal.mq.dynamicTopicPartitionNum",
    # binlake's own, beside Canal's
    "binlake.flat_message_rows", "binlake.zookeeper.session.timeout.ms",
})

_POSITIONS = "binlake keeps its position in the log (committed with the changes, exactly once)"
_MEMORY = "binlake bounds memory by max_batch_records / max_batch_bytes / max_queue_bytes, not a ring buffer"
_TSDB = "binlake keeps table structures in its schema-history topic (in the log), not an H2/MySQL tsdb"
_SPRING = "binlake has no Spring instance wiring: every destination runs binlake's MySQL connector"

IGNORED: dict[str, str] = {
    "canal.admin.port": "canal-admin is not supported: binlake is configured by these files only",
    "canal.admin.user": "canal-admin is not supported",
    "canal.admin.passwd": "canal-admin is not supported",
    "canal.zookeeper.flush.period": _POSITIONS,
    "canal.file.data.dir": _POSITIONS,
    "canal.file.flush.period": _POSITIONS,
    "canal.withoutNetty": "binlake serves Canal's TCP port in tcp mode, none in kafka mode",
    "canal.instance.memory.rawEntry": "entries are always served as the bytes the entry log holds",
    "canal.instance.detecting.sql": "binlake notices a lost server from the binlog connection itself",
    "canal.instance.detecting.interval.time": "binlake notices a lost server from the binlog connection itself",
    "canal.instance.detecting.retry.threshold": "binlake notices a lost server from the binlog connection itself",
    "canal.instance.transaction.size": "binlake delivers a transaction whole, however large (it is written in "
                                       "bounded slices of one Kafka transaction), where Canal cuts it",
    **{f"canal.instance.standby.{key}": "binlake resumes on the standby exactly after the last transaction the log "
                                        "holds, found by GTID set, not at a standby position"
       for key in ("journal.name", "position", "timestamp", "gtid")},
    "canal.instance.fallbackIntervalInSeconds": "a failover is followed by GTID set (database.hosts), not by "
                                                "time fallback",
    "canal.instance.network.receiveBufferSize": "the operating system's socket buffers are used",
    "canal.instance.network.sendBufferSize": "the operating system's socket buffers are used",
    "canal.instance.network.soTimeout": "binlake's binlog connection has its own heartbeats and timeouts",
    "canal.instance.filter.druid.ddl": "binlake parses DDL with its own parser (cdc/schema/ddl.py)",
    "canal.instance.filter.query.dcl": "binlake writes no entries for DCL statements (GRANT, ...) either way",
    "canal.instance.filter.query.dml": "binlake reads ROW events only: there are no statement DML entries to filter",
    "canal.instance.binlog.format": "binlake checks that the server writes ROW events, the only format it reads",
    "canal.instance.binlog.image": "binlake reads FULL and MINIMAL row images",
    "canal.instance.parser.parallel": "binlake decodes in its own source process",
    "canal.instance.parser.parallelThreadSize": "binlake decodes in its own source process",
    "canal.instance.parser.parallelBufferSize": "binlake decodes in its own source process",
    "canal.instance.tsdb.enable": _TSDB,
    "canal.instance.tsdb.dir": _TSDB,
    "canal.instance.tsdb.url": _TSDB,
    "canal.instance.tsdb.dbUsername": _TSDB,
    "canal.instance.tsdb.dbPassword": _TSDB,
    "canal.instance.tsdb.snapshot.interval": _TSDB,
    "canal.instance.tsdb.snapshot.expire": _TSDB,
    "canal.instance.tsdb.spring.xml": _TSDB,
    "canal.auto.scan.interval": "destinations are read at start: restart binlake to add or remove one",
    "canal.instance.global.mode": _SPRING,
    "canal.instance.global.lazy": "destinations start at once",
    "canal.instance.global.spring.xml": _SPRING,
    "canal.instance.connectionCharset": "binlake decodes each column by its own character set",
    "canal.mq.canalBatchSize": "binlake writes each MySQL transaction as it commits (one Kafka transaction)",
    "canal.mq.canalGetTimeout": "binlake writes each MySQL transaction as it commits (one Kafka transaction)",
    "canal.mq.accessChannel": "Aliyun's message trace is not supported",
    "canal.mq.send.thread.size": "one producer per destination, pipelined",
    "canal.mq.build.thread.size": "messages are built in the destination's source process",
    "kafka.acks": "binlake's producer is idempotent and transactional: acks=all always",
    "kafka.max.request.size": "batches are bounded by kafka.batch.size (binlake's producer.max_batch_size)",
    "kafka.buffer.memory": _MEMORY,
    "kafka.max.in.flight.requests.per.connection": "binlake's idempotent producer keeps order with 5 in flight",
    "kafka.retries": "binlake's idempotent producer retries without duplicates until its delivery timeout",
    "kafka.kerberos.krb5.file": "Kerberos is not supported (kafka.kerberos.enable must be false)",
    "kafka.kerberos.jaas.file": "Kerberos is not supported (kafka.kerberos.enable must be false)",
    "canal.auto.scan": "destinations are read at start: restart binlake to add or remove one",
}


def _empty(value: str) -> bool:
    return value == ""


def _false(value: str) -> bool:
    return value.lower() in ("", "false")


def _is(*allowed: str) -> Callable[[str], bool]:
    return lambda value: value.lower() in allowed


ALLOWED: dict[str, tuple[Callable[[str], bool], str]] = {
    "canal.admin.manager": (_empty, "canal-admin is not supported: binlake reads its configuration from these files"),
    "canal.admin.register.auto": (_false, "canal-admin is not supported"),
    "canal.admin.register.cluster": (_empty, "canal-admin is not supported"),
    "canal.admin.register.name": (_empty, "canal-admin is not supported"),
    "canal.instance.filter.table.error": (_false, "binlake stops on a table it cannot decode, naming it"),
    "canal.auto.reset.latest.pos.mode": (_false, "binlake never skips to the latest position on its own: a missing "
                                                 "position stops the destination, naming it"),
    "canal.instance.global.manager.address": (_empty, "canal-admin is not supported"),
    "canal.aliyun.accessKey": (_empty, "Aliyun RDS and MQ are not supported"),
    "canal.aliyun.secretKey": (_empty, "Aliyun RDS and MQ are not supported"),
    "canal.aliyun.uid": (_empty, "Aliyun RDS and MQ are not supported"),
    "canal.instance.rds.accesskey": (_empty, "reading RDS binlogs from OSS is not supported"),
    "canal.instance.rds.secretkey": (_empty, "reading RDS binlogs from OSS is not supported"),
    "canal.instance.rds.instanceId": (_empty, "reading RDS binlogs from OSS is not supported"),
    "canal.instance.multi.stream.on": (_false, "PolarDB-X multi-stream binlogs are not supported"),
    "canal.instance.master.tlsVersions": (_empty, "TLS versions are the Python ssl module's defaults"),
    "canal.instance.master.trustCertificateKeyStoreType": (_empty, "Java keystores are not read: binlake's ssl_ca "
                                                                   "takes a PEM file"),
    "canal.instance.master.trustCertificateKeyStoreUrl": (_empty, "Java keystores are not read"),
    "canal.instance.master.trustCertificateKeyStorePassword": (_empty, "Java keystores are not read"),
    "canal.instance.master.clientCertificateKeyStoreType": (_empty, "Java keystores are not read"),
    "canal.instance.master.clientCertificateKeyStoreUrl": (_empty, "Java keystores are not read"),
    "canal.instance.master.clientCertificateKeyStorePassword": (_empty, "Java keystores are not read"),
    "canal.instance.enableDruid": (_false, "druid-encrypted passwords are not supported: write dbPassword in clear "
                                           "(or give it through the file's permissions)"),
    "canal.instance.pwdPublicKey": (_empty, "druid-encrypted passwords are not supported"),
    "canal.mq.enableDynamicQueuePartition": (_false, "RocketMQ's dynamic queue partitions do not apply to Kafka"),
    "kafka.kerberos.enable": (_false, "Kerberos (GSSAPI) is not supported: use SASL PLAIN or SCRAM"),
}

# Stock keys of the other MQ server modes: ignored, as Canal ignores them in kafka mode.
IGNORED_PREFIXES = {
    "rocketmq.": "canal.serverMode is not rocketMQ", "rabbitmq.": "canal.serverMode is not rabbitMQ",
    "pulsarmq.": "canal.serverMode is not pulsarMQ",
}


def classify(key: str) -> str:
    """'honoured', 'ignored', 'checked' (ALLOWED) or 'unknown'."""
    if key in HONOURED:
        return "honoured"
    if key in ALLOWED:
        return "checked"
    if key in IGNORED or any(key.startswith(p) for p in IGNORED_PREFIXES):
        return "ignored"
    return "unknown"


def ignored_reason(key: str) -> str:
    for prefix, reason in IGNORED_PREFIXES.items():
        if key.startswith(prefix):
            return reason
    return IGNORED[key]
