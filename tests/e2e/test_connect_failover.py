"""A connector survives its machine: three distributed workers (`binlake connect worker`) share a mysql
connector created with `binlake connect submit`; while a MySQL workload runs, the worker holding the task is
SIGKILLed again and again (and replaced), and once it is frozen (SIGSTOP) past its session instead, then
thawed as a zombie. Each time another worker takes the task, and the transactional id fences the old one.
Afterwards the log holds exactly MySQL's changes, as test_mysql_crash.py checks them: tables equal, each
source position once, every transaction whole and in order. Set E2E_SEED to replay a run."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time

import aiohttp
import pytest

from sql_fixtures import by_default_on
from e2e_harness import ROOT, ConnectorProcess, mysql_config, read_committed, wait_until, write_config
from mysql_workload import (MAX_BATCH_RECORDS, check, check_stable_offsets, committed_offset,
                            sample_stable_offsets, seeded_workload, snapshot_done)

SESSION_TIMEOUT_MS = 3000
STATUS_TIMEOUT_S = 2  # one worker's answer to a status request
CLI = [sys.executable, "-m", "binlake.cli"]


class Workers:
    """Distributed workers of one group, each a process a test can kill; `url` of each from its log."""

    def __init__(self, broker, tmp_path) -> None:
        self.broker = broker
        self.tmp_path = tmp_path
        self.processes: list[ConnectorProcess] = []

    async def start(self) -> str:
        """One more worker; returns its REST URL once it serves."""
        n = len(self.processes)
        config = write_config(self.tmp_path / f"worker-{n}.yaml", **{
            "group_id": "failover", "bootstrap_servers": self.broker.address, "rest": "127.0.0.1:0",
            "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500, "offset.storage.partitions": 3})
        process = ConnectorProcess(config, self.tmp_path / f"worker-{n}.log",
                                   command=[*CLI, "connect", "worker", "--config", str(config)]).start()
        self.processes.append(process)
        async def serving() -> str | None:
            assert process.proc.poll() is None, f"worker {n} exited:\n{process.log()[-3000:]}"
            return self.url(process)
        return await wait_until(serving, 30, f"worker {n} to serve its REST API")

    @staticmethod
    def url(process: ConnectorProcess) -> str | None:
        found = re.search(r"REST API on (http://\S+)", process.log())
        return found.group(1) if found else None

    def alive(self) -> list[ConnectorProcess]:
        return [p for p in self.processes if p.proc.poll() is None]

    def by_worker_id(self, worker_id: str) -> ConnectorProcess:
        [process] = [p for p in self.processes if self.url(p) == f"http://{worker_id}"]
        return process

    def kill_all(self) -> None:
        for process in self.processes:
            if process.proc.poll() is None:
                os.kill(process.proc.pid, signal.SIGCONT)
            process.kill()


async def task_status(http: aiohttp.ClientSession, workers: Workers, name: str) -> dict | None:
    """Task 0's status as any live worker tells it. A frozen (SIGSTOPped) worker is alive but never
    answers: each ask has a short timeout (aiohttp's default of 5 minutes outlasted the test once)."""
    for process in workers.alive():
        try:
            async with http.get(f"{workers.url(process)}/connectors/{name}/status",
                                timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)) as response:
                if response.status == 200:
                    tasks = (await response.json())["tasks"]
                    return tasks[0] if tasks else None
        except (aiohttp.ClientError, TimeoutError):
            continue
    return None


async def running_elsewhere(http, workers: Workers, name: str, not_on: str | None) -> str:
    """Until task 0 is RUNNING on a live worker other than `not_on`; returns its worker id."""
    found: dict = {}

    async def moved() -> bool:
        status = await task_status(http, workers, name)
        live = {workers.url(p) for p in workers.alive()}
        if status and status["state"] == "RUNNING" and status["worker_id"] != not_on \
                and f"http://{status['worker_id']}" in live:
            found["worker"] = status["worker_id"]
            return True
        return False

    await wait_until(moved, 60, f"task 0 of {name} to run on a live worker other than {not_on}")
    return found["worker"]


