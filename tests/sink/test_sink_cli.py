"""`binlake sink run`: a wrong config or missing jars stop it before Spark starts, saying what to do."""

import json
import os
import subprocess
import sys
import time

import pytest

from testkit.brokerproc import ROOT
from listening import descendants, listening


def sink_run(config_path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(config_path)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=120)


def test_every_problem_of_a_config_is_named(tmp_path):
    path = tmp_path / "sink.yaml"
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "topic_pattern": "x",
                                "checkpoint": "/tmp/x", "target": {"delta": {"path": "/w"}, "jdbc": {"url": "jdbc:mysql://h/d", "user": "u"}},
                                "mode": "scd3", "surprise": 1}))
    done = sink_run(path)
    assert done.returncode == 1
    for text in ("target.jdbc.url: only PostgreSQL is supported", "mode: Input should be",
                 "surprise: Extra inputs are not permitted"):
        assert text in done.stderr, done.stderr
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "topic_pattern": "x",
                                "checkpoint": "/tmp/x", "target": {"delta": {"path": "/w"}}}))
    done = sink_run(path)
    assert done.returncode == 1 and "give exactly one of topics" in done.stderr, done.stderr


def test_missing_jars_name_the_make_target(tmp_path):
    path = tmp_path / "sink.yaml"
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "checkpoint": str(tmp_path / "ck"),
                                "target": {"delta": {"path": str(tmp_path / "w")}}}))
    done = sink_run(path, env={"BINLAKE_SPARK_JARS": str(tmp_path / "no-jars")})
    assert done.returncode == 1 and "run `make spark-jars`" in done.stderr, done.stderr


