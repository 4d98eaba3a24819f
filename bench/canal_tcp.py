"""Rows/s through Canal's TCP protocol to Canal's Java client, beside the same entries read from the log by a
Kafka consumer (issue 36's target: 50k rows/s on this 2-core machine; Canal publishes 100k-200k on 24 cores).

    .venv/bin/python bench/canal_tcp.py [--rows 200000] [--rows-per-insert 500] [--batch 1000] [--rounds 1]

Starts a throwaway MariaDB (sandbox.sql) and one `binlake broker`, writes a Canal conf directory in tcp mode
(one destination over bench.t), starts `binlake canal run`, inserts --rows rows (--rows-per-insert per
statement and transaction) and waits until the destination has written them all to its entry log (the capture
rate is printed too). Then, with nothing else running: Canal's Java client (bench/canal/CanalBench.java,
canal.client 1.1.8 from `make canal-java-client`) drains the destination over the TCP protocol, getWithoutAck
--batch / parse every RowChange / ack; and a confluent-kafka consumer reads the same entry log, parsing every
Entry and RowChange (Python protobuf, upb). Prints rows/s of each and the load average. With --rounds N, the
two drains are repeated N times, alternately (`binlake canal run` restarted and the client's acks deleted
between rounds), and the medians printed: on a shared machine one round's figures swing 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_pipeline import committed_position  # noqa: E402
from produce_consume import BrokerUnderTest  # noqa: E402

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from cdc.formats.proto import EntryProtocol_pb2 as pb  # noqa: E402
from sandbox.process import free_port  # noqa: E402
from sandbox.sql import start_server  # noqa: E402
from testkit.memory import descendants  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / ".cache" / "canal-client-jars"


def write_conf(where: Path, broker: str, server, port: int) -> Path:
    conf = where / "conf"
    (conf / "bench").mkdir(parents=True)
    (conf / "canal.properties").write_text(
        f"canal.serverMode = tcp\ncanal.port = {port}\ncanal.destinations = bench\n"
        f"kafka.bootstrap.servers = {broker}\ncanal.metrics.pull.port =\n")
    (conf / "bench" / "instance.properties").write_text(
        f"canal.instance.master.address = 127.0.0.1:{server.port}\ncanal.instance.dbUsername = {server.user}\n"
        f"canal.instance.dbPassword = {server.password}\ncanal.instance.mysql.slaveId = 5499\n"
        "canal.instance.filter.regex = bench\\\\..*\n")
    return conf


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants so far."""
    total = 0.0
    for p in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
    return result


def kafka_consumer_rate(address: str, topic: str, rows: int) -> tuple[int, float]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "bench-entries", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, start = 0, None
    entry, change = pb.Entry(), pb.RowChange()
    while seen < rows:
        for message in consumer.consume(1000, timeout=1.0):
            if message.error():
                raise SystemExit(str(message.error()))
            start = start or time.perf_counter()
            entry.ParseFromString(message.value())
            if entry.entryType == pb.ROWDATA:
                change.ParseFromString(entry.storeValue)
                seen += len(change.rowDatas)
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen, elapsed


def start_canal(tmp: Path, conf: Path) -> subprocess.Popen:
    log = tmp / "canal.log"
    offset = log.stat().st_size if log.exists() else 0
    canal = subprocess.Popen([sys.executable, "-m", "binlake.cli", "canal", "run", str(conf)],
                             stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)
    wait_for(lambda: b"bench-0 started" in log.read_bytes()[offset:], 300, "the destination to start")
    return canal


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(60)


def tcp_rate(canal: subprocess.Popen, broker, classes: Path, port: int, rows: int, batch: int):
    """(rows, seconds, CPU seconds of the server, the broker and the client) of one drain by Canal's Java client."""
    before = cpu_seconds(canal.pid), cpu_seconds(broker.proc.pid), children_cpu()
    out = subprocess.run(["java", "-cp", f"{classes}:{JARS}/*", "CanalBench", "127.0.0.1", str(port), "bench",
                          str(rows), str(batch)], check=True, capture_output=True, text=True).stdout.split()
    cpu = [after - b for after, b in zip((cpu_seconds(canal.pid), cpu_seconds(broker.proc.pid), children_cpu()),
                                         before)]
    return int(out[-2]), float(out[-1]), cpu


