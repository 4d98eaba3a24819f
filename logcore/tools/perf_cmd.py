"""`binlake producer-perf-test` and `binlake consumer-perf-test`: Kafka's perf tools, with their
flags and output lines, on confluent-kafka (librdkafka). Against any broker."""

from __future__ import annotations

import time

import click
from confluent_kafka import Consumer, KafkaException, Producer

REPORT_EVERY_S = 5.0


class SeveralValues(click.Option):
    """An option followed by several values, as Kafka's `--producer-props k=v k2=v2`: it takes every
    argument after it up to the next one starting with `--`."""

    def add_to_parser(self, parser, ctx):
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name)
            if option is not None:
                option.process = self._greedy(option.process)

    @staticmethod
    def _greedy(process):
        def take_all(value, state):
            values = [value]
            while state.rargs and not state.rargs[0].startswith("--"):
                values.append(state.rargs.pop(0))
            for item in values:
                process(item, state)
        return take_all


def _props(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    props = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}")
        props[key] = value
    return props


class Stats:
    """Kafka's ProducerPerformance stats: a line every 5 s for the window, one at the end for all."""

    def __init__(self, record_size: int) -> None:
        self.record_size = record_size
        self.latencies: list[float] = []
        self.start = self.window_start = time.monotonic()
        self.window: list[float] = []

    def record(self, latency_ms: float) -> None:
        self.latencies.append(latency_ms)
        self.window.append(latency_ms)
        now = time.monotonic()
        if now - self.window_start >= REPORT_EVERY_S:
            click.echo(self._line(self.window, now - self.window_start, window=True))
            self.window, self.window_start = [], now

    def _line(self, latencies: list[float], seconds: float, window: bool) -> str:
        count = len(latencies)
        rate = count / seconds if seconds else 0.0
        avg = sum(latencies) / count if count else 0.0
        line = (f"{count} records sent, {rate:.1f} records/sec ({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
                f"{avg:.1f} ms avg latency, {max(latencies, default=0.0):.1f} ms max latency")
        return line + ("." if window else "")

    def final(self) -> str:
        ordered = sorted(self.latencies)

        def pct(p: float) -> int:
            return int(ordered[min(int(p * len(ordered)), len(ordered) - 1)]) if ordered else 0

        return (self._line(self.latencies, time.monotonic() - self.start, window=False)
                + f", {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, {pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th.")


@click.command("producer-perf-test")
@click.option("--topic", required=True)
@click.option("--num-records", type=click.IntRange(1), required=True)
@click.option("--record-size", type=click.IntRange(0), default=100, show_default=True)
@click.option("--throughput", type=int, required=True, help="records/s to aim at; -1: as fast as possible")
@click.option("--producer-props", cls=SeveralValues, multiple=True, callback=_props, metavar="K=V ...",
              help="librdkafka / Kafka producer settings, bootstrap.servers among them")
@click.option("--bootstrap-server", help="shortcut for --producer-props bootstrap.servers=…")
def producer_perf_test_command(topic: str, num_records: int, record_size: int, throughput: int,
                               producer_props: dict[str, str], bootstrap_server: str | None) -> None:
    """Measure produce throughput and latency (kafka-producer-perf-test)."""
    config = {**producer_props, **({"bootstrap.servers": bootstrap_server} if bootstrap_server else {})}
    if "bootstrap.servers" not in config:
        raise click.UsageError("give --bootstrap-server or --producer-props bootstrap.servers=HOST:PORT")
    producer = Producer(config)
    stats, value, failures = Stats(record_size), b"x" * record_size, []

    def delivered(err, _msg, sent: float) -> None:
        if err is not None:
            failures.append(err)
        else:
            stats.record((time.monotonic() - sent) * 1000)

    start = time.monotonic()
    for i in range(num_records):
        if throughput > 0:  # pace: never ahead of the asked rate
            ahead = start + i / throughput - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        sent = time.monotonic()
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush()
    click.echo(stats.final())
    if failures:
        raise click.ClickException(f"{len(failures)} records failed, the first with {failures[0].str()}")


@click.command("consumer-perf-test")
@click.option("--bootstrap-server", required=True)
@click.option("--topic", required=True)
@click.option("--messages", type=click.IntRange(1), required=True, help="how many to consume")
@click.option("--group", default="perf-consumer", show_default=True)
@click.option("--timeout", "timeout_ms", type=int, default=10000, show_default=True,
              help="give up after this long without a message (ms)")
@click.option("--consumer-props", cls=SeveralValues, multiple=True, callback=_props, metavar="K=V ...",
              help="more consumer settings")
def consumer_perf_test_command(bootstrap_server: str, topic: str, messages: int, group: str, timeout_ms: int,
                               consumer_props: dict[str, str]) -> None:
    """Measure consume throughput (kafka-consumer-perf-test), from the start of the topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap_server, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **consumer_props})
    joined, assigned = time.monotonic(), []
    consumer.subscribe([topic], on_assign=lambda c, partitions: assigned.append(time.monotonic()))
    count = size = 0
    last = start = time.monotonic()
    try:
        while count < messages:
            batch = consumer.consume(min(10000, messages - count), 0.5)
            now = time.monotonic()
            if not batch:
                if (now - last) * 1000 > timeout_ms:
                    click.echo(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                               f"({timeout_ms} ms) exceeded.", err=True)
                    break
                continue
            for message in batch:
                if message.error() is not None:
                    raise KafkaException(message.error())
                size += len(message.value() or b"") + len(message.key() or b"")
            count, last = count + len(batch), now
    finally:
        consumer.close()
    end = last
    rebalance_ms = (assigned[0] - joined) * 1000 if assigned else 0.0
    seconds = max(end - start, 1e-9)
    fetch_seconds = max(seconds - rebalance_ms / 1000, 1e-9)
    mb = size / 1024 / 1024
    click.echo("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
               "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    click.echo(f"{_stamp(start)}, {_stamp(end)}, {mb:.4f}, {mb / seconds:.4f}, {count}, {count / seconds:.4f}, "
               f"{rebalance_ms:.0f}, {fetch_seconds * 1000:.0f}, {mb / fetch_seconds:.4f}, {count / fetch_seconds:.4f}")


def _stamp(monotonic: float) -> str:
    wall = time.time() - (time.monotonic() - monotonic)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall)) + f":{int(wall * 1000) % 1000:03d}"
