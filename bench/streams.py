"""Events per second through one faust worker (`binlake streams worker`), at-least-once and exactly-once.

    .venv/bin/python bench/streams.py [--events 200000] [--partitions 6] [--only map|table] [--profile [--top N]]

Two agents over change events (Debezium envelope, as the connector writes them, decoded by the
`debezium` codec into ChangeEvents):
  map:   reshape each change and send it to an output topic;
  table: the same, plus a changelog table update per event (a running count per key).
A backlog of --events is written to a broker first; one worker then runs each (agent, guarantee)
pair from the start of the backlog, and the figure is events/s from the worker's first output to
its last (output end offsets polled through ListOffsets; read_committed for exactly-once), both
guarantees side by side in the same run; a run with no new output for a minute (BENCH_STALL_S) is
reported stalled.
--profile records the exactly-once runs with py-spy and prints where the time goes (self and inclusive).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from testkit.brokerproc import ROOT, BrokerProcess

APP = r'''
import os
import faust

AGENT, GUARANTEE = os.environ["BENCH_AGENT"], os.environ["BENCH_GUARANTEE"]
app = faust.App(f"bench-{{AGENT}}-{{GUARANTEE}}", broker="kafka://{address}", processing_guarantee=GUARANTEE,
                store="memory://", topic_partitions={partitions}, consumer_auto_offset_reset="earliest",
                web_enabled=False, stream_buffer_maxsize=16384)
source = app.topic("bench-in", key_serializer="raw", value_serializer="debezium", partitions={partitions})
out = app.topic(f"bench-out-{{AGENT}}-{{GUARANTEE}}", key_serializer="raw", value_serializer="json")
counts = app.Table(f"counts-{{GUARANTEE}}", default=int, partitions={partitions})


@app.agent(source)
async def process(stream):
    async for event in stream.events():
        change = event.value
        if AGENT == "table":
            counts[change.after["id"]] += 1
        await out.send(key=event.key, value={{"id": change.after["id"], "op": change.op, "amount": change.after["amount"]}})
'''


def change(i: int, keys: int) -> bytes:
    return json.dumps({"before": None, "after": {"id": i % keys, "amount": f"{i % 997}.50", "status": "new"}, "op": "c",
                       "ts_ms": 1, "source": {"db": "shop", "table": "orders", "file": "binlog.000001", "pos": 4 + i,
                                              "row": 0, "snapshot": "false", "ts_ms": 1}}).encode()


def fill(address: str, events: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    for future in admin.create_topics([NewTopic("bench-in", partitions, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(events):
        while True:
            try:
                producer.produce("bench-in", change(i, 10_000), key=b"%d" % (i % 10_000))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def output_end(address: str, topic: str, isolation: str) -> int:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "bench-watch", "isolation.level": isolation})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in metadata.partitions)
    finally:
        consumer.close()


STALL_S = int(os.environ.get("BENCH_STALL_S", 60))  # no new output for this long: the run is reported as stalled


def run(address: str, workdir: Path, agent: str, guarantee: str, events: int, profile: bool) -> str:
    """The rate as text, or where the worker stalled."""
    topic, isolation = f"bench-out-{agent}-{guarantee}", "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{workdir}", "BENCH_AGENT": agent, "BENCH_GUARANTEE": guarantee}
    command = [sys.executable, "-m", "binlake.cli", "streams", "worker", "bench_app", "-l", "warn", "--without-web"]
    if profile:
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "-o", str(workdir / f"{agent}-{guarantee}.txt"),
                   "-f", "raw", "-r", "50", "--", *command]
    with open(workdir / f"{agent}-{guarantee}.log", "wb") as log:
        worker = subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        first, last = None, (time.monotonic(), 0)
        while (done := output_end(address, topic, isolation)) < events:
            assert worker.poll() is None, f"the worker exited: {(workdir / f'{agent}-{guarantee}.log').read_text()[-2000:]}"
            if done > last[1]:
                last = (time.monotonic(), done)
            elif time.monotonic() - last[0] > STALL_S:
                return f"stalled at {done:,}"
            if done and first is None:
                first = (time.monotonic(), done)
            time.sleep(0.2)
        start, before = first or (time.monotonic(), 0)
        return f"{(events - before) / max(time.monotonic() - start, 1e-6):,.0f}/s"
    finally:
        worker.send_signal(2)  # SIGINT: py-spy writes its profile, faust stops
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()


def hot_spots(path: Path, top: int = 12) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Self and inclusive time per function from py-spy's raw (collapsed stacks) output, as shares
    of all samples: the top `top` of each."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + int(count)
        for frame in set(frames[1:]):  # (the first frame is the thread)
            under[frame] = under.get(frame, 0) + int(count)
        samples += int(count)

    def ranked(totals: dict[str, int]) -> list[tuple[str, float]]:
        return [(name, n / samples) for name, n in sorted(totals.items(), key=lambda kv: -kv[1])[:top]]
    return ranked(own), ranked(under)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--only", choices=["map", "table"])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=12, help="functions listed per profile table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="binlake-bench-streams-") as tmp:
        workdir = Path(tmp)
        broker = BrokerProcess(workdir / "broker", config={"transaction.state.log.num.partitions": "5",
                                                           "offsets.topic.num.partitions": "5",
                                                           "group.initial.rebalance.delay.ms": "0"}).start()
        try:
            (workdir / "bench_app.py").write_text(APP.format(address=broker.address, partitions=args.partitions))
            fill(broker.address, args.events, args.partitions)
            print(f"{args.events:,} change events in {args.partitions} partitions, one worker")
            print(f"{'agent':<8}{'at-least-once':>18}{'exactly-once':>18}")
            for agent in [args.only] if args.only else ["map", "table"]:
                alo = run(broker.address, workdir, agent, "at_least_once", args.events, False)
                eos = run(broker.address, workdir, agent, "exactly_once", args.events, args.profile)
                print(f"{agent:<8}{alo:>18}{eos:>18}", flush=True)
                if args.profile:
                    own, under = hot_spots(workdir / f"{agent}-exactly_once.txt", top=args.top)
                    for title, ranked in ("self time", own), ("inclusive time", under):
                        print(f"  {title}:")
                        for name, share in ranked:
                            print(f"    {share:6.1%}  {name}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
