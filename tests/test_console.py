"""`binlake produce` / `binlake consume` as users run them: subprocesses against a real broker."""

import subprocess
import time

from brokerproc import BINLAKE, NO_REBALANCE_DELAY, ROOT, free_port


def binlake(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*BINLAKE, *args], input=stdin.encode() if stdin is not None else None,
                          capture_output=True, timeout=timeout, cwd=ROOT)


def produce(address: str, topic: str, lines: list[str], *options: str) -> subprocess.CompletedProcess:
    done = binlake("produce", "--bootstrap-server", address, "--topic", topic, *options,
                   stdin="".join(line + "\n" for line in lines))
    assert done.returncode == 0, done.stderr.decode()
    return done


def consume(address: str, topic: str, *options: str) -> tuple[list[str], str]:
    if "--timeout-ms" not in options:
        options = ("--timeout-ms", "10000", *options)  # a safety net: tests give --max-messages
    done = binlake("consume", "--bootstrap-server", address, "--topic", topic, *options)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines(), done.stderr.decode()


def test_keys_partition_offset_and_timestamp_round_trip(broker):
    before = int(time.time() * 1000)
    done = produce(broker.address, "console", [f"key{i}:value {i}" for i in range(5)],
                   "--property", "parse.key=true", "--property", "key.separator=:", "--partition", "0")
    assert "Sent 5 message(s)" in done.stderr.decode()
    lines, stderr = consume(broker.address, "console", "--from-beginning", "--max-messages", "5",
                            "--property", "print.key=true", "--property", "print.partition=true",
                            "--property", "print.offset=true", "--property", "print.timestamp=true")
    assert "Processed a total of 5 messages" in stderr
    after = int(time.time() * 1000)
    for i, line in enumerate(lines):
        timestamp, partition, offset, key, value = line.split("\t")
        kind, _, millis = timestamp.partition(":")
        assert (kind, partition, offset, key, value) == ("CreateTime", "Partition:0", f"Offset:{i}", f"key{i}",
                                                         f"value {i}")
        assert before <= int(millis) <= after


def test_lines_without_keys_and_a_custom_separator(broker):
    produce(broker.address, "plain", ["a", "", "c d"])
    lines, _ = consume(broker.address, "plain", "--from-beginning", "--max-messages", "3",
                       "--property", "print.key=true", "--property", "key.separator=|")
    assert lines == ["null|a", "null|", "null|c d"]


def test_partition_and_offset(broker):
    produce(broker.address, "seek", [str(i) for i in range(10)], "--partition", "0")
    lines, _ = consume(broker.address, "seek", "--partition", "0", "--offset", "7", "--timeout-ms", "2000")
    assert lines == ["7", "8", "9"]
    lines, _ = consume(broker.address, "seek", "--partition", "0", "--offset", "earliest", "--max-messages", "2")
    assert lines == ["0", "1"]
    lines, stderr = consume(broker.address, "seek", "--partition", "0", "--offset", "latest", "--timeout-ms", "1500")
    assert lines == [] and "Processed a total of 0 messages" in stderr


def test_without_from_beginning_only_new_messages_arrive(broker):
    produce(broker.address, "fresh", ["old"])
    consumer = subprocess.Popen([*BINLAKE, "consume", "--bootstrap-server", broker.address, "--topic", "fresh",
                                 "--max-messages", "1", "--timeout-ms", "20000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    time.sleep(4)  # let it start and position itself at the end
    produce(broker.address, "fresh", ["new"])
    out, err = consumer.communicate(timeout=30)
    assert consumer.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["new"]


def test_compression_and_acks(broker):
    for codec, acks in [("gzip", "1"), ("snappy", "all"), ("lz4", "-1"), ("zstd", "1")]:
        produce(broker.address, f"c-{codec}", [f"{codec} {i}" * 20 for i in range(50)],
                "--compression", codec, "--acks", acks)
        lines, _ = consume(broker.address, f"c-{codec}", "--from-beginning", "--max-messages", "50")
        assert lines == [f"{codec} {i}" * 20 for i in range(50)]


def test_acks_zero_still_delivers(broker):
    produce(broker.address, "fire", ["x", "y"], "--acks", "0")
    lines, _ = consume(broker.address, "fire", "--from-beginning", "--max-messages", "2")
    assert lines == ["x", "y"]


def test_group_resumes_where_it_committed(broker_factory):
    broker = broker_factory(config=NO_REBALANCE_DELAY)  # (each run's group: one member)
    produce(broker.address, "grouped", [f"m{i}" for i in range(6)])
    first, _ = consume(broker.address, "grouped", "--group", "console-g", "--from-beginning", "--max-messages", "4")
    rest, _ = consume(broker.address, "grouped", "--group", "console-g", "--from-beginning", "--max-messages", "2")
    assert (first, rest) == (["m0", "m1", "m2", "m3"], ["m4", "m5"])


def test_line_without_separator_is_refused_with_its_number(broker):
    done = binlake("produce", "--bootstrap-server", broker.address, "--topic", "strict",
                   "--property", "parse.key=true", "--property", "key.separator=:", stdin="k:v\nno separator here\n")
    assert done.returncode == 1
    assert "line 2" in done.stderr.decode() and "ignore.error" in done.stderr.decode()
    done = binlake("produce", "--bootstrap-server", broker.address, "--topic", "strict", "--property",
                   "parse.key=true", "--property", "key.separator=:", "--property", "ignore.error=true",
                   stdin="no separator\n")
    assert done.returncode == 0


def test_usage_errors(broker):
    for args, needle in [
        (["--offset", "3"], "--offset needs --partition"),
        (["--partition", "0", "--offset", "3", "--from-beginning"], "exclude each other"),
        (["--partition", "0", "--offset", "soon"], "earliest, latest or a non-negative number"),
        (["--property", "print.colour=true"], "unknown property"),
    ]:
        done = binlake("consume", "--bootstrap-server", broker.address, "--topic", "t", *args)
        assert done.returncode == 2 and needle in done.stderr.decode(), (args, done.stderr.decode())


def test_unreachable_broker_fails_with_a_message():
    address = f"127.0.0.1:{free_port()}"
    for command in ("produce", "consume"):
        done = binlake(command, "--bootstrap-server", address, "--topic", "t", stdin="x\n")
        assert done.returncode == 1 and f"cannot connect to {address}" in done.stderr.decode(), done.stderr.decode()
