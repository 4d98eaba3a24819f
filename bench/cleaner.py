"""The log cleaner: how fast one cleaner worker compacts, and what a running clean costs producers.

    .venv/bin/python bench/cleaner.py [--records 1000000] [--messages 4000000] [--backlog 8000000]
                                      [--rounds 6] [--cleaner-io BYTES_PER_S] [--only throughput|producers]

throughput: logs of 100-byte records (10-byte keys, values of random digits, 500 records a batch,
64 MiB segments) whose keys
are 1 % or 10 % distinct, in each codec, written to disk and cleaned once by `compaction.clean` in
this process (one cleaner worker does exactly this). Records/s counts every record read; a clean
reads the log twice (the key map, then the copy).

producers: one `binlake broker`; confluent-kafka produces --messages 100-byte messages (acks=1) to a
plain topic, --rounds times alternating: with no clean running, then while the cleaner compacts a
backlog of --backlog records (a topic switched to cleanup.policy=compact as the run starts: the run
overlaps the clean's key map and its copy; the share of each run the clean overlapped, from the clean's
own duration in the broker's log, is printed). Dirty pages are written back (sync) before each run, so
neither run pays for the write-back of what came before it. The ratio is the median of the rounds'
ratios (a run during a clean over the run just before it without). --cleaner-io sets the broker's
log.cleaner.io.max.bytes.per.second (unlimited by default, as in Kafka).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from produce_consume import confluent_produce  # noqa: E402

from testkit.brokerproc import BrokerProcess  # noqa: E402
from logcore.config import BrokerConfig, TopicConfig  # noqa: E402
from logcore.storage.batch import CODECS  # noqa: E402
from logcore.storage.compaction import clean  # noqa: E402
from logcore.storage.log import PartitionLog  # noqa: E402
from logcore.storage.log_cleaner import cleanable, job_for  # noqa: E402
from logcore.storage.records import build_batch  # noqa: E402

T0 = 1_700_000_000_000
BATCH = 500
KEY_SHARES = (0.01, 0.10)
CODEC_IDS = {name: codec for codec, name in CODECS.items()}


def write_log(directory: str, records: int, key_share: float, codec: int) -> PartitionLog:
    config = TopicConfig(BrokerConfig(), {"cleanup.policy": "compact", "segment.bytes": str(64 << 20)})
    log = PartitionLog(directory, "bench", 0, config)
    log.open(0, clean=False)
    rng, distinct = random.Random(7), max(int(records * key_share), 1)
    for _ in range(0, records, BATCH):
        # Values of random digits: they compress about 2:1, like text, unlike random bytes or one repeated value.
        batch = build_batch([(i, T0 + i, b"k%09d" % rng.randrange(distinct), b"%089d" % rng.getrandbits(280), ())
                             for i in range(BATCH)],
                            base_timestamp=T0, max_timestamp=T0 + BATCH - 1, last_offset_delta=BATCH - 1,
                            attributes=codec)
        log.append(batch, log.validate(batch))
    log.roll()
    return log


def throughput(records: int, workdir: str) -> None:
    print(f"{'keys':>5} {'codec':>7} {'records/s':>11} {'MB/s read':>10} {'kept':>8} {'bytes in → out':>22}")
    for share in KEY_SHARES:
        for name in ("none", "snappy", "lz4", "zstd", "gzip"):
            directory = os.path.join(workdir, f"{share}-{name}")
            log = write_log(directory, records, share, CODEC_IDS[name])
            found = cleanable(log, log.log_end_offset, 0, T0)
            job = job_for(log, found, T0, 128 << 20)
            result = clean(job)
            stats = result.stats
            size = sum(s.size for s in job.segments)
            print(f"{share:>5.0%} {name:>7} {stats.records_read / stats.seconds:>11,.0f} "
                  f"{size / stats.seconds / 1e6:>10,.1f} {stats.records_kept:>8,} "
                  f"{size / 1e6:>10,.1f} → {stats.bytes_written / 1e6:>7,.1f} MB", flush=True)
            log.close()
            shutil.rmtree(directory)


def producers(records: int, backlog: int, rounds: int, io_limit: float | None, workdir: str) -> None:
    config = {"log.cleaner.backoff.ms": "100"}
    if io_limit:
        config["log.cleaner.io.max.bytes.per.second"] = str(io_limit)
    broker = BrokerProcess(Path(workdir) / "broker", config=config).start()
    rates: dict[str, list[float]] = {"no clean": [], "during a clean": []}
    outlasted, overlaps = 0, []
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        backlogs = [f"kv-{r}" for r in range(rounds)]
        for topic in ["load", *backlogs]:
            admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(64 << 20)})])[topic].result(30)
        keys = [b"k%09d" % i for i in range(backlog // 10)]
        print(f"writing {rounds} backlogs of {backlog:,} records (10 % distinct keys) …", flush=True)
        for topic in backlogs:
            _produce_keyed(broker.address, topic, backlog, keys)
        value = b"x" * 100
        confluent_produce(broker.address, "load", records, value, "1", None, "warm-up")  # the first run is slower
        for topic in backlogs:
            os.sync()
            result = confluent_produce(broker.address, "load", records, value, "1", None, "no clean")
            rates["no clean"].append(result.messages / result.seconds)
            resource = ConfigResource("topic", topic, incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            os.sync()
            admin.incremental_alter_configs([resource])[resource].result(30)
            # The clean starts within log.cleaner.backoff.ms (100 ms here): the producer starts with it,
            # so the run overlaps the key map's pass as well as the copy.
            started = time.monotonic()
            result = confluent_produce(broker.address, "load", records, value, "1", None, "during a clean")
            ended = time.monotonic()
            rates["during a clean"].append(result.messages / result.seconds)
            done = f"{topic}-0: cleaned up to"
            outlasted += done not in broker.log()
            wait_until(lambda: done in broker.log(), 300)
            clean_end = time.monotonic()
            clean_seconds = float(re.search(rf"{re.escape(done)} offset \d+ in ([\d.]+) s", broker.log()).group(1))
            overlap = min(ended, clean_end) - max(started, clean_end - clean_seconds)
            overlaps.append(max(overlap, 0) / (ended - started))
    finally:
        broker.stop()
    print(f"{'producers':<16} {'median msgs/s':>14}   runs")
    for label, values in rates.items():
        print(f"{label:<16} {statistics.median(values):>14,.0f}   {', '.join(f'{v:,.0f}' for v in values)}")
    ratios = [during / before for during, before in zip(rates["during a clean"], rates["no clean"])]
    print(f"during / no clean: {statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)};"
          f" the clean outlasted {outlasted} of {rounds} runs; a bigger --backlog makes it outlast all; share of"
          f" each run with the clean running: {', '.join(f'{o:.0%}' for o in overlaps)})")


def wait_until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for a clean to finish")
        time.sleep(0.1)


def _produce_keyed(address: str, topic: str, count: int, keys: list[bytes]) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1"})
    value, rng = os.urandom(89), random.Random(7)
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, keys[rng.randrange(len(keys))], 0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per log (throughput)")
    # Runs of about two seconds: at one second (2 M messages) the same code read 0.54-0.87.
    parser.add_argument("--messages", type=int, default=4_000_000, help="messages per producer run")
    parser.add_argument("--backlog", type=int, default=8_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cleaner-io", type=float, help="log.cleaner.io.max.bytes.per.second (default: unlimited)")
    parser.add_argument("--only", choices=("throughput", "producers"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cleaner-") as workdir:
        if args.only in (None, "throughput"):
            throughput(args.records, workdir)
        if args.only in (None, "producers"):
            producers(args.messages, args.backlog, args.rounds, args.cleaner_io, workdir)


if __name__ == "__main__":
    main()
