"""`binlake streams worker`: what it installs into an app, its producer linger and fetch size, what it says about apps it cannot load,
the root logger back at the level asked for once a worker has started, and a zombie worker
(SIGSTOPped past its session, then resumed) that is fenced and stops without making its uncommitted
output visible."""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
import time

import faust
from click.testing import CliRunner
from confluent_kafka import Producer

from testkit.brokerproc import ROOT
from binlake.cli import main
from brokerproc import NO_REBALANCE_DELAY, read_to_end
from faust_workers import Worker, faust_broker, wait_outputs
from streams.agent_errors import AgentErrors, AgentSupervisor
from streams.exactly_once import ExactlyOnceTransport, install
from streams.worker import defaults_unless_set


def test_exactly_once_apps_get_the_transport_others_are_left_alone():
    exact = faust.App("exact", broker="kafka://127.0.0.1:1", processing_guarantee="exactly_once")
    exact.agent(exact.topic("t"))(lambda stream: stream)
    plain = faust.App("plain", broker="kafka://127.0.0.1:1")
    assert install(exact) and isinstance(exact.transport, ExactlyOnceTransport)
    assert not install(plain) and not isinstance(plain.transport, ExactlyOnceTransport)


def test_the_agent_errors_policy_comes_from_the_app_and_its_supervisor_goes_to_every_agent(monkeypatch):
    """faust's supervisor restarts an agent that raised and loses its event: under the worker each
    agent's stops the worker or restarts the agent, as the app's policy (options, config, environment)
    decides."""
    def policy(app) -> tuple[str, str]:
        app.agent(app.topic("t"))(lambda stream: stream)
        errors = AgentErrors.of(app)
        errors.supervise()
        for agent in app.agents.values():
            supervisor = agent.supervisor_strategy()
            assert isinstance(supervisor, AgentSupervisor) and supervisor.agent_errors is errors
        return errors.policy, errors.dead_letter_topic
    assert policy(faust.App("stops", broker="kafka://127.0.0.1:1")) == ("stop", "stops-dlq")
    assert policy(faust.App("goes-on", broker="kafka://127.0.0.1:1", agent_errors="dead_letter",
                            dead_letter_topic="dead")) == ("dead_letter", "dead")
    monkeypatch.setenv("AGENT_ERRORS", "dead_letter")
    assert policy(faust.App("env", broker="kafka://127.0.0.1:1")) == ("dead_letter", "env-dlq")


def test_the_producer_lingers_5_ms_unless_the_app_says_otherwise(monkeypatch):
    def linger_ms(app) -> int:
        defaults_unless_set(app)
        return app.producer.linger_ms   # (what faust's producer is built with; it is not started)
    assert linger_ms(faust.App("default", broker="kafka://127.0.0.1:1")) == 5
    assert linger_ms(faust.App("zero", broker="kafka://127.0.0.1:1", producer_linger=0.0)) == 0
    assert linger_ms(faust.App("twenty", broker="kafka://127.0.0.1:1", producer_linger=0.02)) == 20

    class Config:
        producer_linger_ms = 0
    from_object = faust.App("object", broker="kafka://127.0.0.1:1")
    from_object.config_from_object(Config)
    assert linger_ms(from_object) == 0
    monkeypatch.setenv("PRODUCER_LINGER", "0.001")
    assert linger_ms(faust.App("environment", broker="kafka://127.0.0.1:1")) == 1


def test_the_consumer_fetches_4_mib_per_partition_unless_the_app_says_otherwise(monkeypatch):
    def fetch_size(app) -> int:
        defaults_unless_set(app)
        return app.conf.consumer_max_fetch_size  # (what faust's driver builds its aiokafka consumer with)
    assert fetch_size(faust.App("default", broker="kafka://127.0.0.1:1")) == 4 * 1024 * 1024
    assert fetch_size(faust.App("own", broker="kafka://127.0.0.1:1", consumer_max_fetch_size=1024**2)) == 1024**2
    monkeypatch.setenv("CONSUMER_MAX_FETCH_SIZE", "2097152")
    assert fetch_size(faust.App("environment", broker="kafka://127.0.0.1:1")) == 2097152


def test_a_topic_read_by_two_agents_is_refused_under_exactly_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two_readers.py").write_text(
        "import faust\n"
        "app = faust.App('two', broker='kafka://127.0.0.1:1', processing_guarantee='exactly_once')\n"
        "orders = app.topic('orders')\n"
        "@app.agent(orders)\nasync def enrich(stream):\n    async for event in stream: pass\n"
        "@app.agent(orders)\nasync def count(stream):\n    async for event in stream: pass\n")
    result = CliRunner().invoke(main, ["streams", "worker", "two_readers"])
    assert result.exit_code != 0
    assert "'orders' is read by 2 (two_readers.enrich, two_readers.count)" in result.output, result.output


def test_an_app_that_cannot_be_loaded_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "no_app.py").write_text("x = 1\n")
    runner = CliRunner()
    missing = runner.invoke(main, ["streams", "worker", "no_such_module"])
    assert missing.exit_code != 0 and "cannot import 'no_such_module'" in missing.output
    no_app = runner.invoke(main, ["streams", "worker", "no_app:x"])
    assert no_app.exit_code != 0 and "no_app has no faust app named 'x'" in no_app.output


