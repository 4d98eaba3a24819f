"""How long rolling a segment holds the broker's event loop, and how long its fsync takes.

    .venv/bin/python bench/roll.py [--segment-mb 256] [--rolls 4]

A partition log (logcore.storage.log) in a running event loop: batches of 100-byte records are
appended until the active segment reaches --segment-mb and rolls. Prints, per roll, the time the
append that rolled it held the loop, and when the sealed segment's fsync finished (the recovery
point reaching the new segment). The page cache holds the whole segment dirty when it rolls, as on a
broker that leaves durability to replication (Kafka's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from logcore.config import BrokerConfig, TopicConfig  # noqa: E402
from logcore.storage.log import PartitionLog  # noqa: E402
from logcore.storage.records import encode_batch  # noqa: E402

RECORDS_PER_BATCH = 1000


async def run(segment_mb: int, rolls: int, directory: str) -> None:
    config = TopicConfig(BrokerConfig(), {"segment.bytes": str(segment_mb << 20)})
    log = PartitionLog(directory, "roll", 0, config)
    log.open(0, clean=False)
    log.assign_leader_epoch(0)
    batch = encode_batch([(b"k%d" % i, os.urandom(100)) for i in range(RECORDS_PER_BATCH)], int(time.time() * 1000))
    headers = log.validate(batch)
    print(f"{'roll':>4} {'loop held':>10} {'fsync done after':>17}")
    for n in range(1, rolls + 1):
        while True:
            segments = len(log.segments)
            started = time.perf_counter()
            log.append(batch, headers)
            held = time.perf_counter() - started
            if len(log.segments) > segments:
                break
        target = log.active.base_offset
        while log.recovery_point < target:
            await asyncio.sleep(0.001)
        print(f"{n:>4} {held * 1000:>8.1f} ms {(time.perf_counter() - started) * 1000:>14.1f} ms", flush=True)
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segment-mb", type=int, default=256)
    parser.add_argument("--rolls", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(args.segment_mb, args.rolls, os.path.join(directory, "roll-0")))


if __name__ == "__main__":
    main()
