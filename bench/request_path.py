"""The broker's own cost per request, in process: no sockets, no client competing for the CPU.

Frames go through the same code the server runs (ServerConnection parse → handler → response
encoding); only the socket read/write and sendfile are left out. Produce requests carry one batch
of --records records as a client builds it; fetch requests read it back --fetch-bytes at a time.

    .venv/bin/python bench/request_path.py [--records 10000] [--size 100] [--requests 200]
                                           [--profile]   # cProfile the whole run, top functions
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from logcore.api import HANDLERS, RequestContext
from logcore.broker import Broker
from logcore.protocol.client import ClientConnection
from logcore.protocol.codec import ApiKey, FileRegion, request_class
from logcore.protocol.connection import ServerConnection
from logcore.storage.records import encode_batch

TOPIC = "bench"


def nested(cls: type, name: str) -> type:
    return vars(sys.modules[cls.__module__])[name]


PRODUCE_VERSION = 9  # what librdkafka 2.x sends


def produce_frame(client: ClientConnection, batch: bytes, topic: str = TOPIC) -> bytes:
    cls = request_class(ApiKey.PRODUCE, PRODUCE_VERSION)
    partition = nested(cls, "PartitionProduceData")(index=0, records=batch)
    data = nested(cls, "TopicProduceData")(name=topic, partition_data=(partition,))
    return client.send(cls(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(data,)))


def fetch_frame(client: ClientConnection, offset: int, max_bytes: int, version: int = 12) -> bytes:
    cls = request_class(ApiKey.FETCH, version)
    partition = nested(cls, "FetchPartition")(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                              last_fetched_epoch=-1, log_start_offset=-1,
                                              partition_max_bytes=max_bytes)
    topic = nested(cls, "FetchTopic")(topic=TOPIC, partitions=(partition,))
    return client.send(cls(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                           max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                           forgotten_topics_data=(), rack_id=""))


def failed(data) -> bool:
    if isinstance(data, dict):
        return bool(data.get("error_code", 0)) or any(failed(v) for v in data.values())
    if isinstance(data, list):
        return any(failed(v) for v in data)
    return False


class Phases:
    """Seconds spent in each step, summed over the requests."""

    def __init__(self) -> None:
        self.parse = self.handle = self.encode = 0.0
        self.count = self.records = 0

    def report(self, name: str) -> str:
        per = lambda s: 1e6 * s / self.count  # noqa: E731
        total = self.parse + self.handle + self.encode
        return (f"{name:<10} {self.count:>6} req  parse {per(self.parse):8.1f} µs  handle {per(self.handle):8.1f} µs  "
                f"encode {per(self.encode):7.1f} µs  total {per(total):8.1f} µs/req  "
                f"= {self.records / total:>12,.0f} records/s of broker CPU")


async def roundtrip(broker: Broker, conn: ServerConnection, frame: bytes, phases: Phases) -> list:
    clock = time.thread_time  # CPU time: teammates' processes on the same cores do not count
    t0 = clock()
    conn.receive_data(frame)
    request = conn.next_event()
    t1 = clock()
    ctx = RequestContext(broker.services, request.api_version, request.client_id, "127.0.0.1")
    data = await HANDLERS[request.api_key](ctx, request.body)
    t2 = clock()
    if failed(data):
        raise SystemExit(f"request failed: {data!r:.500}")
    chunks = conn.send(request, data)
    t3 = clock()
    phases.parse += t1 - t0
    phases.handle += t2 - t1
    phases.encode += t3 - t2
    phases.count += 1
    return chunks


async def run(args) -> list[str]:
    tmp = tempfile.mkdtemp(prefix="binlake-reqpath-")
    broker = Broker(os.path.join(tmp, "data"), port=0)
    lines = []
    try:
        await broker.start()
        await broker.topic_admin.create(TOPIC, 1)
        conn = ServerConnection(broker.server.supported, 1 << 30)
        value = os.urandom(args.size)
        batch = encode_batch([(None, value)] * args.records, int(time.time() * 1000))
        client = ClientConnection("rdkafka")  # (the responses are not read back: the frames only)
        frames = [produce_frame(client, batch) for _ in range(args.requests + 1)]
        await roundtrip(broker, conn, frames.pop(), Phases())  # warm-up: caches, first segment writes
        produce = Phases()
        for frame in frames:
            await roundtrip(broker, conn, frame, produce)
            produce.records += args.records
        lines.append(produce.report("produce"))

        fetch = Phases()
        offset, end = args.records, args.records * (args.requests + 1)
        while offset < end:
            chunks = await roundtrip(broker, conn, fetch_frame(client, offset, args.fetch_bytes), fetch)
            got = args.records * max(1, sum(c.length for c in chunks if isinstance(c, FileRegion)) // len(batch))
            fetch.records += got
            offset += got
        lines.append(fetch.report("fetch"))

        metadata_cls = request_class(ApiKey.METADATA, 12)
        topic = nested(metadata_cls, "MetadataRequestTopic")(topic_id=uuid.UUID(int=0), name=TOPIC)
        metadata_frame = client.send(metadata_cls(topics=(topic,), allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))
        await roundtrip(broker, conn, metadata_frame, Phases())
        metadata = Phases()
        for _ in range(args.requests):
            await roundtrip(broker, conn, metadata_frame, metadata)
        lines.append(metadata.report("metadata"))
    finally:
        await broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, help="records per produced batch (default: a batch of just under "
                                                    "1 MB, as librdkafka builds with batch.size=1000000)")
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--fetch-bytes", type=int, default=1024 * 1024,
                        help="max bytes per fetch (librdkafka's max.partition.fetch.bytes default)")
    parser.add_argument("--profile", action="store_true", help="cProfile the run and print the top functions")
    args = parser.parse_args()
    args.records = args.records or 1_000_000 // (args.size + 10)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    lines = asyncio.run(run(args))
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
