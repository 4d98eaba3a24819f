"""logcore beside Apache Kafka: the same workloads against both brokers, on this machine, in one run.

    .venv/bin/python bench/versus.py [--messages 1000000] [--rounds 2] [--only NAME ...] [--cluster]

Both brokers run at once, each on its own free port and directory: a `binlake broker` subprocess
and a single-node Apache Kafka 4.1 in KRaft mode with its built-in defaults (1 GiB heap; neither
fsyncs a write, both leave durability to the page cache and, in a cluster, to replication). Every
row runs --rounds times, alternating the two brokers, and keeps each broker's best run, so drift on
a shared machine hits both alike; the table prints logcore / Kafka ratios. Apache Kafka's jars come
from `make reference`.

Rows: confluent-kafka (librdkafka) produce acks=all and consume, 100-byte values; Kafka's own
ProducerPerformance and ConsumerPerformance (the Java client); produce latency p50/p99 at 10,000
messages/s with both clients; transactions of 1,000 messages (librdkafka: transactions v1), and the
Java producer's transactions of 100 ms (transactions v2, KIP-890, on both brokers: each finalizes
`transaction.version` 2); the time a group of three consumers takes to join. With each: the broker's CPU seconds per million messages; at the end, its RSS.

Rebalance rows (`--only rebalance`), in a table of their own: groups of 3 and of 30 confluent-kafka
consumers (threads of this process, bench/rebalance.py) on a topic of 60 partitions that a producer
writes 20 records/s to each, with `group.protocol=classic` (eager `range,roundrobin`, librdkafka's
default) and `group.protocol=consumer` (KIP-848, the broker's `uniform` assignor). Per run: the time
from the first member's subscribe() until every partition is owned by exactly one member with shares
at most one apart; then, once each member has had a record and 2 s more have passed, the time one
more member takes to join until the group has settled again, and the longest stretch in which a
member went without a record from the partitions it kept meanwhile (its fetching paused), beside the
same figure over the 2 s before the join. The join comes 2.5-17.5 s after the group formed, at a point
of the heartbeat cycles that the rounds spread and both brokers of a round share. Both brokers have
Kafka's defaults: 3 s initial rebalance delay (classic), 5 s KIP-848 heartbeat interval. Each figure
is its best of the rounds; ratios logcore / Kafka and consumer / classic.

--cluster: three logcore brokers on a ZooKeeper (testkit/clusterproc.py) beside a three-node Apache
Kafka in KRaft mode, each node a broker and a controller (testkit/kraft.py, 512 MiB heaps), on the
same machine: topics with three replicas, min.insync.replicas=2, unclean election off, acks=all.
Rows: both produce rows, both latency rows (acks=all), and the time from a partition leader's
SIGKILL to the first acknowledgement of a write produced after it. A dead broker is detected after
6 s on both (ZooKeeper's session; `broker.session.timeout.ms`). CPU and RSS are the three brokers'
together, with logcore's ZooKeeper.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from produce_consume import (Meter, Result, confluent_consume, confluent_latency, confluent_produce,  # noqa: E402
                             process_cpu_seconds)
from rebalance import Rebalance, form_and_join, join_phase  # noqa: E402
from txn_produce import produce as produce_in_transactions  # noqa: E402

from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.clusterproc import LocalCluster  # noqa: E402
from testkit.kraft import KraftCluster, loopback  # noqa: E402
from testkit.reference import run_tool, start_kafka  # noqa: E402

PERF_JVM = ["-Xmx512m"]  # the perf tools run with a full JIT, unlike the short admin tools
# The clusters: replicated as issue 34 asks, a dead broker noticed after 6 s on both.
LOGCORE_CLUSTER = {"default.replication.factor": "3", "min.insync.replicas": "2",
                   "unclean.leader.election.enable": "false", "zookeeper.session.timeout.ms": "6000"}
KAFKA_CLUSTER = {"broker.session.timeout.ms": "6000"}  # (testkit.kraft sets the replication settings)
FAILOVER_ROWS = ("leader SIGKILL → next ack",)
# The rebalance rows: a group of so many members, by each protocol, on a topic of REBALANCE_PARTITIONS.
REBALANCE_ROWS = {f"rebalance, {members} members, {protocol}": (members, protocol)
                  for members in (3, 30) for protocol in ("classic", "consumer")}
REBALANCE_PARTITIONS, REBALANCE_RATE = 60, 20  # (records/s to each partition, for the fetch gaps)
CLUSTER_ROWS = ("confluent produce acks=all", "java ProducerPerformance acks=all", "confluent latency @10,000/s",
                "java latency @10,000/s", *FAILOVER_ROWS)


@dataclass
class Broker:
    """The broker(s) under test, by their processes: what Meter and the table read from them.
    `servers` (BrokerProcess or ApacheKafka: each with `proc`, `kill()`, `start()`) are the brokers,
    by id; `helpers` (logcore's ZooKeeper) count in the CPU and memory too."""

    name: str
    address: str
    servers: list
    helpers: list = field(default_factory=list)
    replicas: int = 1
    controller: Callable[[], int] | None = None  # the id of the cluster's controller now

    def pids(self) -> list[int]:
        return [process.proc.pid for process in (*self.servers, *self.helpers)]

    def cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(pid) for pid in self.pids())

    def rss_mb(self) -> float:
        total = 0
        for pid in self.pids():
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return total / 1024


