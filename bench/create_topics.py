"""How long a CreateTopics of many partitions takes, and how long it makes other clients wait.

    .venv/bin/python bench/create_topics.py [--partitions 2000] [--repeat 3] [--ping-every-ms 20]

A real broker (its own process, a fresh data directory each run) with one existing topic; a
confluent-kafka admin client creates a topic of --partitions partitions while a second client
asks Metadata for the existing topic in a loop, a request every --ping-every-ms after the last
answer. Prints, per run, the create's wall time and the worst and median Metadata latency during
it: a create that holds the broker's event loop makes the worst latency as long as the create.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from testkit.brokerproc import BrokerProcess  # noqa: E402

TIMEOUT_S = 600.0


def run(partitions: int, ping_every_s: float, directory: Path) -> tuple[float, list[float]]:
    broker = BrokerProcess(directory / "data").start()
    try:
        settings = {"bootstrap.servers": broker.address, "log_level": 0}  # (not its lines about the kill)
        admin, pings = AdminClient(settings), AdminClient(settings)
        admin.create_topics([NewTopic("busy", 1)])["busy"].result(TIMEOUT_S)
        pings.list_topics("busy", timeout=TIMEOUT_S)
        took: list[float] = []

        def create() -> None:
            started = time.monotonic()
            admin.create_topics([NewTopic("wide", partitions)], request_timeout=TIMEOUT_S,
                                operation_timeout=TIMEOUT_S)["wide"].result(TIMEOUT_S)
            took.append(time.monotonic() - started)
        creating = threading.Thread(target=create)
        creating.start()
        latencies = []
        while creating.is_alive():
            started = time.monotonic()
            pings.list_topics("busy", timeout=TIMEOUT_S)
            latencies.append(time.monotonic() - started)
            time.sleep(ping_every_s)
        creating.join()
        return took[0], latencies
    finally:
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ping-every-ms", type=float, default=20)
    args = parser.parse_args()
    print(f"{'partitions':>10} {'create':>9} {'ms/partition':>12} {'worst Metadata':>15} {'median':>9} "
          f"{'answered':>8}")
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-create-topics-") as directory:
            took, latencies = run(args.partitions, args.ping_every_ms / 1000, Path(directory))
        print(f"{args.partitions:>10,} {took:>7.2f} s {took * 1000 / args.partitions:>12.1f} "
              f"{max(latencies) * 1000:>12.0f} ms {statistics.median(latencies) * 1000:>6.1f} ms "
              f"{len(latencies):>8}", flush=True)


if __name__ == "__main__":
    main()
