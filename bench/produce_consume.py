"""Produce / consume throughput and produce latency against a real `binlake broker` subprocess.

    .venv/bin/python bench/produce_consume.py [--messages N] [--size BYTES] [--only NAME ...]
                                              [--repeat 3] [--profile broker.stacks]

Every figure comes with the CPU seconds the broker process and this (client) process spent on it,
because both share the same cores: a Python client can be the ceiling, not the broker. The
`client-ceiling` rows run librdkafka against its own in-process mock cluster (no binlake at all) to
show what the client can do on this machine; the `wire` rows write pre-encoded produce requests
from a raw socket, which costs the client almost nothing, to show what the broker can take.
Each benchmark runs --repeat times and the best run is reported (other work shares the cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as TP
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from request_path import PRODUCE_VERSION, produce_frame  # bench/ is on sys.path when run as a script

from logcore.protocol.client import ClientConnection
from logcore.protocol.codec import ApiKey, decode_response
from logcore.storage.records import encode_batch

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")

# What a throughput-minded user sets: big batches, a little linger, a deep local queue.
THROUGHPUT_PRODUCER = {
    "linger.ms": 20,
    "batch.size": 4 * 1024 * 1024,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "compression.type": "none",
    "delivery.report.only.error": True,  # a Python callback per message would cost more than the broker
}
LATENCY_PRODUCER = {"linger.ms": 1, "acks": 1}
THROUGHPUT_CONSUMER = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 512 * 1024,
    "enable.auto.commit": False,
    "group.id": "bench",
}


@dataclass
class Result:
    name: str
    messages: int
    size: int
    seconds: float
    client_cpu: float = 0.0
    broker_cpu: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    settings: dict = field(default_factory=dict)

    def row(self) -> str:
        rate = self.messages / self.seconds
        mb = rate * self.size / 1e6
        lat = (f"{self.p50_ms:7.2f} {self.p99_ms:7.2f}" if self.p50_ms is not None else f"{'-':>7} {'-':>7}")
        broker = f"{self.broker_cpu:6.2f}" if self.broker_cpu is not None else f"{'-':>6}"
        return (f"{self.name:<28} {self.messages:>9} {rate:>12,.0f} {mb:>8.1f} {lat} "
                f"{self.client_cpu:6.2f} {broker} {self.seconds:6.2f}")


HEADER = (f"{'benchmark':<28} {'messages':>9} {'msgs/s':>12} {'MB/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'cli s':>6} {'brk s':>6} {'wall s':>6}")


# -- the broker under test ------------------------------------------------------------------------


class BrokerUnderTest:
    def __init__(self, data_dir: str, overrides: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "binlake.cli", "broker", "--data-dir", data_dir, "--listen", self.address]
        for item in overrides:
            args += ["--override", item]
        self.log_path = os.path.join(os.path.dirname(data_dir), "broker.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.profiler: subprocess.Popen | None = None
        deadline = time.monotonic() + 120      # (a Python start-up on a shared machine under a load of 30 or more)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log_path, errors="replace") as f:
                    raise SystemExit(f"broker exited with {self.proc.returncode}:\n{f.read()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise SystemExit(f"broker did not start listening within 120 s (its log: {self.log_path})")

    def profile(self, path: str) -> None:
        """Sample the broker with py-spy until stop(); `path` gets collapsed stacks (flamegraph input)."""
        self.profiler = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--pid", str(self.proc.pid),
             "--rate", "250", "--format", "raw", "--output", path, "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # attached before the first benchmark

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.profiler:
            self.profiler.send_signal(signal.SIGINT)
            self.profiler.wait(30)
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process and its children have used (/proc/PID/stat: utime + stime
    + the exited children's cutime + cstime; the live children's own), so a process's helpers (the
    connector's source process, the broker's cleaner) count."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # (a child that exited meanwhile: its time is in its parent's cutime)
        return 0.0
    seconds = sum(int(stat[i]) for i in (11, 12, 13, 14)) / TICKS
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/children") as f:
                seconds += sum(process_cpu_seconds(int(child)) for child in f.read().split())
    return seconds


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread, librdkafka's included
    return usage.ru_utime + usage.ru_stime


class Meter:
    """Wall time and CPU of both processes over one benchmark."""

    def __init__(self, broker: BrokerUnderTest | None) -> None:
        self.broker = broker

    def __enter__(self) -> "Meter":
        self.broker_cpu0 = self.broker.cpu_seconds() if self.broker else None
        self.cpu0 = client_cpu()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.client_cpu = client_cpu() - self.cpu0
        self.broker_cpu = self.broker.cpu_seconds() - self.broker_cpu0 if self.broker else None

    def result(self, name: str, messages: int, size: int, **kw) -> Result:
        return Result(name, messages, size, self.seconds, self.client_cpu, self.broker_cpu, **kw)


# -- confluent-kafka ------------------------------------------------------------------------------


def confluent_produce(address: str, topic: str, count: int, value: bytes, acks: str,
                      broker: BrokerUnderTest | None, name: str, extra: dict | None = None) -> Result:
    config = {"bootstrap.servers": address, "acks": acks, **THROUGHPUT_PRODUCER, **(extra or {})}
    failures = []
    config["on_delivery"] = lambda err, _msg: failures.append(err)  # errors only, see above
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)  # metadata (and auto-creation) outside the timing
    with Meter(broker) as meter:
        _produce_all(producer, topic, count, value)
        left = producer.flush(120)
    if left or failures:
        raise SystemExit(f"{name}: {left} undelivered, {len(failures)} failed ({failures[:1]})")
    return meter.result(name, count, len(value), settings={k: config[k] for k in ("acks", *THROUGHPUT_PRODUCER)})


def _produce_all(producer: Producer, topic: str, count: int, value: bytes, partitions: int = 1) -> None:
    # Positional (topic, value, key, partition): the keyword form costs the Python thread about
    # twice as much per call, and that thread is the producer's bottleneck.
    produce = producer.produce
    for i in range(count):
        try:
            produce(topic, value, None, i % partitions)
        except BufferError:  # local queue full: let librdkafka drain it
            producer.poll(0.005)
            produce(topic, value, None, i % partitions)


def _consume_until(consumer: Consumer, count: int, name: str) -> int:
    got = 0
    while got < count:
        batch = consumer.consume(min(10_000, count - got), 10)  # a bigger ask waits out the timeout
        if not batch:
            raise SystemExit(f"{name}: stalled after {got} of {count} messages")
        for msg in batch:
            if msg.error() is not None:
                raise KafkaException(msg.error())
        got += len(batch)
    return got


def confluent_consume(address: str, topic: str, count: int, size: int, broker: BrokerUnderTest | None,
                      name: str) -> Result:
    consumer = Consumer({"bootstrap.servers": address, **THROUGHPUT_CONSUMER})
    with Meter(broker) as meter:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = _consume_until(consumer, count, name)
    consumer.close()
    return meter.result(name, got, size, settings=dict(THROUGHPUT_CONSUMER))


def confluent_latency(address: str, topic: str, rate: int, seconds: float, value: bytes,
                      broker: BrokerUnderTest | None, extra: dict | None = None) -> Result:
    """Produce at a fixed rate; latency = delivery callback time - produce time, per message.
    `extra` adds or overrides producer settings (acks=all on a replicated topic, say)."""
    config = {**LATENCY_PRODUCER, **(extra or {})}
    producer = Producer({"bootstrap.servers": address, **config})
    producer.list_topics(topic, timeout=10)
    latencies: list[float] = []
    errors = []
    clock = time.perf_counter

    def delivered(err, _msg, sent):
        if err is None:
            latencies.append(clock() - sent)
        else:
            errors.append(err)

    total = int(rate * seconds)
    with Meter(broker) as meter:
        start = clock()
        sent = 0
        while sent < total:
            due = min(total, int((clock() - start) * rate) + 1)
            while sent < due:
                now = clock()
                producer.produce(topic, value, partition=0, on_delivery=lambda e, m, t=now: delivered(e, m, t))
                sent += 1
            producer.poll(0.001)  # serves callbacks as they come; librdkafka rounds timeouts to whole ms
        producer.flush(30)
    if len(latencies) != total:
        raise SystemExit(f"latency: {total - len(latencies)} of {total} messages failed ({errors[:1]})")
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    return meter.result(f"confluent latency @{rate:,}/s", total, len(value), p50_ms=p50 * 1e3, p99_ms=p99 * 1e3,
                        settings=config)


def client_ceiling(count: int, value: bytes) -> list[Result]:
    """The Python client against librdkafka's in-process mock cluster (a C broker, same process).
    The mock keeps only ~5 MB per partition, so the consume side re-reads what is retained."""
    producer = Producer({"test.mock.num.brokers": 1, "acks": 1, **THROUGHPUT_PRODUCER})
    topic, partitions = "ceiling", 4  # the mock's default partition count
    metadata = producer.list_topics(topic, timeout=10)
    with Meter(None) as meter:
        _produce_all(producer, topic, count, value, partitions)
        producer.flush(120)
    results = [meter.result("client-ceiling produce", count, len(value))]
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    consumer = Consumer({"bootstrap.servers": bootstrap, **THROUGHPUT_CONSUMER})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    retained = sum(hi - lo for lo, hi in (consumer.get_watermark_offsets(tp, timeout=10) for tp in tps))
    got = 0
    with Meter(None) as meter:
        while got < count:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            got += _consume_until(consumer, min(retained, count - got), "client-ceiling consume")
            consumer.unassign()
    consumer.close()
    results.append(meter.result("client-ceiling consume", got, len(value)))
    return results


# -- raw wire: the broker's own ceiling ----------------------------------------------------------


def wire_produce(address: str, topic: str, count: int, value: bytes, per_batch: int, broker) -> Result:
    """Pre-encoded produce requests (acks=1) written as fast as the broker takes them: the client costs
    almost nothing, so msgs/s here is what the broker can ingest."""
    frame = produce_frame(ClientConnection("rdkafka"), encode_batch([(None, value)] * per_batch,
                                                                    int(time.time() * 1000)), topic)  # sent `requests` times
    requests = max(1, count // per_batch)
    Producer({"bootstrap.servers": address}).list_topics(topic, timeout=10)  # auto-create
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port))) as sock, Meter(broker) as meter:
        sender = threading.Thread(target=lambda: [sock.sendall(frame) for _ in range(requests)])
        sender.start()
        reader = sock.makefile("rb")
        for _ in range(requests):
            (size,) = struct.unpack(">i", reader.read(4))
            response = reader.read(size)
        sender.join()
    _, last = decode_response(response, ApiKey.PRODUCE, PRODUCE_VERSION)
    partition = last.responses[0].partition_responses[0]
    if partition.error_code or partition.base_offset != (requests - 1) * per_batch:
        raise SystemExit(f"wire produce: last response {partition}")
    return meter.result(f"wire produce {per_batch}/batch", requests * per_batch, len(value))


# -- aiokafka -------------------------------------------------------------------------------------


async def aiokafka_produce(address: str, topic: str, count: int, value: bytes, broker) -> Result:
    settings = {"acks": 1, "linger_ms": 20, "max_batch_size": 1024 * 1024, "max_request_size": 8 * 1024 * 1024}
    async with AIOKafkaProducer(bootstrap_servers=address, **settings) as producer:
        await producer.partitions_for(topic)
        with Meter(broker) as meter:
            futures = [await producer.send(topic, value, partition=0) for _ in range(count)]
            await asyncio.gather(*futures)
    return meter.result("aiokafka produce acks=1", count, len(value), settings=settings)


async def aiokafka_consume(address: str, topic: str, count: int, size: int, broker) -> Result:
    settings = {"fetch_max_bytes": 64 * 1024 * 1024, "max_partition_fetch_bytes": 16 * 1024 * 1024,
                "fetch_max_wait_ms": 100}
    consumer = AIOKafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, **settings)
    await consumer.start()
    got = 0
    try:
        with Meter(broker) as meter:
            consumer.assign([TP(topic, 0)])
            consumer.seek(TP(topic, 0), 0)
            while got < count:
                batches = await consumer.getmany(timeout_ms=10_000, max_records=100_000)
                if not batches:
                    raise SystemExit(f"aiokafka consume: stalled after {got} of {count}")
                got += sum(len(b) for b in batches.values())
    finally:
        await consumer.stop()
    return meter.result("aiokafka consume", got, size, settings=settings)


def best(runs: list[Result]) -> Result:
    """The best of repeated runs: the lowest p99 for latency runs, else the highest rate."""
    if runs[0].p99_ms is not None:
        return min(runs, key=lambda r: r.p99_ms)
    return max(runs, key=lambda r: r.messages / r.seconds)


# -- main -----------------------------------------------------------------------------------------

BENCHES = ["ceiling", "wire", "produce", "produce-all", "consume", "aiokafka", "latency"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per confluent run")
    parser.add_argument("--aiokafka-messages", type=int, default=200_000, help="messages per aiokafka run")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--rate", type=int, default=10_000, help="msgs/s for the latency run")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--only", nargs="*", choices=BENCHES, default=BENCHES)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each benchmark; the best is reported (the cores are shared)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="broker config override (repeatable)")
    parser.add_argument("--profile", metavar="PATH",
                        help="sample the broker with py-spy (pip install py-spy) into PATH (collapsed stacks)")
    parser.add_argument("--bootstrap", help="use this running broker instead of starting one (no broker CPU)")
    args = parser.parse_args()

    value = os.urandom(args.size)
    results: list[Result] = []
    tmp = tempfile.mkdtemp(prefix="binlake-bench-")
    broker = None
    try:
        if args.bootstrap:
            address = args.bootstrap
        else:
            os.makedirs(os.path.join(tmp, "data"))
            broker = BrokerUnderTest(os.path.join(tmp, "data"), args.override)
            if args.profile:
                broker.profile(os.path.abspath(args.profile))
            address = broker.address
        run = f"{os.getpid()}-{int(time.time())}"

        def bench(make: Callable[[int], Result | list[Result]]) -> None:
            """Run `make(i)` --repeat times; report the best run of each benchmark it measures."""
            runs = [make(i) for i in range(args.repeat)]
            for group in zip(*(run if isinstance(run, list) else [run] for run in runs)):
                results.append(best(list(group)))
                print(results[-1].row(), flush=True)

        print(HEADER)
        if "ceiling" in args.only:
            bench(lambda i: client_ceiling(args.messages, value))
        if "wire" in args.only:
            bench(lambda i: [wire_produce(address, f"wire-{run}-{i}", args.messages, value,
                                          1_000_000 // (args.size + 10), broker),
                             wire_produce(address, f"wire-small-{run}-{i}", args.messages // 10, value, 10, broker)])
        if "produce" in args.only or "consume" in args.only:
            bench(lambda i: confluent_produce(address, f"ck-{run}-{i}", args.messages, value, "1", broker,
                                              "confluent produce acks=1"))
        if "produce-all" in args.only:
            bench(lambda i: confluent_produce(address, f"ck-all-{run}-{i}", args.messages, value, "all", broker,
                                              "confluent produce acks=all"))
        if "consume" in args.only:
            bench(lambda i: confluent_consume(address, f"ck-{run}-0", args.messages, args.size, broker,
                                              "confluent consume"))
        if "aiokafka" in args.only:
            bench(lambda i: [asyncio.run(aiokafka_produce(address, f"aio-{run}-{i}", args.aiokafka_messages, value,
                                                          broker)),
                             asyncio.run(aiokafka_consume(address, f"aio-{run}-{i}", args.aiokafka_messages,
                                                          args.size, broker))])
        if "latency" in args.only:
            bench(lambda i: confluent_latency(address, f"lat-{run}-{i}", args.rate, args.latency_seconds, value,
                                              broker))
    finally:
        if broker:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("\nsettings:")
    seen = set()
    for result in results:
        key = repr(result.settings)
        if result.settings and key not in seen:
            seen.add(key)
            print(f"  {result.name}: {result.settings}")
    print(f"\ncli s / brk s: CPU seconds of this process (librdkafka threads included) / the broker process; "
          f"{os.cpu_count()} cores shared")


if __name__ == "__main__":
    main()
