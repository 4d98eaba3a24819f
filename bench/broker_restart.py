"""How long a broker holding many partitions takes to come back after a stop, clean or SIGKILL.

    .venv/bin/python bench/broker_restart.py [--partitions 2000] [--with-data 0.1] [--records 40]
                                             [--stop clean,kill] [--repeat 3] [--dirty] [--override KEY=VALUE ...]

A real broker (its own process) gets a topic of --partitions partitions; an idempotent producer
writes --records records into every partition of a --with-data share (several segments each, and
producer state). Then, --repeat times per --stop kind, the broker is stopped (SIGTERM: a clean
shutdown; or SIGKILL: the next start recovers) and started again on the same data. Prints, from the
new process's start (--dirty: after a kill, on a fresh copy of the data directory, so that every
page of it waits to be written back, as after a crash under heavy writes, and the recovery's fsyncs
write them): the first Metadata answered, and every partition serving (one ListOffsets of
them all answered with no error and each log end offset as written); and the time the broker's log
gives for opening its logs (its line `opened N logs in DIR in S s`, where the build writes one).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from logcore.protocol.codec import ApiKey, ErrorCode  # noqa: E402
from logcore.protocol.client import NEED_DATA, ClientConnection  # noqa: E402
from testkit.brokerproc import BrokerProcess  # noqa: E402

TOPIC = "wide"
TIMEOUT_S = 600.0
SEGMENT_BYTES = 4096  # so a partition with data has several segments, each with its indexes and snapshot
VALUE = b"v" * 200


def fill(broker: BrokerProcess, partitions: int, with_data: float, records: int) -> dict[int, int]:
    """The topic, and its log end offset per partition as written."""
    settings = {"bootstrap.servers": broker.address, "log_level": 0}
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(TOPIC, partitions, config={"segment.bytes": str(SEGMENT_BYTES)})],
                        operation_timeout=TIMEOUT_S)[TOPIC].result(TIMEOUT_S)
    every = max(round(1 / with_data), 1) if with_data > 0 else partitions + 1
    written = {p: records if p % every == 0 else 0 for p in range(partitions)}
    producer = Producer({**settings, "enable.idempotence": True, "linger.ms": 5, "batch.num.messages": 5})
    for p, count in written.items():
        for _ in range(count):
            producer.produce(TOPIC, VALUE, partition=p)
        producer.poll(0)
    if producer.flush(TIMEOUT_S):
        raise RuntimeError("the producer did not deliver everything")
    return written


def call(sock: socket.socket, conn: ClientConnection, api_key: ApiKey, version: int, data: dict):
    sock.sendall(conn.send_data(api_key, version, data))
    while (event := conn.next_event()) is NEED_DATA:
        conn.receive_data(sock.recv(1 << 16))
    if event is None:
        raise RuntimeError("the broker closed the connection")
    return event.body


def connect(port: int, deadline: float) -> socket.socket:
    """The first connection the restarting broker accepts (it listens once it serves)."""
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def timed_start(broker: BrokerProcess, written: dict[int, int]) -> tuple[float, float]:
    """Seconds from the process's start to the first Metadata answered, and to every partition serving."""
    args = [sys.executable, "-m", "binlake.cli", "broker", "--data-dir", str(broker.data_dir), "--listen",
            broker.address] + [a for key, value in broker.config.items() for a in ("--override", f"{key}={value}")]
    started = time.monotonic()
    broker.proc = subprocess.Popen(args, stdout=open(broker.log_path, "ab"), stderr=subprocess.STDOUT)
    sock, conn = connect(broker.port, started + TIMEOUT_S), ClientConnection("bench-restart")
    with sock:
        meta = call(sock, conn, ApiKey.METADATA, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
        first_metadata = time.monotonic() - started
        if meta.topics[0].error_code != ErrorCode.none:
            raise RuntimeError(f"Metadata: {meta.topics[0].error_code!r}")
        answer = call(sock, conn, ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1} for p in written]}]})
        serving = time.monotonic() - started
    ends = {p.partition_index: (p.error_code, p.offset) for p in answer.topics[0].partitions}
    wrong = {p: ends.get(p) for p, count in written.items() if ends.get(p) != (ErrorCode.none, count)}
    if wrong:
        raise RuntimeError(f"{len(wrong)} partitions not serving as written, e.g. {list(wrong.items())[:3]}")
    return first_metadata, serving


def logs_opened_s(broker: BrokerProcess) -> str:
    """The last start's time to open its logs, from the broker's log."""
    found = re.findall(r"opened \d+ logs in \S+ in ([\d.]+) s", broker.log())
    return f"{float(found[-1]):.2f} s" if found else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--with-data", type=float, default=0.1, help="share of the partitions written to")
    parser.add_argument("--records", type=int, default=40, help="records per partition written to")
    parser.add_argument("--stop", default="clean,kill", help="clean (SIGTERM), kill (SIGKILL), or both")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dirty", action="store_true", help="after a kill, restart on a fresh copy of the data")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker config")
    args = parser.parse_args()
    config = dict(item.split("=", 1) for item in args.override)
    with tempfile.TemporaryDirectory(prefix="bench-broker-restart-") as directory:
        broker = BrokerProcess(Path(directory) / "data", config=config).start()
        try:
            written = fill(broker, args.partitions, args.with_data, args.records)
            print(f"{'partitions':>10} {'with data':>9} {'stop':>5} {'first Metadata':>14} {'all serving':>11} "
                  f"{'logs opened':>11}")
            for kind in args.stop.split(","):
                for _ in range(args.repeat):
                    broker.stop(TIMEOUT_S) if kind == "clean" else broker.kill()
                    if args.dirty and kind == "kill":
                        copy = broker.data_dir.with_name(f"{broker.data_dir.name}-copy")
                        shutil.copytree(broker.data_dir, copy)
                        shutil.rmtree(broker.data_dir)
                        copy.rename(broker.data_dir)
                    first_metadata, serving = timed_start(broker, written)
                    print(f"{args.partitions:>10,} {sum(1 for c in written.values() if c):>9,} {kind:>5} "
                          f"{first_metadata:>12.2f} s {serving:>9.2f} s {logs_opened_s(broker):>11}", flush=True)
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
