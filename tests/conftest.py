"""Fixtures that start real servers: a `binlake broker` subprocess on a free loopback port."""

from __future__ import annotations

import os

import pytest

from brokerproc import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(config: dict[str, str] | None = None, name: str = "broker") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, config=config)
        started.append(b.start())
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def apache_kafka_factory(tmp_path):
    """broker_factory's twin for Apache Kafka (KRaft, one node, its jars from `make reference`)."""
    from testkit.reference import MissingReference, start_kafka
    started = []

    def make(config: dict[str, str] | None = None, name: str = "apache-kafka"):
        try:
            started.append(start_kafka(tmp_path / name, config=config))
        except MissingReference as exc:
            pytest.fail(str(exc))
        return started[-1]

    yield make
    for kafka in started:
        kafka.stop()


@pytest.fixture(params=["logcore", pytest.param("kafka", marks=pytest.mark.kafka)])
def any_broker_factory(request):
    """For a platform test that runs against logcore and against Apache Kafka: binlake must rely on
    nothing Apache Kafka does not do. Each broker has `address`, `kill()` and `start()`."""
    return request.getfixturevalue("broker_factory" if request.param == "logcore" else "apache_kafka_factory")


@pytest.fixture
def any_broker(any_broker_factory):
    return any_broker_factory()


@pytest.fixture
def kcat() -> str:
    path = "/usr/bin/kcat"
    if not os.path.exists(path):
        pytest.fail("kcat is not installed; run `make setup` (it installs the Debian package kcat)")
    return path


class SparkSessions:
    """One local SparkSession (2 cores) with the sink's jars, kept for the whole session but checked after
    each test: a test's leftover streaming queries are stopped, and a session whose Py4J link a timed-out
    test broke mid-call is replaced, so one timeout fails one test, not every later Spark test of its worker."""

    def __init__(self) -> None:
        self.session = None

    def get(self):
        from spark_sink.session import SMALL_BATCHES, MissingJars, builder
        if self.session is None:
            self.forget_the_jvm()    # a test timed out while the last one started: its link is unusable
            try:
                self.session = builder("binlake-tests", master="local[2]",  # (the tests' batches are a few rows)
                                       conf={"spark.sql.shuffle.partitions": "4", **SMALL_BATCHES}).getOrCreate()
            except MissingJars as exc:
                pytest.fail(str(exc))
            self.session.sparkContext.setLogLevel("ERROR")
        return self.session

    def after_test(self) -> None:
        try:
            for query in self.session.streams.active:
                query.stop()
        except Exception as exc:  # noqa: BLE001 - any failure here means the link is unusable
            print(f"the SparkSession is unusable after this test ({exc!r}): starting a new one")
            self.stop()

    def stop(self) -> None:
        if self.session is not None:
            try:
                self.session.stop()
            except Exception:  # noqa: BLE001 - a broken link cannot stop cleanly; the JVM goes below
                pass
            self.session = None
        self.forget_the_jvm()

    @staticmethod
    def forget_the_jvm() -> None:
        """Shut PySpark's JVM down and clear its globals, so that the next session starts a new one."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
        if SparkContext._gateway is not None:
            SparkContext._gateway.shutdown()
            jvm = getattr(SparkContext._gateway, "proc", None)  # (closing the link leaves the JVM running
            if jvm is not None and jvm.poll() is None:           # its jobs: seen, three per worker)
                jvm.kill()
                jvm.wait()
        SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = SparkSession._activeSession = None


@pytest.fixture(scope="session")
def spark_sessions():
    sessions = SparkSessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions):
    """The session's SparkSession (see SparkSessions)."""
    yield spark_sessions.get()
    spark_sessions.after_test()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A throwaway PostgreSQL server for the session (sandbox.postgres); tests use their own schemas."""
    from sandbox.postgres import start_postgres
    server = start_postgres(tmp_path_factory.mktemp("postgres"))
    yield server
    server.stop()


@pytest.fixture
def zookeeper(tmp_path):
    """A throwaway ZooKeeper server for one test (sandbox.zookeeper)."""
    from sandbox.zookeeper import start_zookeeper
    server = start_zookeeper(tmp_path / "zookeeper")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """TLS files for `secure_broker` (tests/secure_broker.py)."""
    from testkit.tlssandbox import make_certs
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secure_broker(tmp_path, certs):
    """secure_broker(**config) -> a started SecureBroker: PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL."""
    from secure_broker import SecureBroker
    started = []

    def make(**config: str):
        (tmp_path / f"b{len(started)}").mkdir()
        broker = SecureBroker(tmp_path / f"b{len(started)}", certs, **config)
        started.append(broker)
        return broker.start()
    yield make
    for broker in started:
        broker.process.kill()