def kafka_rate(broker, rows: int):
    """(rows, seconds, CPU seconds of the broker and the client) of one drain by a confluent-kafka consumer."""
    before = cpu_seconds(broker.proc.pid), time.process_time()
    seen, seconds = kafka_consumer_rate(broker.address, "bench.canal-entries", rows)
    return seen, seconds, [after - b for after, b in zip((cpu_seconds(broker.proc.pid), time.process_time()), before)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rows-per-insert", type=int, default=500)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1, help="drains of each path, alternately")
    args = parser.parse_args()
    if not (JARS / "canal.client-1.1.8.jar").exists():
        raise SystemExit("Canal's Java client is missing: run `make canal-java-client`")
    with tempfile.TemporaryDirectory(prefix="canal-bench-") as tmp:
        tmp = Path(tmp)
        classes = tmp / "classes"
        subprocess.run(["javac", "-cp", f"{JARS}/*", "-d", str(classes), str(ROOT / "bench/canal/CanalBench.java")],
                       check=True)
        (tmp / "sql").mkdir()
        server = start_server("mariadb", tmp / "sql")
        (tmp / "broker").mkdir()
        broker = BrokerUnderTest(str(tmp / "broker" / "data"), [])
        port = free_port()
        conf = write_conf(tmp, broker.address, server, port)
        canal = None
        try:
            server.sql("CREATE DATABASE bench",
                       "CREATE TABLE bench.t (id INT PRIMARY KEY, k INT NOT NULL, c VARCHAR(60), pad VARCHAR(60))")
            canal = start_canal(tmp, conf)
            wait_for(lambda: asyncio.run(committed_position(broker.address, "bench")), 120, "its start position")
            started = time.perf_counter()
            step = args.rows_per_insert
            for first in range(0, args.rows, step):
                server.sql("INSERT INTO bench.t VALUES " + ", ".join(
                    f"({i}, {i % 1000}, 'c{i:058d}', 'p{i:058d}')" for i in range(first, min(first + step, args.rows))))
            end = server.binlog_end()
            wait_for(lambda: (asyncio.run(committed_position(broker.address, "bench")) or ("", 0)) >= end, 600,
                     "the destination to capture the rows")
            capture = time.perf_counter() - started
            print(f"inserts + capture (MariaDB -> log):    {args.rows / capture:>10,.0f} rows/s ({args.rows:,} rows; "
                  "bound by the inserts)")
            rounds = []
            for n in range(args.rounds):
                if n:                                   # the client starts again from the log's start
                    stop(canal)
                    subprocess.run([sys.executable, "-m", "binlake.cli", "groups", "delete", "--bootstrap-server",
                                    broker.address, "--group", "binlake-canal-bench-1001"], check=True, cwd=ROOT,
                                   capture_output=True)
                    canal = start_canal(tmp, conf)
                rounds.append((tcp_rate(canal, broker, classes, port, args.rows, args.batch),
                               kafka_rate(broker, args.rows), os.getloadavg()[0]))
                report(*rounds[-1])
        except BaseException:
            print((tmp / "canal.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            if canal is not None:
                stop(canal)
            stop(broker.proc)
            server.stop()
    if len(rounds) > 1:
        tcp = statistics.median(rows / seconds for (rows, seconds, _), _, _ in rounds)
        kafka = statistics.median(rows / seconds for _, (rows, seconds, _), _ in rounds)
        print(f"medians of {len(rounds)} rounds: Canal TCP {tcp:,.0f} rows/s, Kafka consumer {kafka:,.0f} rows/s, "
              f"TCP / Kafka consumer {tcp / kafka:.2f}")


def report(tcp, kafka, load: float) -> None:
    (tcp_rows, tcp_seconds, tcp_cpu), (kafka_rows, kafka_seconds, kafka_cpu) = tcp, kafka
    tcp_total, kafka_total = sum(tcp_cpu), sum(kafka_cpu)
    print(f"Canal TCP -> Java canal.client:        {tcp_rows / tcp_seconds:>10,.0f} rows/s wall, "
          f"{tcp_rows / tcp_total:>10,.0f} rows per CPU s (server {tcp_cpu[0]:.2f} + broker {tcp_cpu[1]:.2f} "
          f"+ client {tcp_cpu[2]:.2f} s)")
    print(f"entry log -> confluent-kafka consumer: {kafka_rows / kafka_seconds:>10,.0f} rows/s wall, "
          f"{kafka_rows / kafka_total:>10,.0f} rows per CPU s (broker {kafka_cpu[0]:.2f} + client {kafka_cpu[1]:.2f} s)")
    print(f"TCP / Kafka consumer: {tcp_rows / tcp_seconds / (kafka_rows / kafka_seconds):.2f} wall, "
          f"{kafka_total / tcp_total:.2f} per CPU s; load average {load:.1f}", flush=True)


if __name__ == "__main__":
    main()
