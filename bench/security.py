"""Produce and consume throughput over SASL_SSL (SCRAM-SHA-256, TLS) beside PLAINTEXT, on one broker
with both listeners, in one run: the ratio is the figure (issue 15's target: at least 0.7x).

    .venv/bin/python bench/security.py [--messages N] [--size BYTES] [--repeat 3]

librdkafka (confluent-kafka) on both sides, with the throughput settings of bench/produce_consume.py;
each protocol runs --repeat times, alternating, and the best run counts (other work shares the cores).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from produce_consume import THROUGHPUT_CONSUMER, THROUGHPUT_PRODUCER  # bench/ is on sys.path when run as a script

from sandbox.process import free_port
from testkit.brokerproc import BrokerProcess
from testkit.tlssandbox import make_certs


def start_broker(work: Path) -> tuple[BrokerProcess, dict[str, dict]]:
    certs = make_certs(work)
    plain, secure = free_port(), free_port()
    broker = BrokerProcess(work / "broker", port=plain, config={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        "ssl.keystore.location": str(certs / "broker.pem"), "sasl.enabled.mechanisms": "SCRAM-SHA-256"}).start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret")])["bench"].result(30)
    clients = {"PLAINTEXT": {"bootstrap.servers": broker.address},
               "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{secure}", "security.protocol": "SASL_SSL",
                            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-secret",
                            "ssl.ca.location": str(certs / "ca.pem")}}
    return broker, clients


def produce(settings: dict, topic: str, messages: int, size: int) -> float:
    producer = Producer({**settings, **THROUGHPUT_PRODUCER})
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0, "unacknowledged messages"
    return messages / (time.perf_counter() - started)


def consume(settings: dict, topic: str, messages: int) -> float:
    # (THROUGHPUT_CONSUMER's deep local queue: with librdkafka's defaults a consumer that fills its
    # queue of 100,000 messages backs off fetching for fetch.queue.backoff.ms, a whole second)
    consumer = Consumer({**settings, **THROUGHPUT_CONSUMER, "group.id": f"bench-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, started = 0, None
    deadline = time.monotonic() + 300
    while got < messages:
        assert time.monotonic() < deadline, f"only {got:,} of {messages:,} messages consumed from {topic}"
        batch = consumer.consume(10_000, timeout=5)
        if batch and started is None:
            started = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    rate = got / (time.perf_counter() - started)
    consumer.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="binlake-bench-security-") as work:
        broker, clients = start_broker(Path(work))
        try:
            best = {name: [0.0, 0.0] for name in clients}
            for round_ in range(args.repeat):
                for name, settings in clients.items():
                    topic = f"bench-{name.lower()}-{round_}"
                    best[name][0] = max(best[name][0], produce(settings, topic, args.messages, args.size))
                    best[name][1] = max(best[name][1], consume(settings, topic, args.messages))
        finally:
            broker.kill()
    plain = best["PLAINTEXT"]
    print(f"{args.messages:,} messages of {args.size} B, best of {args.repeat} (msgs/s)")
    print(f"{'listener':<12} {'produce':>12} {'consume':>12} {'produce ratio':>14} {'consume ratio':>14}")
    for name, (p, c) in best.items():
        print(f"{name:<12} {p:>12,.0f} {c:>12,.0f} {p / plain[0]:>14.2f} {c / plain[1]:>14.2f}")


if __name__ == "__main__":
    main()
