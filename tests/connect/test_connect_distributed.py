"""Distributed workers (`binlake connect worker`): connectors created, changed, stopped and deleted through
Kafka Connect's REST API on any worker, shared across the group, handed over when a worker joins or leaves.
Real workers, a real broker, a real HTTP client. (The MySQL failover test is tests/e2e/test_connect_failover.py.)"""

import asyncio
import json
import re
import subprocess

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from connect_testlib import CONNECT, ROOT, datagen_ids, poll, stored_offsets

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_worker, write_config


@pytest.fixture
def broker(broker_factory):
    """A broker that completes a new group's first rebalance at once, not after 3 s waiting for more members."""
    return broker_factory(config={"group.initial.rebalance.delay.ms": "0"})


def datagen(topic: str, **keys) -> dict:
    return {"connector": "datagen", "topic": topic, "batch_size": 5, "interval_ms": 50, **keys}


async def request(http, method: str, url: str, body=None) -> tuple[int, object]:
    async with http.request(method, url, json=body) as response:
        data = await response.read()
        return response.status, json.loads(data) if data else None


def last_word(log: str, task: str) -> str | None:
    """"started" or "stopped": what the last line of `log` about `task` starting or stopping says."""
    words = re.findall(rf"{task} (started \(|stopped on this worker)", log)
    return words[-1].split()[0] if words else None


def running_on(status: dict) -> set[str]:
    return {t["worker_id"] for t in status["tasks"] if t["state"] == "RUNNING"}