async def run_failover_test(server, broker, tmp_path, *, kills: int, zombies: int) -> None:
    seed, rng, db, workload = seeded_workload(server)
    name = "failover"
    config = write_config(tmp_path / "failover.yaml", **{
        k: v for k, v in mysql_config(name, broker, server, [rf"{db}\.({'|'.join(workload.tables)})"],
                                      topic_partitions=3, max_batch_records=MAX_BATCH_RECORDS, snapshot_chunk_rows=200,
                                      commit_interval_ms=100,
                                      restart={"initial_backoff_ms": 100, "max_backoff_ms": 1000}).items()
        if k != "bootstrap_servers"})  # the workers' own log
    workers = Workers(broker, tmp_path)
    try:
        urls = await asyncio.gather(*(workers.start() for _ in range(3)))
        submitted = subprocess.run([*CLI, "connect", "submit", str(config), "--url", urls[1]], cwd=ROOT,
                                   capture_output=True, text=True, timeout=60)
        assert submitted.returncode == 0 and f"created connector {name}" in submitted.stdout, submitted.stderr
        # Changes made during the snapshot land in it as reads; the checks count streamed transactions.
        await wait_until(lambda: snapshot_done(broker.address, name), 60, "the end of the snapshot")

        stop, sampled = threading.Event(), threading.Event()
        writer = threading.Thread(target=workload.run, args=(stop, 1000), daemon=True)
        writer.start()
        topics = [f"{name}.{db}.{t}" for t in workload.tables]
        # Sampled until the connector caught up: on a loaded machine it is down for much of the workload.
        sampler = asyncio.create_task(sample_stable_offsets(broker.address, topics, sampled))
        takeovers = []
        try:
            async with aiohttp.ClientSession() as http:
                holder = await running_elsewhere(http, workers, name, None)
                rounds = ["kill"] * kills + ["freeze"] * zombies
                rng.shuffle(rounds)
                for how in rounds:
                    await asyncio.sleep(rng.uniform(0.3, 1.5))
                    victim = workers.by_worker_id(holder)
                    started = time.monotonic()
                    if how == "kill":
                        victim.kill()
                        replacement = asyncio.create_task(workers.start())  # three workers again
                        holder = await running_elsewhere(http, workers, name, holder)
                        await replacement
                    else:  # a zombie: alive, but cut off past its session; on waking it must give the task up
                        os.kill(victim.proc.pid, signal.SIGSTOP)
                        holder = await running_elsewhere(http, workers, name, holder)
                        os.kill(victim.proc.pid, signal.SIGCONT)
                        async def gave_up() -> bool:
                            return "dropped from the group" in victim.log()
                        await wait_until(gave_up, 30, "the zombie to learn it was dropped and stop its task")
                    takeovers.append((how, round(time.monotonic() - started, 1)))
        finally:
            stop.set()
            await asyncio.to_thread(writer.join)

        end = server.binlog_end()

        async def caught_up():
            offset = await committed_offset(broker.address, name)
            return offset is not None and (offset["file"], offset["pos"]) >= tuple(end)
        try:
            await wait_until(caught_up, 90, f"the committed offset to reach {end}")
        finally:
            sampled.set()
            samples = await sampler
    finally:
        workers.kill_all()

    events = await read_committed(broker.address, topics)
    check(events, workload, server, db, seed)
    check_stable_offsets(events, samples, seed)
    print(f"takeovers (how, seconds): {takeovers}; transactions {len(workload.committed)}, events {len(events)}")
    assert len(workload.committed) > 50, "the workload ran too little to mean anything"


def failover_broker(broker_factory):
    # Kafka's group.min.session.timeout.ms (6 s) would make each takeover take twice as long as it needs here.
    # And a new group's first rebalance need not wait 3 s for more members.
    return broker_factory(config={"group.min.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                                  "group.initial.rebalance.delay.ms": "0"})


@by_default_on("mysql")      # (the task moves between workers alike for either server)
async def test_the_task_fails_over_across_worker_kills_exactly_once(server, broker_factory, tmp_path):
    await run_failover_test(server, failover_broker(broker_factory), tmp_path, kills=3, zombies=1)


@pytest.mark.slow
async def test_twenty_worker_kills_exactly_once(server, broker_factory, tmp_path):
    await run_failover_test(server, failover_broker(broker_factory), tmp_path, kills=20, zombies=3)
