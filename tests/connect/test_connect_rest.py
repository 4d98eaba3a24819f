"""The Kafka-Connect-style REST API of `binlake connect run --rest`, driven with a real HTTP client."""

import asyncio
import re
import socket

import aiohttp
from connect_testlib import datagen_ids, poll

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_run, write_config


async def test_rest_status_config_pause_resume_restart_and_offsets(broker, connect_run, write_config):
    process = connect_run(write_config(name="demo", connector="datagen", bootstrap_servers=broker.address,
                                   delivery="at_least_once", batch_size=1, interval_ms=50,
                                   commit_interval_ms=100), rest="127.0.0.1:0")
    process.wait_for_log("REST API on")
    rest = re.search(r"REST API on http://(\S+)", process.log()).group(1)
    base = f"http://{rest}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/connectors") as response:
            assert (response.status, await response.json()) == (200, ["demo"])
        status = await poll(http, f"{base}/connectors/demo/status", lambda b: b["tasks"][0]["state"] == "RUNNING")
        assert status["connector"] == {"state": "RUNNING", "worker_id": rest}
        assert status["type"] == "source"

        async with http.get(f"{base}/") as response:
            assert (await response.json())["worker_id"] == rest
        async with http.get(f"{base}/connectors?expand=status&expand=info") as response:
            expanded = (await response.json())["demo"]
        assert expanded["info"]["tasks"] == [{"connector": "demo", "task": 0}]
        assert expanded["status"]["tasks"][0]["id"] == 0
        async with http.get(f"{base}/connectors/demo/tasks/0/status") as response:
            assert (await response.json())["worker_id"] == rest
        async with http.get(f"{base}/connectors/demo/tasks") as response:
            assert (await response.json())[0]["config"]["interval_ms"] == 50
        async with http.get(f"{base}/connectors/demo/config") as response:
            config = await response.json()
        assert (config["name"], config["connector"], config["batch_size"]) == ("demo", "datagen", 1)

        await poll(http, f"{base}/connectors/demo/status", lambda b: b["tasks"][0]["records"] > 0)
        async with http.put(f"{base}/connectors/demo/pause") as response:
            assert response.status == 202
        paused = await poll(http, f"{base}/connectors/demo/status",
                            lambda b: b["connector"]["state"] == "PAUSED" and b["tasks"][0]["state"] == "PAUSED")
        await asyncio.sleep(0.3)
        paused_at = len(await datagen_ids(broker.address, "demo.datagen"))
        await asyncio.sleep(1)
        assert len(await datagen_ids(broker.address, "demo.datagen")) == paused_at
        assert 0 < paused["tasks"][0]["records"] <= paused_at  # (a record counts once its batch is written)

        # KIP-558: the topics it wrote to; a reset forgets them until it writes again.
        async with http.get(f"{base}/connectors/demo/topics") as response:
            assert await response.json() == {"demo": {"topics": ["demo.datagen"]}}
        async with http.put(f"{base}/connectors/demo/topics/reset") as response:
            assert response.status == 202
        async with http.get(f"{base}/connectors/demo/topics") as response:
            assert await response.json() == {"demo": {"topics": []}}

        async with http.put(f"{base}/connectors/demo/resume") as response:
            assert response.status == 202
        async with asyncio.timeout(20):
            while len(await datagen_ids(broker.address, "demo.datagen")) <= paused_at:
                await asyncio.sleep(0.1)
        await poll(http, f"{base}/connectors/demo/topics", lambda b: b["demo"]["topics"] == ["demo.datagen"])

        async with http.post(f"{base}/connectors/demo/restart") as response:
            assert response.status == 204  # the connector object only, as in Kafka Connect
        async with http.post(f"{base}/connectors/demo/restart?includeTasks=true") as response:
            assert response.status == 202
            assert (await response.json())["tasks"][0]["state"] == "RESTARTING"
        await asyncio.to_thread(process.wait_for_log, "demo-0: restarting on request")
        await poll(http, f"{base}/connectors/demo/status", lambda b: b["tasks"][0]["state"] == "RUNNING")

        offsets = await poll(http, f"{base}/connectors/demo/offsets", lambda b: b["offsets"])
        [stored] = offsets["offsets"]
        assert stored["partition"] == {"datagen": "demo"} and stored["offset"]["next"] > paused_at

        async with http.get(f"{base}/connectors/nope/status") as response:
            assert response.status == 404
            assert await response.json() == {"error_code": 404, "message": "connector nope not found; running: demo"}
        async with http.post(f"{base}/connectors/demo/tasks/7/restart") as response:
            assert response.status == 404

    assert process.terminate() == 0, process.log()
    landed = await datagen_ids(broker.address, "demo.datagen")
    assert landed == list(range(len(landed)))  # pause, resume and a clean restart lose and repeat nothing