async def test_connectors_are_created_changed_stopped_and_deleted_through_any_worker(broker, connect_worker,
                                                                                      write_config):
    one, two = connect_worker(broker.address), connect_worker(broker.address)
    async with aiohttp.ClientSession() as http:
        # Created through one worker, answered the same by both (one of them forwarded it to the leader).
        status, info = await request(http, "POST", f"{one.url}/connectors",
                                     {"name": "gen", "config": datagen("gen.users")})
        assert status == 201, info
        assert (info["name"], info["type"], info["config"]["bootstrap_servers"]) == ("gen", "source", broker.address)
        # (the connector's and its task's statuses are separate records, written by whichever workers
        # run them: each view reaches RUNNING for both, in either order)
        for worker in (one, two):
            await poll(http, f"{worker.url}/connectors/gen/status",
                       lambda s: running_on(s) and s["connector"]["state"] == "RUNNING")
        assert (await request(http, "POST", f"{two.url}/connectors", {"name": "gen", "config": datagen("x")}))[0] == 409
        status, error = await request(http, "POST", f"{two.url}/connectors",
                                      {"name": "bad", "config": datagen("x", batch_size="many", bogus=1)})
        assert status == 400 and "batch_size" in error["message"] and "bogus: unknown key" in error["message"]

        admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
        await admin.start()
        try:
            [group] = await admin.describe_consumer_groups(["workers"])
        finally:
            await admin.close()
        described = group.groups[0]
        assert (described[1], described[3], len(described[5])) == ("workers", "connect", 2)  # id, protocol type, members

        # Reconfigured: the task starts over with the new config.
        status, _ = await request(http, "PUT", f"{two.url}/connectors/gen/config", datagen("gen.users", batch_size=7))
        assert status == 200
        await poll(http, f"{one.url}/connectors/gen/tasks", lambda tasks: tasks[0]["config"]["batch_size"] == 7)

        # Paused and resumed.
        assert (await request(http, "PUT", f"{one.url}/connectors/gen/pause"))[0] == 202
        await poll(http, f"{two.url}/connectors/gen/status", lambda s: s["tasks"][0]["state"] == "PAUSED")
        assert (await request(http, "PUT", f"{one.url}/connectors/gen/resume"))[0] == 202
        await poll(http, f"{two.url}/connectors/gen/status", running_on)

        # KIP-875: offsets change only while the connector is stopped, and it resumes from them.
        status, error = await request(http, "PATCH", f"{one.url}/connectors/gen/offsets",
                                      {"offsets": [{"partition": {"datagen": "gen"}, "offset": {"next": 1000}}]})
        assert status == 400 and "STOPPED" in error["message"]
        assert (await request(http, "PUT", f"{two.url}/connectors/gen/stop"))[0] == 204
        stopped = await poll(http, f"{one.url}/connectors/gen/status", lambda s: s["connector"]["state"] == "STOPPED")
        assert stopped["tasks"] == []
        # KIP-558: the topics its tasks wrote to, on every worker; a reset forgets them until they write again.
        for worker in (one, two):
            await poll(http, f"{worker.url}/connectors/gen/topics", lambda t: t == {"gen": {"topics": ["gen.users"]}})
        assert (await request(http, "PUT", f"{two.url}/connectors/gen/topics/reset"))[0] == 202
        for worker in (one, two):
            await poll(http, f"{worker.url}/connectors/gen/topics", lambda t: t == {"gen": {"topics": []}})
        status, _ = await request(http, "PATCH", f"{one.url}/connectors/gen/offsets",
                                  {"offsets": [{"partition": {"datagen": "gen"}, "offset": {"next": 1000}}]})
        assert status == 200
        assert (await request(http, "GET", f"{two.url}/connectors/gen/offsets"))[1] == {
            "offsets": [{"partition": {"datagen": "gen"}, "offset": {"next": 1000}}]}
        before = await datagen_ids(broker.address, "gen.users", "read_committed")
        assert (await request(http, "PUT", f"{one.url}/connectors/gen/resume"))[0] == 202
        async with asyncio.timeout(30):
            while not [i for i in await datagen_ids(broker.address, "gen.users", "read_committed") if i >= 1000]:
                await asyncio.sleep(0.1)
        after = await datagen_ids(broker.address, "gen.users", "read_committed")
        assert [i for i in after if i not in before] == list(range(1000, 1000 + len(after) - len(before)))
        await poll(http, f"{one.url}/connectors/gen/topics", lambda t: t == {"gen": {"topics": ["gen.users"]}})

        # Restarts, as Kafka Connect answers them.
        status, body = await request(http, "POST", f"{two.url}/connectors/gen/restart?includeTasks=true")
        assert status == 202 and body["tasks"][0]["state"] == "RESTARTING"
        assert (await request(http, "POST", f"{one.url}/connectors/gen/tasks/0/restart"))[0] == 204
        assert (await request(http, "POST", f"{one.url}/connectors/gen/tasks/9/restart"))[0] == 404

        # Plugins and validation.
        status, plugins = await request(http, "GET", f"{one.url}/connector-plugins")
        assert {p["alias"]: p["type"] for p in plugins} == {"datagen": "source", "mysql": "source"}
        status, checked = await request(http, "PUT", f"{two.url}/connector-plugins/datagen/config/validate",
                                        {"name": "v", "batch_size": "many"})
        assert status == 200 and checked["error_count"] == 1
        [wrong] = [c["value"] for c in checked["configs"] if c["value"]["errors"]]
        assert wrong["name"] == "batch_size"
        status, checked = await request(http, "PUT", f"{one.url}/connector-plugins/connect.datagen.DatagenConnector"
                                        "/config/validate", {"name": "v", "topic": "t"})  # by class name
        assert status == 200 and checked["error_count"] == 0, checked

        # `connect submit` creates or updates from a `connect run` YAML file.
        config = write_config("submitted.yaml", name="gen", **datagen("gen.users", batch_size=3))
        submitted = subprocess.run([*CONNECT, "submit", str(config), "--url", one.url], cwd=ROOT, capture_output=True,
                                   text=True, timeout=60)
        assert (submitted.returncode, submitted.stdout.strip()) == (0, "updated connector gen"), submitted.stderr
        await poll(http, f"{two.url}/connectors/gen/config", lambda c: c["batch_size"] == 3)

        # Deleted: its task stops and every worker forgets it.
        assert (await request(http, "DELETE", f"{two.url}/connectors/gen"))[0] == 204
        for worker in (one, two):
            assert (await request(http, "GET", f"{worker.url}/connectors/gen/status"))[0] == 404
            assert (await request(http, "GET", f"{worker.url}/connectors"))[1] == []
        async with asyncio.timeout(20):  # on every worker the task's last word is that it stopped
            while not all(last_word(w.log(), "gen-0") in (None, "stopped") for w in (one, two)):
                await asyncio.sleep(0.1)
        committed = len(await datagen_ids(broker.address, "gen.users", "read_committed"))
        await asyncio.sleep(0.5)  # a task left running would add records meanwhile
        assert len(await datagen_ids(broker.address, "gen.users", "read_committed")) == committed
    for worker in (one, two):
        assert worker.terminate() == 0, worker.log()
        assert "Traceback" not in worker.log()