def test_several_configs_need_distinct_names_and_checkpoints(tmp_path):
    """Each config is a streaming query of one Spark application: named after its file, with its own
    checkpoint (Spark keeps one query's offsets there)."""
    config = {"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "checkpoint": str(tmp_path / "ck"),
              "target": {"delta": {"path": str(tmp_path / "w")}}}
    for directory in ("one", "two"):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "sink.yaml").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "one" / "sink.yaml"),
                           str(tmp_path / "two" / "sink.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and "config files need distinct names" in done.stderr, done.stderr
    (tmp_path / "two" / "sink.yaml").rename(tmp_path / "two" / "lake.yaml")
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "one" / "sink.yaml"),
                           str(tmp_path / "two" / "lake.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and "each config needs its own checkpoint" in done.stderr, done.stderr


def test_every_files_problems_are_named_not_only_the_firsts(tmp_path):
    (tmp_path / "lake.yaml").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"],
                                                    "checkpoint": "/tmp/x", "target": {"delta": {}}}))
    (tmp_path / "pg.yaml").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"],
                                                  "checkpoint": "/tmp/y", "mode": "scd3",
                                                  "target": {"delta": {"path": "/w"}}}))
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "lake.yaml"),
                           str(tmp_path / "pg.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert f"{tmp_path / 'lake.yaml'}: 1 problem\n  target.delta.path: Field required" in done.stderr, done.stderr
    assert f"{tmp_path / 'pg.yaml'}: 1 problem\n  mode: Input should be" in done.stderr, done.stderr


def test_a_topic_pattern_names_the_schema_topic_as_topics_do(tmp_path):
    """docs/sink.md: schema_topic defaults to the connector's name, read from topic_pattern too."""
    path = tmp_path / "lake.yaml"
    config = {"bootstrap_servers": "127.0.0.1:1", "topic_pattern": r"shop\.shop\..*", "format": "debezium",
              "checkpoint": str(tmp_path / "ck"), "target": {"delta": {"path": str(tmp_path / "w")}}}
    path.write_text(json.dumps(config))
    done = sink_run(path, env={"BINLAKE_SPARK_JARS": str(tmp_path / "no-jars")})  # (past the config: the jars)
    assert done.returncode == 1 and "run `make spark-jars`" in done.stderr, done.stderr
    from spark_sink.config import validate
    assert validate(config).resolved_schema_topic == "shop"
    assert validate({**config, "topic_pattern": r"shop\.x?"}).resolved_schema_topic == "shop"
    path.write_text(json.dumps({**config, "topic_pattern": "shop.*"}))  # (no literal '<name>.' to read it from)
    done = sink_run(path)
    assert done.returncode == 1 and "schema_topic: name the connector's schema-change topic" in done.stderr, \
        done.stderr


def test_a_local_drivers_address_is_loopback_and_a_clusters_the_one_that_reaches_the_master(monkeypatch):
    from spark_sink.driver_address import bind_driver, driver_address
    assert driver_address("local[2]") == driver_address(None) == "127.0.0.1"
    assert driver_address("spark://127.0.0.1:7077") == "127.0.0.1"
    assert driver_address("spark://127.0.0.2:7077,127.0.0.3:7077") == "127.0.0.1"  # (the route to a loopback host)
    assert driver_address("yarn") is None  # (Spark's own choice)
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert bind_driver("local[*]") == "10.1.2.3"  # the user's choice wins
    monkeypatch.delenv("SPARK_LOCAL_IP")
    assert bind_driver("local[*]") == "127.0.0.1" == os.environ["SPARK_LOCAL_IP"]


CANAL_INSERT = {"type": "INSERT", "database": "t", "table": "x", "pkNames": ["id"], "isDdl": False,
                "es": 1_700_000_000_000, "ts": 1_700_000_000_001, "gtid": "", "old": None,
                "mysqlType": {"id": "int", "v": "varchar(10)"}, "sqlType": {"id": 4, "v": 12}}


@pytest.mark.slow  # (a Spark application's start: a minute or more on two cores)
def test_the_sink_listens_on_loopback_only_and_prints_no_start_up_notices(broker, tmp_path):
    """Without SPARK_LOCAL_IP Spark took the machine's first non-loopback address and listened there,
    and each start printed a dozen notices (the log4j profile twice, the hostname, native Hadoop,
    adaptive execution in streaming, ...). JVM options given with --conf reach the driver's JVM beside
    the quiet logging's own."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.address})  # (held until the answer comes)
    admin.create_topics([NewTopic("t.x", 1, 1)])["t.x"].result(30)
    producer = Producer({"bootstrap.servers": broker.address})
    for n in (1, 2):
        producer.produce("t.x", json.dumps({**CANAL_INSERT, "id": n, "data": [{"id": str(n), "v": f"v{n}"}]}))
    assert producer.flush(30) == 0
    config = tmp_path / "lake.yaml"
    config.write_text(json.dumps({"bootstrap_servers": broker.address, "topics": ["t.x"], "format": "canal",
                                  "checkpoint": str(tmp_path / "ck"), "trigger": "available_now",
                                  "target": {"delta": {"path": str(tmp_path / "w")}}}))
    env = {key: value for key, value in os.environ.items() if key != "SPARK_LOCAL_IP"}
    with open(tmp_path / "sink.log", "wb") as log:
        sink = subprocess.Popen([sys.executable, "-m", "binlake.cli", "sink", "run", str(config), "--master",
                                 "local[1]", "--conf", "spark.driver.extraJavaOptions=-Dbinlake.test=yes"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    addresses, jvm_options = set(), set()
    try:
        while sink.poll() is None:  # (until available_now has merged the two rows and the job ends)
            addresses |= listening(sink.pid)
            jvm_options |= {option for pid in descendants(sink.pid) for option in _arguments(pid)
                            if option.startswith(("-Dbinlake.test", "-Dlog4j2.configurationFile"))}
            time.sleep(0.2)
    finally:
        sink.kill()
    output = (tmp_path / "sink.log").read_text()
    assert sink.returncode == 0, output
    assert addresses and all(address.is_loopback for address, _ in addresses), (addresses, output)
    assert "binlake-sink-lake batch 0: t.x: 2 rows" in output, output
    assert "-Dbinlake.test=yes" in jvm_options and any("log4j2.properties" in o for o in jvm_options), jvm_options
    for notice in ("log4j profile", "resolves to a loopback address", "SPARK_LOCAL_IP", "NativeCodeLoader",
                   "spark.sql.adaptive.enabled", "Setting default log level", "locally checkpointed"):
        assert notice not in output, output


def _arguments(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_a_spark_setting_is_key_equals_value(tmp_path):
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "sink.yaml"), "--conf",
                           "spark.driver.memory"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "'spark.driver.memory' is not KEY=VALUE" in done.stderr, done.stderr


def test_avro_needs_the_registry_and_the_registry_needs_avro():
    from spark_sink.config import SinkConfigError, validate
    config = {"bootstrap_servers": "127.0.0.1:1", "topics": ["shop.shop.t"], "checkpoint": "/tmp/ck",
              "target": {"delta": {"path": "/w"}}}
    with pytest.raises(SinkConfigError, match=r"format: debezium-avro reads each record's writer schema from the "
                                              r"schema registry: set schema_registry: \{url: http://HOST:PORT\}"):
        validate({**config, "format": "debezium-avro"})
    with pytest.raises(SinkConfigError, match="schema_registry is read by format: debezium-avro only"):
        validate({**config, "schema_registry": {"url": "http://127.0.0.1:8081"}})
    with pytest.raises(SinkConfigError, match="basic_auth_user and basic_auth_password go together"):
        validate({**config, "format": "debezium-avro", "schema_registry": {"url": "http://r:8081",
                                                                           "basic_auth_user": "sink"}})
    avro = validate({**config, "format": "debezium-avro", "schema_registry": {"url": "https://r:8081",
                                                                              "ca_file": "/ca.pem"}})
    assert avro.debezium and avro.resolved_schema_topic == "shop" and avro.schema_registry.client_conf() == {
        "url": "https://r:8081", "ssl.ca.location": "/ca.pem"}