ZOMBIE_APP = r'''
import faust

app = faust.App("zombie", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, broker_session_timeout=6, broker_heartbeat_interval=0.5,
                broker_commit_interval=0.5, consumer_auto_offset_reset="earliest", web_enabled=False)
source = app.topic("z-in", value_serializer="raw", partitions=1)
out = app.topic("z-out", value_serializer="raw")


@app.agent(source)
async def forward(stream):
    async for value in stream:
        await out.send(value=value)
'''


def feed(address: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": address})
    for i in range(start, start + count):
        producer.produce("z-in", value=b"z%05d" % i)
    assert producer.flush(30) == 0


def test_a_zombie_worker_is_fenced_stops_and_its_uncommitted_output_stays_invisible(broker_factory, tmp_path):
    broker = faust_broker(broker_factory, "z-in", "z-out")
    (tmp_path / "zombie_app.py").write_text(ZOMBIE_APP.format(address=broker.address))
    zombie = Worker(tmp_path, 0, "zombie_app").start()
    successor = Worker(tmp_path, 1, "zombie_app")
    try:
        feed(broker.address, 0, 100)
        wait_outputs(broker.address, "z-out", 100)
        feed(broker.address, 100, 2000)
        zombie.proc.send_signal(signal.SIGSTOP)  # stalls mid-stream (GC, a swapped-out VM) past its session
        successor.start()
        wait_outputs(broker.address, "z-out", 2100)  # the successor took the partition over
        zombie.proc.send_signal(signal.SIGCONT)
        try:
            code = zombie.proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the zombie kept running:\n{zombie.log()[-3000:]}") from None
        assert code != 0 and "was taken over by a newer worker" in zombie.log(), zombie.log()[-3000:]
        feed(broker.address, 2100, 100)
        wait_outputs(broker.address, "z-out", 2200)
        time.sleep(2)  # anything late would be a duplicate
        got = read_to_end(broker.address, {"z-out": 1}, "read_committed")
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
        zombie.kill()
        successor.kill()
    counts = collections.Counter(got)
    assert sorted(counts) == [b"z%05d" % i for i in range(2200)] and set(counts.values()) == {1}, \
        f"{sum(n > 1 for n in counts.values())} duplicated outputs"


LEVEL_APP = r'''
import logging
import faust

app = faust.App("levels", broker="kafka://{address}", web_enabled=False)


@app.timer(0.2)
async def report():
    with open("root-level.txt", "w") as f:
        f.write(str(logging.getLogger().getEffectiveLevel()))
'''


def test_after_start_the_worker_logs_at_the_level_asked_for(broker_factory, tmp_path):
    """faust raises the root logger to DEBUG for its start-up spinner (at -l warn, its default) and
    left it there, so every debug call built a record the handlers dropped."""
    broker = broker_factory(config=NO_REBALANCE_DELAY)
    (tmp_path / "levels_app.py").write_text(LEVEL_APP.format(address=broker.address))
    worker = subprocess.Popen([sys.executable, "-m", "binlake.cli", "streams", "worker", "levels_app", "-l", "warn",
                               "--without-web"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    report = tmp_path / "root-level.txt"
    try:
        deadline = time.monotonic() + 60
        while not (report.exists() and report.read_text() == str(logging.WARNING)):
            assert worker.poll() is None and time.monotonic() < deadline, \
                f"root logger at {report.read_text() if report.exists() else 'no report'}, expected {logging.WARNING}"
            time.sleep(0.2)
    finally:
        worker.kill()
        worker.wait()


SECURE_APP = '''
import faust
app = faust.App("secapp", broker="kafka://127.0.0.1:1", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, consumer_auto_offset_reset="earliest", web_enabled=False)
out = app.topic("s-out", value_serializer="raw")


@app.agent(app.topic("s-in", value_serializer="raw", partitions=1))
async def forward(stream):
    async for value in stream:
        await out.send(value=value.upper())
'''


def test_a_worker_reaches_a_sasl_ssl_broker_with_acls_from_its_config(secure_broker, certs, tmp_path):
    """The app names no broker it can reach: `--config` gives it the SASL_SSL listener and alice's
    credentials, and alice may touch only the app's own topics, group and transactional ids and its
    two topics (the test feeds and reads over PLAINTEXT, a super user here)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)
    broker = secure_broker(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                              "super.users": "User:ANONYMOUS", "transaction.state.log.num.partitions": "3",
                              "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
    plaintext = broker.address("PLAINTEXT")
    admin = AdminClient({"bootstrap.servers": plaintext})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("s-in", "s-out")]).values():
        future.result(30)
    grants = [(ResourceType.TOPIC, "s-"), (ResourceType.TOPIC, "secapp"), (ResourceType.GROUP, "secapp"),
              (ResourceType.TRANSACTIONAL_ID, "secapp")]
    for future in admin.create_acls([AclBinding(t, name, ResourcePatternType.PREFIXED, "User:alice", "*",
                                                AclOperation.ALL, AclPermissionType.ALLOW)
                                     for t, name in grants]).values():
        future.result(30)
    (tmp_path / "secure_app.py").write_text(SECURE_APP)
    (tmp_path / "secure.yaml").write_text(
        f"bootstrap_servers: {broker.address('SASL_SSL')}\n"
        "security:\n  protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n  username: alice\n"
        f"  password: ${{ALICE_PASSWORD}}\n  ca_file: {certs / 'ca.pem'}\n")
    worker = Worker(tmp_path, 0, "secure_app", env={"ALICE_PASSWORD": "alice-secret"},
                    options=("--config", "secure.yaml"))
    producer = Producer({"bootstrap.servers": plaintext})
    for i in range(50):
        producer.produce("s-in", value=b"v%02d" % i)
    producer.flush(30)
    try:
        worker.start()
        got = wait_outputs(plaintext, "s-out", 50)
    finally:
        worker.kill()
    assert sorted(got) == [b"V%02d" % i for i in range(50)], worker.log()[-3000:]
    assert "AUTHORIZATION_FAILED" not in worker.log()


METERED_APP = '''
import faust
app = faust.App("metered", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, consumer_auto_offset_reset="earliest", broker_commit_interval=0.5,
                web_enabled=False)
out = app.topic("m-out", value_serializer="raw")


@app.agent(app.topic("m-in", value_serializer="raw", partitions=1))
async def forward(stream):
    async for value in stream:
        await out.send(value=value)
'''


def test_a_worker_serves_faust_metrics_events_and_commit_latency(broker_factory, tmp_path):
    from prometheus_scrape import endpoint, scrape
    from waiting import wait_for
    broker = faust_broker(broker_factory, "m-in", "m-out")
    (tmp_path / "metered_app.py").write_text(METERED_APP.format(address=broker.address))
    worker = Worker(tmp_path, 0, "metered_app", options=("--prometheus-listener", "127.0.0.1:0")).start()
    producer = Producer({"bootstrap.servers": broker.address})
    for i in range(30):
        producer.produce("m-in", value=b"%d" % i)
    producer.flush(30)
    try:
        wait_outputs(broker.address, "m-out", 30)
        url = endpoint(worker.log())
        assert url, worker.log()[-2000:]

        def counted() -> dict | None:  # (the sensor hears of a commit just after the outputs are visible)
            found = {name: value for (name, _labels), value in scrape(url).items()}
            return found if found.get("binlake_streams_consumer_commit_latency_count", 0) >= 1 else None
        samples = wait_for(counted, "a commit counted")
    finally:
        worker.kill()
    assert samples["binlake_streams_total_events_total"] >= 30


CHATTY_APP = r'''
import logging
import faust

app = faust.App("chatty", broker="kafka://{address}", store="memory://", topic_partitions=1,
                consumer_auto_offset_reset="earliest", web_enabled=False)


@app.agent(app.topic("c-in", value_serializer="raw", partitions=1))
async def pick(stream):
    async for value in stream:
        if value == b"boom":
            raise KeyError("boom")
        logging.getLogger("chatty").info("picked %s", value.decode())
'''


def test_by_default_a_worker_says_it_is_ready_and_shows_a_crash_without_faust_chatter_and_v_brings_it_back(
        broker_factory, tmp_path):
    broker = faust_broker(broker_factory, "c-in")
    (tmp_path / "chatty_app.py").write_text(CHATTY_APP.format(address=broker.address))
    feed_topic = Producer({"bootstrap.servers": broker.address})

    def run(n: int, verbose: bool) -> str:
        """The worker's output until it has handled `a` and `boom`, stopped by SIGTERM."""
        for value in (b"a", b"boom"):
            feed_topic.produce("c-in", value=value)
        assert feed_topic.flush(30) == 0
        worker = Worker(tmp_path, n, "chatty_app", verbose=verbose).start()
        try:
            deadline = time.monotonic() + 60
            while "KeyError: 'boom'" not in worker.log():
                assert worker.proc.poll() is None and time.monotonic() < deadline, worker.log()[-3000:]
                time.sleep(0.2)
            worker.proc.send_signal(signal.SIGTERM)
            worker.proc.wait(60)
        finally:
            worker.kill()
        return worker.log()

    quiet = run(0, verbose=False)
    lines = quiet.splitlines()
    before_ready = lines[:next(n for n, line in enumerate(lines) if "chatty ready" in line)]
    assert len(before_ready) == 1 and "chatty: assigned c-in [0]" in before_ready[0], quiet  # (and nothing else)
    assert "chatty ready (at_least_once, brokers " in quiet
    assert "picked a" in quiet  # the app's own lines stay, at -l (info by default)
    assert "Crashed reason=KeyError('boom')" in quiet and "Traceback" in quiet
    for chatter in ("ƒaµS†", "Starting...", "Stopping...", "Joined group", "Subscribed to topic(s)"):
        assert chatter not in quiet, quiet

    verbose = run(1, verbose=True)  # (-v)
    for chatter in ("ƒaµS†", "Starting...", "Stopping...", "[^Worker]: Ready"):
        assert chatter in verbose, verbose[-3000:]