class Topics:
    """A fresh single-partition topic name per run, auto-created by the first client that asks."""

    def __init__(self) -> None:
        self.n = 0

    def new(self, row: str) -> str:
        self.n += 1
        return f"{re.sub(r'[^a-z0-9]+', '-', row.lower()).strip('-')}-{self.n}"


def create_topic(broker: Broker, topic: str, partitions: int, assignment: list[list[int]] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    if assignment:
        new = NewTopic(topic, partitions, replica_assignment=assignment)
    else:
        new = NewTopic(topic, partitions, broker.replicas)
    admin.create_topics([new])[topic].result(30)


def partition_state(broker: Broker, topic: str) -> tuple[int, list[int]]:
    """(leader, ISR) of partition 0 as the brokers answer now."""
    partition = AdminClient({"bootstrap.servers": broker.address}).list_topics(topic, timeout=10).topics[topic] \
        .partitions[0]
    return partition.leader, sorted(partition.isrs)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def leader_failover(broker: Broker, topic: str, rate: int = 1000) -> float:
    """Seconds from the SIGKILL of partition 0's leader (a broker that is not the controller) to the
    first acknowledgement of a write produced after it, with an idempotent acks=all producer at
    `rate` msg/s. The broker is started again afterwards, and back in the ISR before the next row."""
    everyone = list(range(len(broker.servers)))
    controller = broker.controller()
    victim = next(i for i in everyone if i != controller)
    create_topic(broker, topic, 1, assignment=[[victim, *(i for i in everyone if i != victim)]])
    wait_for(lambda: partition_state(broker, topic) == (victim, everyone), f"{broker.name}: {topic} led by {victim}")
    producer = Producer({"bootstrap.servers": broker.address, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1})
    acked_after: list[float] = []
    killed_at: float | None = None

    def delivered(err, _msg, sent: float) -> None:
        if err is None and killed_at is not None and sent > killed_at:
            acked_after.append(time.monotonic())

    started, sent = time.monotonic(), 0
    while not acked_after:
        now = time.monotonic()
        if killed_at is None and now - started > 3:  # (acks flowing steadily first)
            broker.servers[victim].kill()
            killed_at = time.monotonic()
        elif killed_at is not None and now - killed_at > 120:
            raise SystemExit(f"{broker.name}: no write acknowledged within 120 s of the leader's SIGKILL")
        while sent < (now - started) * rate:
            producer.produce(topic, b"x" * 100, on_delivery=lambda e, m, t=time.monotonic(): delivered(e, m, t))
            sent += 1
        producer.poll(0.001)
    seconds = acked_after[0] - killed_at
    producer.flush(60)
    broker.servers[victim].start()
    wait_for(lambda: partition_state(broker, topic)[1] == everyone, f"{broker.name}: broker {victim} back in the ISR")
    return seconds


def java_produce(broker: Broker, topic: str, count: int, size: int, rate: int = -1,
                 options: tuple[str, ...] = ()) -> Result:
    """Kafka's ProducerPerformance (acks=all; `options`: more of its own): its records/sec, and its
    own latency percentiles. The topic is created first, so its creation is not among the latencies."""
    create_topic(broker, topic, 1)
    with Meter(broker) as meter:
        done = run_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", str(count), "--record-size",
                        str(size), "--throughput", str(rate), *options, "--producer-props",
                        f"bootstrap.servers={broker.address}", "acks=all", timeout=600, jvm=PERF_JVM)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = re.search(r"([\d.]+) records/sec .* ([\d.]+) ms 50th, [\d.]+ ms 95th, ([\d.]+) ms 99th", summary)
    if done.returncode != 0 or not found:
        raise SystemExit(f"ProducerPerformance against {broker.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    seconds = count / float(found.group(1))  # the tool's own clock, without the JVM's start
    result = meter.result("", count, size, p50_ms=float(found.group(2)), p99_ms=float(found.group(3)))
    result.seconds = seconds
    return result


def java_consume(broker: Broker, topic: str, count: int, size: int) -> Result:
    """Kafka's ConsumerPerformance: its fetch rate (fetch.nMsg.sec, without the group's join)."""
    with Meter(broker) as meter:
        done = run_tool("kafka-consumer-perf-test", "--bootstrap-server", broker.address, "--topic", topic,
                        "--messages", str(count), timeout=600, jvm=PERF_JVM)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise SystemExit(f"ConsumerPerformance against {broker.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    fields = dict(zip((h.strip() for h in lines[-2].split(",")), (v.strip() for v in lines[-1].split(","))))
    result = meter.result("", int(fields["data.consumed.in.nMsg"]), size)
    result.seconds = result.messages / float(fields["fetch.nMsg.sec"])
    return result


def group_join(broker: Broker, topic: str, members: int = 3) -> float:
    """Seconds from `members` consumers subscribing to a topic of as many partitions until each holds
    one: Kafka's classic protocol, eager range assignment, the broker's initial rebalance delay included."""
    create_topic(broker, topic, members)
    consumers = [Consumer({"bootstrap.servers": broker.address, "group.id": topic}) for _ in range(members)]
    held: list[list] = [[] for _ in consumers]
    stop = threading.Event()

    def member(i: int) -> None:
        def on_assign(_consumer, partitions):
            held[i] = list(partitions)

        def on_revoke(_consumer, _partitions):
            held[i] = []

        consumers[i].subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            consumers[i].poll(0.01)

    started = time.perf_counter()
    threads = [threading.Thread(target=member, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    deadline = started + 120
    while not all(len(h) == 1 for h in held):
        if time.perf_counter() > deadline:
            raise SystemExit(f"the group did not settle on {broker.name} within 120 s")
        time.sleep(0.005)
    seconds = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    return seconds


def rebalance(members: int, protocol: str) -> Callable[[Broker, str], Rebalance]:
    """A rebalance row. Its runs come a round at a time, one broker after the other: both runs of a
    round join at the same point of the heartbeat cycle (bench/rebalance.py's `join_phase`)."""
    runs = itertools.count()

    def row(broker: Broker, topic: str) -> Rebalance:
        phase = join_phase(next(runs) // 2)
        create_topic(broker, topic, REBALANCE_PARTITIONS)
        return form_and_join(broker.address, topic, REBALANCE_PARTITIONS, members, protocol, REBALANCE_RATE, phase)
    return row


# -- the rows ------------------------------------------------------------------------------------------

def rows(messages: int, value: bytes, cluster: bool = False) -> dict:
    """Each row: a function of (broker, its topic for this run) → a Result (or seconds, for the group
    and the failover). `cluster`: the cluster's rows (CLUSTER_ROWS), the latency ones with acks=all."""
    size = len(value)
    latency = {"acks": "all"} if cluster else None

    def produce_then(read):
        """A consume row reads what a produce of its own wrote first (not timed)."""
        def row(broker, topic):
            confluent_produce(broker.address, topic, messages, value, "all", None, "fill")
            return read(broker, topic)
        return row

    every = {
        "confluent produce acks=all": lambda b, t: confluent_produce(b.address, t, messages, value, "all", b, ""),
        "confluent consume": produce_then(lambda b, t: confluent_consume(b.address, t, messages, size, b, "")),
        "java ProducerPerformance acks=all": lambda b, t: java_produce(b, t, messages, size),
        "java ConsumerPerformance": produce_then(lambda b, t: java_consume(b, t, messages, size)),
        "confluent latency @10,000/s": lambda b, t: confluent_latency(b.address, t, 10_000, 10, value, b, latency),
        "java latency @10,000/s": lambda b, t: java_produce(b, t, 100_000, size, rate=10_000),
        "transactions of 1,000": lambda b, t: produce_in_transactions(
            b.address, b, t, messages // 5, value, "", {"transactional.id": t}, per_txn=1000),
        "java transactions v2 of 100 ms": lambda b, t: java_produce(
            b, t, messages // 5, size, options=("--transactional-id", t, "--transaction-duration-ms", "100")),
        "group join, 3 members": lambda b, t: group_join(b, t),
        "leader SIGKILL → next ack": lambda b, t: leader_failover(b, t),
        **{row: rebalance(members, protocol) for row, (members, protocol) in REBALANCE_ROWS.items()},
    }
    return {row: every[row] for row in (CLUSTER_ROWS if cluster else every) if cluster or row not in FAILOVER_ROWS}


def better(a, b):
    """The better of two runs of a row: faster, or lower p99 for a latency row; each of a rebalance's
    figures on its own."""
    if a is None:
        return b
    if isinstance(a, float):
        return min(a, b)
    if isinstance(a, Rebalance):
        gaps = [g for g in (a.gap_s, b.gap_s) if g is not None]
        return Rebalance(min(a.form_s, b.form_s), min(a.join_s, b.join_s), min(gaps, default=None),
                         min(a.quiet_gap_s, b.quiet_gap_s))
    if a.p99_ms is not None and "latency" in a.name:
        return a if a.p99_ms <= b.p99_ms else b
    return a if a.seconds <= b.seconds else b


def report(best: dict, brokers: list[Broker], rss: dict) -> None:
    logcore, kafka = brokers
    print(f"\n{'':36} {'logcore':>22} {'Apache Kafka':>22} {'ratio':>7} {'CPU-s/M msgs':>16}")
    for row, runs in best.items():
        mine, theirs = runs[logcore.name], runs[kafka.name]
        if row in REBALANCE_ROWS:
            continue  # (their own table, below)
        if mine is None or theirs is None:
            print(f"{row:36} {'failed' if mine is None else 'ran':>22} {'failed' if theirs is None else 'ran':>22}")
            continue
        if isinstance(mine, float):
            print(f"{row:36} {mine:>20.2f} s {theirs:>20.2f} s {mine / theirs:>7.2f}  (lower is better)")
            continue
        if "latency" in row:
            print(f"{row:36} {f'p50 {mine.p50_ms:.1f} p99 {mine.p99_ms:.1f} ms':>22} "
                  f"{f'p50 {theirs.p50_ms:.1f} p99 {theirs.p99_ms:.1f} ms':>22} "
                  f"{mine.p99_ms / theirs.p99_ms:>7.2f}  (p99; lower is better)")
            continue
        rate = [r.messages / r.seconds for r in (mine, theirs)]
        cpu = [1e6 * r.broker_cpu / r.messages for r in (mine, theirs)]
        print(f"{row:36} {rate[0]:>16,.0f} msg/s {rate[1]:>16,.0f} msg/s {rate[0] / rate[1]:>7.2f} "
              f"{cpu[0]:>7.2f} vs {cpu[1]:>5.2f}")
    print(f"{'broker RSS at the end':36} {rss[logcore.name]:>19,.0f} MB {rss[kafka.name]:>19,.0f} MB "
          f"{rss[logcore.name] / rss[kafka.name]:>7.2f}")
    if any(row in REBALANCE_ROWS for row in best):
        report_rebalance(best, brokers)


def report_rebalance(best: dict, brokers: list[Broker]) -> None:
    """The rebalance rows: each figure by broker and protocol, with consumer / classic for each broker
    and logcore / Kafka for each protocol. '-' where a row was not run or failed."""
    figures = (("form, s", "form_s", 1), ("one more joins, s", "join_s", 1),
               ("kept partitions' gap, ms", "gap_s", 1000), ("gap while stable, ms", "quiet_gap_s", 1000))
    names = [b.name for b in brokers]
    print(f"\nrebalance: {REBALANCE_PARTITIONS} partitions, {REBALANCE_RATE} records/s to each; lower is better")
    print(f"{'':34}" + "".join(f"{name + ' classic':>16} {'consumer':>9} {'cons/cl':>8}" for name in names)
          + "".join(f" {'/'.join(names) + ' ' + p:>20}" for p in ("classic", "consumer")))

    def value(members: int, protocol: str, broker: str, attribute: str, scale: float) -> float | None:
        run = best.get(f"rebalance, {members} members, {protocol}", {}).get(broker)
        figure = None if run is None else getattr(run, attribute)
        return None if figure is None else figure * scale

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or not b else f"{a / b:.2f}"

    for members in sorted({n for row, (n, _) in REBALANCE_ROWS.items() if row in best}):
        for label, attribute, scale in figures:
            line = f"{f'{members} members: {label}':34}"
            for broker in names:
                classic, consumer = (value(members, p, broker, attribute, scale) for p in ("classic", "consumer"))
                line += "".join(f"{'-' if v is None else f'{v:.2f}' if scale == 1 else f'{v:.0f}':>{w}}"
                                for v, w in ((classic, 16), (consumer, 10)))
                line += f"{ratio(consumer, classic):>9}"
            for protocol in ("classic", "consumer"):
                line += f"{ratio(*(value(members, protocol, b, attribute, scale) for b in names)):>21}"
            print(line)


def single(work: Path, stack: contextlib.ExitStack) -> list[Broker]:
    """A `binlake broker` beside a single-node Apache Kafka."""
    process = BrokerProcess(work / "logcore").start()
    stack.callback(process.kill)
    # Kafka's built-in default, as logcore's (testkit.reference sets 0 for tests, as Kafka's sample
    # server.properties does): a new group waits 3 s for more members before its first generation.
    kafka = start_kafka(work / "kafka", config={"group.initial.rebalance.delay.ms": "3000"})
    stack.callback(kafka.stop)
    return [Broker("logcore", process.address, [process]), Broker("kafka", kafka.address, [kafka])]


def clusters(work: Path, stack: contextlib.ExitStack) -> list[Broker]:
    """Three logcore brokers on a ZooKeeper beside three Apache Kafka KRaft nodes."""
    logcore = LocalCluster(work / "logcore", 3, LOGCORE_CLUSTER)
    stack.callback(logcore.stop)
    logcore.start()
    kafka = KraftCluster(work / "kafka", loopback(3), KAFKA_CLUSTER)
    stack.callback(kafka.stop)
    kafka.start()

    def logcore_controller() -> int:
        admin = AdminClient({"bootstrap.servers": logcore.bootstrap})  # (alive until the answer comes)
        return admin.describe_cluster().result(10).controller.id
    return [Broker("logcore", logcore.bootstrap, logcore.brokers, [logcore.zookeeper], 3, logcore_controller),
            Broker("kafka", kafka.bootstrap, kafka.nodes, [], 3, kafka.controller)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="rows whose name contains one of these words")
    parser.add_argument("--cluster", action="store_true", help="three brokers a side, RF 3 (see above)")
    args = parser.parse_args()
    value, topics = b"x" * args.size, Topics()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (a `kill` stops the servers too: the stack unwinds)
    with tempfile.TemporaryDirectory() as work, contextlib.ExitStack() as stack:
        brokers = (clusters if args.cluster else single)(Path(work), stack)
        what = "three brokers a side, RF 3, min.insync.replicas=2" if args.cluster else "one broker a side"
        print(f"machine: {os.cpu_count()} cores, the brokers and the clients on it ({what}); {args.messages:,} "
              f"messages of {args.size} bytes; best of {args.rounds} alternating runs")
        best: dict = {}
        for row, run in rows(args.messages, value, args.cluster).items():
            if args.only and not any(word in row for word in args.only):
                continue
            best[row] = {b.name: None for b in brokers}
            for _ in range(args.rounds):
                for broker in brokers:
                    try:
                        result = run(broker, topics.new(row))
                    except SystemExit as failure:  # (a run that failed, a rate not held say: said, the rest go on)
                        print(f"  {row} on {broker.name}: failed: {failure}", flush=True)
                        continue
                    if isinstance(result, Result):
                        result.name = row
                    best[row][broker.name] = better(best[row][broker.name], result)
                    print(f"  {row} on {broker.name}: "
                          f"{result if isinstance(result, float) else result.row()}", flush=True)
        report(best, brokers, {b.name: b.rss_mb() for b in brokers})


if __name__ == "__main__":
    main()