def http_exchange(address: str, request: bytes, body_bytes: int = 0) -> bytes:
    """Send a raw request (and `body_bytes` of filler after it, as far as the worker reads them);
    everything the worker answers before it closes the connection or goes quiet for 2 s."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        filler = b"[" * 65536
        try:
            for _ in range(body_bytes // len(filler)):
                sock.sendall(filler)
        except OSError:
            pass  # the worker closed the connection or stopped reading: it will not take a body that size
        sock.settimeout(2)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return answer


async def test_hostile_http_requests_get_clear_answers_and_the_worker_serves_on(broker, connect_run, write_config):
    process = connect_run(write_config(name="demo", connector="datagen", bootstrap_servers=broker.address,
                                       batch_size=1, interval_ms=100), rest="127.0.0.1:0")
    process.wait_for_log("REST API on")
    rest = re.search(r"REST API on http://(\S+)", process.log()).group(1)
    gigabyte = (b"POST /connectors/demo/restart HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1073741824\r\n\r\n")
    answer = await asyncio.to_thread(http_exchange, rest, gigabyte, 64 * 2**20)
    assert answer.startswith(b"HTTP/1.1 413") or answer.startswith(b"HTTP/1.1 204"), answer[:200]
    deep = b"[" * 100_000 + b"]" * 100_000
    for request in [
        b"PUT /connectors/demo/pause HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(deep), deep),
        b"PUT /connectors/demo/resume HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{not json",
        b"GARBAGE / HTTP/9\r\n\r\n",
        b"GET /connectors HTTP/1.1\r\n" + b"X-Flood: y\r\n" * 20_000 + b"\r\n",
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
    ]:
        answer = await asyncio.to_thread(http_exchange, rest, request)
        status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b"closed"
        assert status in (b"202", b"400", b"404", b"405", b"413", b"431", b"closed"), answer[:300]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://{rest}/connectors/demo/status") as response:
            assert response.status == 200 and (await response.json())["connector"]["state"] == "RUNNING"
    assert process.proc.poll() is None
    assert "Traceback" not in process.log()


async def test_a_starting_task_is_running_as_its_connector_says_never_unassigned(broker, connect_run, write_config):
    """Its source connecting (two seconds here) a task showed UNASSIGNED with an empty `source` while
    the connector said RUNNING. The worker runs it from the start: RUNNING, `source` once reported."""
    process = connect_run(write_config(name="slow", connector="flaky_plugin:FlakyConnector",
                                       bootstrap_servers=broker.address, fail_at=1 << 30, failures=0, start_ms=2000,
                                       interval_ms=50), rest="127.0.0.1:0")
    process.wait_for_log("REST API on")
    base = "http://" + re.search(r"REST API on http://(\S+)", process.log()).group(1)
    seen = []
    async with aiohttp.ClientSession() as http, asyncio.timeout(30):
        while not seen or not seen[-1]["tasks"][0]["batches"]:
            async with http.get(f"{base}/connectors/slow/status") as response:
                seen.append(await response.json())
            await asyncio.sleep(0.05)
    assert len(seen) > 10  # (the two seconds of its start were watched)
    assert {(s["connector"]["state"], s["tasks"][0]["state"]) for s in seen} == {("RUNNING", "RUNNING")}, seen
    assert all(s["tasks"][0].get("source", {"-": 0}) for s in seen), seen  # never an empty `source`
