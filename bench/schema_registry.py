"""Requests per second `binlake schema-registry` serves, by the calls Confluent's serializers make.

    .venv/bin/python bench/schema_registry.py [--subjects 50] [--versions 3] [--seconds 10] [--concurrency 16]

Starts one `binlake broker` and one registry (testkit), registers --subjects Avro subjects of
--versions versions each, then for --seconds per call keeps --concurrency requests in flight from one
aiohttp client (keep-alive) and prints requests/s, p50 and p99 latency, the registry's CPU per 1,000
requests and the load average:

- GET /schemas/ids/{id}             a deserializer meeting an id it has not cached
- POST /subjects/{s} (lookup)       a serializer with auto.register.schemas=false
- POST /subjects/{s}/versions       a serializer with auto.register.schemas=true (already registered:
                                    idempotent, no write)
- GET /subjects/{s}/versions/latest a serializer with use.latest.version=true
- POST /subjects/{s}/versions new   registrations that write to `_schemas` (compatibility NONE)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.registryproc import RegistryProcess  # noqa: E402

HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def schema(subject: int, version: int) -> str:
    """Row<subject> with 8 + version fields (a version adds one)."""
    fields = [{"name": f"f{n}", "type": ["null", "long", "string"][n % 3], **({"default": None} if n % 3 == 0 else {})}
              for n in range(8 + version)]
    return json.dumps({"type": "record", "name": f"Row{subject}", "namespace": "bench", "fields": fields})


def new_schema(n: int) -> str:
    """The n-th of schemas of one size (10 fields), each new to the registry."""
    return schema(0, 2).replace('"namespace": "bench"', f'"namespace": "bench.w{n}"')


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(session: aiohttp.ClientSession, request, seconds: float, concurrency: int) -> list[float]:
    """Latencies of every request completed in `seconds`, `concurrency` in flight."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(n: int) -> None:
        rng = random.Random(n)
        while time.perf_counter() < deadline:
            method, path, body = request(rng)
            started = time.perf_counter()
            async with session.request(method, path, data=body, headers=HEADERS) as response:
                await response.read()
                if response.status != 200:
                    raise AssertionError(f"{method} {path}: {response.status} {await response.text()}")
            latencies.append(time.perf_counter() - started)
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return latencies


async def bench(url: str, pid: int, args) -> None:
    async with aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(limit=args.concurrency)) as s:
        async with s.put("/config", data=json.dumps({"compatibility": "NONE"}), headers=HEADERS) as r:
            assert r.status == 200
        ids = []
        for subject in range(args.subjects):
            for version in range(args.versions):
                body = json.dumps({"schema": schema(subject, version)})
                async with s.post(f"/subjects/s{subject}-value/versions", data=body, headers=HEADERS) as r:
                    ids.append((await r.json())["id"])

        def pick(rng) -> tuple[int, int]:
            return rng.randrange(args.subjects), rng.randrange(args.versions)

        new = iter(range(10**9))
        calls = {
            "GET /schemas/ids/{id}": lambda rng: ("GET", f"/schemas/ids/{rng.choice(ids)}", None),
            "POST /subjects/{s} (lookup)": lambda rng: (
                "POST", f"/subjects/s{(p := pick(rng))[0]}-value", json.dumps({"schema": schema(*p)})),
            "POST /subjects/{s}/versions (registered)": lambda rng: (
                "POST", f"/subjects/s{(p := pick(rng))[0]}-value/versions", json.dumps({"schema": schema(*p)})),
            "GET /subjects/{s}/versions/latest": lambda rng: (
                "GET", f"/subjects/s{pick(rng)[0]}-value/versions/latest", None),
            "POST /subjects/{s}/versions (new: a write)": lambda rng: (
                "POST", "/subjects/writes-value/versions", json.dumps({"schema": new_schema(next(new))})),
        }
        print(f"{args.subjects} subjects x {args.versions} versions, {args.concurrency} requests in flight, "
              f"{args.seconds:g} s per call")
        for name, request in calls.items():
            if args.only and args.only not in name:
                continue
            cpu0 = cpu_seconds(pid)
            latencies = sorted(await drive(s, request, args.seconds, args.concurrency))
            cpu = cpu_seconds(pid) - cpu0
            n = len(latencies)
            print(f"{name:<44} {n / args.seconds:>8,.0f} req/s  p50 {latencies[n // 2] * 1000:6.1f} ms  "
                  f"p99 {latencies[int(n * 0.99)] * 1000:6.1f} ms  registry CPU {cpu / n * 1e6:,.0f} µs/req")
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subjects", type=int, default=50)
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", help="run only the calls whose name contains this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", config={"group.initial.rebalance.delay.ms": "0"}).start()
        registry = None
        try:
            registry = RegistryProcess(broker.address, Path(tmp) / "registry.log").start()
            asyncio.run(bench(registry.url, registry.proc.pid, args))
        finally:
            if registry is not None:
                registry.kill()
            broker.kill()


if __name__ == "__main__":
    main()
