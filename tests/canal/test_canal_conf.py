"""Canal's conf directory as binlake reads it: every stock key honoured, ignored with its reason, or refused
when set to what binlake does not do; unknown keys named; destinations mapped onto the mysql connector."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from canal import conf as canal_conf
from canal import keys, properties
from connect.config import ConfigError
from canal_stock import STOCK, conf_dir

KAFKA = {"canal.serverMode": "kafka"}


def stock_keys() -> set[str]:
    found = set()
    for path in (STOCK / "canal.properties", STOCK / "example" / "instance.properties"):
        for line in path.read_text().splitlines():
            line = line.lstrip("# ")
            if "=" in line and line.startswith(("canal.", "kafka.", "rocketmq.", "rabbitmq.", "pulsarmq.")):
                found.add(line.split("=")[0].strip())
    return found


def test_every_stock_key_is_known_commented_ones_too():
    assert {k for k in stock_keys() if keys.classify(k) == "unknown"} == set()


def test_properties_as_java_reads_them():
    text = ("# comment\n! also\nkey = a value \nregex=.*\\\\..*\nlong = one,\\\n    two\nk\\ x:1\n"
            "uni = \\u00e9t\\u00e9\nempty =\n")
    assert properties.parse(text) == {"key": "a value ", "regex": ".*\\..*", "long": "one,two", "k x": "1",
                                      "uni": "été", "empty": ""}
    resolved = properties.resolve({"a": "x", "b": "${a}/${c:dflt}/${d:}", "c2": " ${b} "})
    assert resolved == {"a": "x", "b": "x/dflt/", "c2": "x/dflt/"}


def test_stock_conf_in_kafka_mode_loads(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA))
    assert [d.name for d in conf.destinations] == ["example"]
    assert conf.unknown == []
    ignored = {key for key, _, _ in conf.ignored}
    assert {"canal.instance.memory.rawEntry", "canal.instance.tsdb.enable", "rocketmq.namesrv.addr",
            "kafka.acks"} <= ignored
    example = conf.destinations[0].properties
    assert example["canal.instance.tsdb.dir"] == "../conf/example"   # ${...} as Canal resolves them
    assert example["canal.instance.filter.regex"] == ".*\\..*"


def test_stock_destination_maps_onto_the_mysql_connector(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, {"canal.instance.mysql.slaveId": "1234",
                                                      "canal.mq.partitionsNum": "3",
                                                      "canal.mq.partitionHash": ".*\\..*:$pk$"}))
    spec = canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert spec.name == "example" and spec.runtime.bootstrap_servers == "127.0.0.1:9092"
    source = spec.config.source_config(spec.name)
    assert (source.host, source.port, source.user, source.password, source.server_id) == \
           ("127.0.0.1", 3306, "canal", "canal", 1234)
    assert source.format == "canal" and source.snapshot == "no_data" and source.restart_by == "position"
    assert source.table_include == ("(?i).*\\..*",) and source.table_exclude == ("(?i)mysql\\.slave_.*",)
    assert source.canal_mq.topic == "example" and source.canal_mq.partitions_num == 3
    assert source.canal_mq.partition_hash == ".*\\..*:$pk$" and source.canal_mq.flat_message_rows == "event"
    assert spec.runtime.producer.max_batch_size == 16384 and spec.runtime.producer.linger_ms == 1


def test_event_filters(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {"canal.instance.filter.dml.delete": "true",
                                               "canal.instance.filter.query.ddl": "true"}))
    assert canal_conf.connector_spec(conf.destinations[0], "tcp").config.canal_skip == ["delete", "ddl"]
    conf = canal_conf.load(conf_dir(tmp_path / "2", {"canal.instance.filter.rows": "true",
                                                     "canal.instance.filter.dml.insert": "true"}))
    assert canal_conf.connector_spec(conf.destinations[0], "tcp").config.canal_skip == ["insert", "update", "delete"]


def test_ssl_modes(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, {"canal.instance.master.sslMode": "REQUIRED"}))
    assert canal_conf.connector_spec(conf.destinations[0], "kafka").config.database.ssl_mode == "required"
    conf = canal_conf.load(conf_dir(tmp_path / "2", KAFKA, {"canal.instance.master.sslMode": "VERIFY_CA"}))
    with pytest.raises(ConfigError, match="VERIFY_CA verifies the server with a CA that Canal gives as a Java"):
        canal_conf.connector_spec(conf.destinations[0], "kafka")


@pytest.mark.parametrize("instance, start, restart_by", [
    ({"canal.instance.master.journal.name": "mysql-bin.000003", "canal.instance.master.position": "4567"},
     {"file": "mysql-bin.000003", "pos": 4567}, "position"),
    ({"canal.instance.master.journal.name": "mysql-bin.000003", "canal.instance.master.timestamp": "1700000000000"},
     {"file": "mysql-bin.000003", "timestamp_ms": 1700000000000}, "position"),
    ({"canal.instance.master.timestamp": "1700000000000"}, {"timestamp_ms": 1700000000000}, "position"),
    ({"canal.instance.gtidon": "true", "canal.instance.master.gtid": "0-1-5",
      "canal.instance.master.journal.name": "mysql-bin.000003", "canal.instance.master.position": "4567"},
     {"gtids": "0-1-5"}, "gtid"),     # (with GTIDs on, Canal starts at the GTID set)
    ({}, None, "position"),
])
def test_start_positions(tmp_path, instance, start, restart_by):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, instance))
    config = canal_conf.connector_spec(conf.destinations[0], "kafka").config
    assert (None if config.start is None else config.start.model_dump(exclude_none=True)) == start
    assert config.restart_by == restart_by


@pytest.mark.parametrize("instance, key, problem", [
    ({"canal.instance.master.gtid": "0-1-5"}, "canal.instance.master.gtid", "set canal.instance.gtidon=true"),
    ({"canal.instance.master.position": "4"}, "canal.instance.master.position", "set canal.instance.master.journal"),
    ({"canal.instance.master.journal.name": "b.1"}, "canal.instance.master.journal.name", "needs a position"),
    ({"canal.instance.master.timestamp": "yesterday"}, "canal.instance.master.timestamp", "not a whole number"),
])
def test_start_positions_that_cannot_be_followed(tmp_path, instance, key, problem):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, instance))
    with pytest.raises(ConfigError) as error:
        canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert [path for path, _ in error.value.problems] == [key] and problem in str(error.value)


def test_field_filters(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, {
        "canal.instance.filter.field": "test1.t_product:id/subject/keywords,test2.t_company:id/name",
        "canal.instance.filter.black.field": "test1.t_product:subject/product_image"}))
    fields = canal_conf.connector_spec(conf.destinations[0], "kafka").config.canal_fields
    assert fields.include == {"TEST1.T_PRODUCT": ("ID", "SUBJECT", "KEYWORDS"), "TEST2.T_COMPANY": ("ID", "NAME")}
    assert fields.exclude == {"TEST1.T_PRODUCT": ("SUBJECT", "PRODUCT_IMAGE")}
    conf = canal_conf.load(conf_dir(tmp_path / "2", KAFKA, {"canal.instance.filter.field": "a.b:c,t_product:id"}))
    with pytest.raises(ConfigError) as error:
        canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert error.value.problems == [("canal.instance.filter.field", "'t_product:id' is not db.table:column/column")]


def test_a_standby_is_the_second_of_the_failover_hosts(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {**KAFKA, "canal.instance.detecting.enable": "true",
                                               "canal.instance.detecting.heartbeatHaEnable": "true"},
                                    {"canal.instance.gtidon": "true", "canal.instance.master.address": "db1:3306",
                                     "canal.instance.standby.address": "db2:3307",
                                     "canal.instance.standby.journal.name": "mysql-bin.000002"}))
    assert ("canal.instance.standby.journal.name" in {key for key, _, _ in conf.ignored})
    config = canal_conf.connector_spec(conf.destinations[0], "kafka").config
    assert config.database.hosts == ["db1:3306", "db2:3307"] and config.restart_by == "gtid"
    assert config.source_config("example").addresses == [("db1", 3306), ("db2", 3307)]


@pytest.mark.parametrize("server, instance, key, problem", [
    ({}, {"canal.instance.standby.address": "db2:3306"}, "canal.instance.standby.address",
     "set canal.instance.gtidon=true"),
    ({"canal.instance.detecting.enable": "true"}, {}, "canal.instance.detecting.enable",
     "'true' is refused: binlake has no detecting SQL"),
    ({"canal.instance.detecting.heartbeatHaEnable": "true"}, {"canal.instance.gtidon": "true"},
     "canal.instance.detecting.heartbeatHaEnable", "switches to canal.instance.standby.address, when one is set"),
])
def test_standby_switching_that_cannot_be_followed(tmp_path, server, instance, key, problem):
    conf = canal_conf.load(conf_dir(tmp_path, {**KAFKA, **server}, instance))
    with pytest.raises(ConfigError) as error:
        canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert [path for path, _ in error.value.problems] == [key] and problem in str(error.value)


def test_auto_server_id_is_stable(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA))
    first = canal_conf.connector_spec(conf.destinations[0], "kafka").config.database.server_id
    assert first == canal_conf.connector_spec(conf.destinations[0], "kafka").config.database.server_id >= 10_000


def test_the_stock_conf_is_tcp_mode_on_the_entry_log(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path))
    assert conf.server_mode == "tcp"
    [example] = conf.destinations
    spec = canal_conf.connector_spec(example, "tcp")
    source = spec.config.source_config(spec.name)
    assert source.canal_entries == "example.canal-entries" and source.canal_mq is None
    served = canal_conf.destination_log(example, spec)
    assert (served.topic, served.capacity, served.memunit, served.transaction_entries) == \
           ("example.canal-entries", 16384, 1024, True)


def test_other_server_modes_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"canal.serverMode: rocketmq: binlake writes to a Kafka-protocol log"):
        canal_conf.load(conf_dir(tmp_path, {"canal.serverMode": "rocketMQ"}))


@pytest.mark.parametrize("server, instance, problem", [
    ({"canal.admin.manager": "127.0.0.1:8089"}, {}, "canal.admin.manager: '127.0.0.1:8089' is refused: canal-admin"),
    ({}, {"canal.instance.enableDruid": "true"}, "druid-encrypted passwords"),
    ({"kafka.ssl.truststore.location": "/x.jks"}, {}, "Java keystores is not supported"),
])
def test_refused_values_name_key_and_file(tmp_path, server, instance, problem):
    with pytest.raises(ConfigError) as error:
        canal_conf.load(conf_dir(tmp_path, {**KAFKA, **server}, instance))
    assert problem in str(error.value)
    assert (".properties: " + next(iter({**server, **instance}))) in str(error.value)


def test_problems_of_every_file_are_reported_together(tmp_path):
    with pytest.raises(ConfigError) as error:
        canal_conf.load(conf_dir(tmp_path, {"canal.aliyun.accessKey": "ak", "canal.serverMode": "pulsarMQ"},
                                 {"canal.instance.enableDruid": "true"}))
    assert [path.rsplit(": ", 1)[1] for path, _ in error.value.problems] == \
           ["canal.aliyun.accessKey", "canal.serverMode", "canal.instance.enableDruid"]


def test_the_environment_overrides_canal_keys_as_canal_reads_them(tmp_path):
    directory = conf_dir(tmp_path, {"canal.port": "11111", "canal.zkServers": "zk1:2181"},
                         {"canal.instance.dbUsername": "canal"})
    with pytest.raises(ConfigError, match=r"environment: canal.admin.manager: 'a:8089' is refused"):
        canal_conf.load(directory, {"canal.admin.manager": "a:8089"})
    conf = canal_conf.load(directory, {"canal.port": "11112", "canal.instance.dbUsername": "other", "PATH": "/bin"})
    assert (conf.server["canal.port"], conf.zk_servers, conf.zk_session_timeout_s) == ("11112", "zk1:2181", 18.0)
    assert conf.destinations[0].properties["canal.instance.dbUsername"] == "other"
    assert conf.unknown == []


def test_zookeeper_session_timeout(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {"binlake.zookeeper.session.timeout.ms": "4000"}), {})
    assert conf.zk_session_timeout_s == 4.0
    with pytest.raises(ConfigError, match=r"binlake.zookeeper.session.timeout.ms: '4s' is not a positive number"):
        canal_conf.load(conf_dir(tmp_path / "2", {"binlake.zookeeper.session.timeout.ms": "4s"}), {})


def test_unknown_keys_are_listed(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {**KAFKA, "canal.instance.filetr.regex": "x"}))
    assert [key for key, _ in conf.unknown] == ["canal.instance.filetr.regex"]


def test_bad_values_name_the_canal_key(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, KAFKA, {"canal.mq.partitionHash": "a(b:id",
                                                      "canal.instance.filter.regex": "x(", "canal.mq.topic": ""}))
    with pytest.raises(ConfigError) as error:
        canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert [path for path, _ in error.value.problems] == ["canal.mq.topic"]
    conf = canal_conf.load(conf_dir(tmp_path / "2", KAFKA, {"canal.mq.partitionHash": "a(b:id",
                                                            "canal.instance.filter.regex": "x("}))
    with pytest.raises(ConfigError) as error:
        canal_conf.connector_spec(conf.destinations[0], "kafka")
    assert sorted(path for path, _ in error.value.problems) == ["canal.instance.filter.regex", "canal.mq.*"]


def test_empty_destinations_scan_the_directory(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {**KAFKA, "canal.destinations": ""}, destination="orders"))
    assert [d.name for d in conf.destinations] == ["orders"]


def test_sasl_from_the_jaas_line(tmp_path):
    conf = canal_conf.load(conf_dir(tmp_path, {
        **KAFKA, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="alice" password="alice-secret";'}))
    security = canal_conf.connector_spec(conf.destinations[0], "kafka").runtime.security
    assert (security.protocol, security.sasl_mechanism, security.username, security.password.get_secret_value()) \
        == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "alice-secret")


def test_docs_name_every_key():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "canal.md").read_text()
    named = set(re.findall(r"`([a-z]+(?:\.[A-Za-z_0-9]+)+)`", doc))
    missing = {k for k in keys.HONOURED | set(keys.IGNORED) | set(keys.ALLOWED) if k not in named}
    assert missing == set()