async def test_a_joining_worker_takes_a_share_and_a_leaving_one_hands_over_at_once(broker, connect_worker):
    first = connect_worker(broker.address, **{"session.timeout.ms": 60_000})
    async with aiohttp.ClientSession() as http:
        for name in ("a", "b"):
            status, _ = await request(http, "PUT", f"{first.url}/connectors/{name}/config", datagen(f"{name}.users"))
            assert status == 201
        for name in ("a", "b"):
            await poll(http, f"{first.url}/connectors/{name}/status", running_on)

        # A second worker joins: one task moves to it (revoked first, then assigned), the other stays.
        second = connect_worker(broker.address)
        workers = {first.url.removeprefix("http://"), second.url.removeprefix("http://")}

        async def spread() -> bool:
            owners = [running_on(await poll(http, f"{first.url}/connectors/{n}/status", lambda s: True))
                      for n in ("a", "b")]
            return set().union(*owners) == workers and all(len(o) == 1 for o in owners)
        async with asyncio.timeout(30):
            while not await spread():
                await asyncio.sleep(0.2)

        # The first worker stops cleanly and leaves the group: the second takes everything at once, not
        # after session.timeout.ms (60 s here).
        assert first.terminate() == 0, first.log()
        for name in ("a", "b"):
            await poll(http, f"{second.url}/connectors/{name}/status",
                       lambda s: running_on(s) == {second.url.removeprefix("http://")}, timeout=20)
    assert second.terminate() == 0, second.log()
    for name in ("a", "b"):  # handed over twice, exactly once: every id once, none missing
        ids = await datagen_ids(broker.address, f"{name}.users", "read_committed")
        assert ids == list(range(len(ids))) and ids
        assert (await stored_offsets(broker.address, name, "read_committed"))[-1][1]["next"] == len(ids)


async def test_failed_tasks_restart_with_backoff_and_a_failed_one_restarts_on_request(broker, connect_worker):
    worker = connect_worker(broker.address)
    flaky = datagen("flaky.users", connector="flaky_plugin:FlakyConnector", count=40, fail_at=20, failures=3,
                    restart={"initial_backoff_ms": 50, "max_restarts": 1})
    async with aiohttp.ClientSession() as http:
        assert (await request(http, "PUT", f"{worker.url}/connectors/flaky/config", flaky))[0] == 201
        failed = await poll(http, f"{worker.url}/connectors/flaky/status", lambda s: s["tasks"][0]["state"] == "FAILED")
        assert "injected failure at record 20 (attempt 2)" in failed["tasks"][0]["trace"]
        status, body = await request(http, "POST", f"{worker.url}/connectors/flaky/restart?includeTasks=true&onlyFailed=true")
        assert status == 202 and body["tasks"][0]["state"] == "RESTARTING"
        # Attempt 3 fails and is restarted by the runtime after its backoff; attempt 4 runs to the end.
        await poll(http, f"{worker.url}/connectors/flaky/status", lambda s: s["tasks"][0]["state"] == "FINISHED")
    assert await datagen_ids(broker.address, "flaky.users", "read_committed") == list(range(40))
    assert "flaky-0 failed: RuntimeError: injected failure at record 20 (attempt 3); restarting in" in worker.log()


async def test_worker_config_and_group_errors_are_clear(broker, connect_worker, tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text("group_id: g\nbootstrap_servers: 127.0.0.1:1\nsession.timout.ms: 5000\n")
    wrong = subprocess.run([*CONNECT, "worker", "--config", str(config)], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 2
    assert "session.timout.ms: unknown key; did you mean 'session.timeout.ms'?" in wrong.stderr

    # The broker refuses a session below its group.min.session.timeout.ms (6 s by default).
    short = connect_worker(broker.address, wait=False, **{"session.timeout.ms": 2000})
    assert short.wait() == 1
    assert "refuses session.timeout.ms=2000" in short.log() and "group.min.session.timeout.ms" in short.log()

    # A group that consumers use already is not the workers'.
    consumer = AIOKafkaConsumer("anything", bootstrap_servers=broker.address, group_id="taken")
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)
        taken = connect_worker(broker.address, wait=False, group_id="taken")
        assert await asyncio.to_thread(taken.wait) == 1
    finally:
        await consumer.stop()
    assert "group taken is in use by members of another kind" in taken.log()


async def test_a_worker_and_its_connectors_reach_a_sasl_ssl_listener_from_the_worker_yaml(secure_broker, certs,
                                                                                          connect_worker):
    """The worker's `security` block serves its own clients (group membership, config and status
    topics) and the connectors it runs; the datagen connector's records arrive exactly once."""
    broker = secure_broker(**{"group.initial.rebalance.delay.ms": "0"})
    security = {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "alice", "password": "alice-secret",
                "ca_file": str(certs / "ca.pem")}
    worker = connect_worker(broker.address("SASL_SSL"), security=security)
    async with aiohttp.ClientSession() as http:
        status, _ = await request(http, "PUT", f"{worker.url}/connectors/secure/config", datagen("secure.users"))
        assert status == 201
        await poll(http, f"{worker.url}/connectors/secure/status", running_on)
    plaintext = broker.address("PLAINTEXT")   # (the checks read over the broker's PLAINTEXT listener)
    async with asyncio.timeout(30):
        while len(ids := await datagen_ids(plaintext, "secure.users", "read_committed")) < 20:
            await asyncio.sleep(0.2)
    assert ids == list(range(len(ids)))
    assert "failed SASL authentication" not in broker.process.log()
