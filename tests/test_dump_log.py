"""`binlake dump-log` on segments a real broker wrote from real clients' batches."""

import os
import re
import shutil
import struct
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokerproc import ROOT

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS = 1_700_000_000_000


def dump_log(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlake.cli", "dump-log", *args], capture_output=True,
                          text=True, cwd=ROOT, check=check, timeout=60)


def segment(broker, topic: str, suffix: str = ".log", nth: int = 0) -> str:
    d = broker.data_dir / f"{topic}-0"
    return str(d / sorted(n for n in os.listdir(d) if n.endswith(suffix))[nth])


def create_topic(address: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def batch_lines(out: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+): (\S+)", line)) for line in out.splitlines() if line.startswith("baseOffset:")]


def test_batches_and_records_of_every_codec(broker):
    for codec in CODECS:
        # The topic exists before the first record, and flush() sends at once while the long linger
        # keeps a slow loop from sending records alone: librdkafka leaves a batch uncompressed when
        # compressing would not shrink it, which a lone short record does not.
        create_topic(broker.address, f"dump-{codec}")
        producer = Producer({"bootstrap.servers": broker.address, "compression.type": codec, "linger.ms": 5000,
                             "enable.idempotence": codec == "zstd"})
        for i in range(30):
            producer.produce(f"dump-{codec}", key=f"k{i}".encode() if i % 3 else None, partition=0,
                             value=f"value-{i} ".encode() * 4 if i % 5 else b"\x00\xff\x10", timestamp=TS + i,
                             headers=[("trace", f"t{i}".encode()), ("bin", b"\x01\x02")])
        assert producer.flush(30) == 0
    broker.stop()

    for codec in CODECS:
        out = dump_log(segment(broker, f"dump-{codec}"), "--records").stdout
        lines = out.splitlines()
        assert lines[:2] == [f"Dumping {segment(broker, f'dump-{codec}')}", "Log starting offset: 0"]
        batches = batch_lines(out)
        assert batches and all(b["isvalid"] == "true" and b["magic"] == "2" for b in batches)
        assert all(b["compresscodec"] == codec for b in batches if int(b["count"]) > 1)
        assert any(b["compresscodec"] == codec for b in batches)
        assert [int(b["baseOffset"]) for b in batches][0] == 0 and batches[-1]["lastOffset"] == "29"
        assert sum(int(b["count"]) for b in batches) == 30
        position = 0
        for b in batches:
            assert int(b["position"]) == position
            position += int(b["size"])
        assert position == os.path.getsize(segment(broker, f"dump-{codec}"))
        records = [line for line in lines if line.startswith("| offset:")]
        assert records[7] == (f"| offset: 7 CreateTime: {TS + 7} keySize: 2 valueSize: 32 "
                              f"sequence: {7 if codec == 'zstd' else -1} headers: [trace=t7, bin=0x0102] "
                              f"key: k7 payload: value-7 value-7 value-7 value-7 ")
        assert records[0].endswith("headers: [trace=t0, bin=0x0102] key: null payload: 0x00ff10")
        assert len(records) == 30
        if codec == "zstd":
            assert int(batches[0]["producerId"]) >= 0 and batches[0]["baseSequence"] == "0"
        else:
            assert batches[0]["producerId"] == "-1"


def test_transaction_markers(broker):
    create_topic(broker.address, "txn-dump")
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "dumper"})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        producer.produce("txn-dump", value=b"in a transaction", partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    broker.stop()
    out = dump_log(segment(broker, "txn-dump"), "--print-data-log").stdout
    batches = batch_lines(out)
    assert [(b["isTransactional"], b["isControl"]) for b in batches] == [
        ("true", "false"), ("true", "true"), ("true", "false"), ("true", "true")]
    markers = re.findall(r"endTxnMarker: (\w+) coordinatorEpoch: (\d+)", out)
    assert [m[0] for m in markers] == ["COMMIT", "ABORT"]


def test_index_files_and_their_consistency_with_the_log(broker, tmp_path):
    create_topic(broker.address, "idx-dump", **{"index.interval.bytes": "200"})
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 0})
    for i in range(40):
        producer.produce("idx-dump", value=b"x" * 100, partition=0, timestamp=TS + i * 10)
        producer.flush(30)
    broker.stop()

    index = dump_log(segment(broker, "idx-dump", ".index")).stdout.splitlines()[1:]
    assert len(index) == os.path.getsize(segment(broker, "idx-dump", ".index")) // 8 >= 10
    assert all(re.fullmatch(r"offset: \d+ position: \d+", line) for line in index), index
    times = dump_log(segment(broker, "idx-dump", ".timeindex")).stdout.splitlines()[1:]
    assert all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in times), times
    assert times[-1] == f"timestamp: {TS + 390} offset: 39", "sealed at shutdown with the largest timestamp"

    copy = tmp_path / "00000000000000000000.index"
    shutil.copy(segment(broker, "idx-dump", ".index"), copy)
    shutil.copy(segment(broker, "idx-dump"), tmp_path)
    with open(copy, "r+b") as f:
        f.seek(8)
        f.write(struct.pack(">ii", 5, 77))
    flagged = dump_log(str(copy)).stdout.splitlines()
    assert flagged[2] == ("offset: 5 position: 77 (!) no batch starts at position 77 of the .log; "
                          "out of order with the entry before it")


def test_torn_tail_and_bad_crc_are_shown(broker, tmp_path):
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 0})
    for i in range(3):
        producer.produce("hurt", value=f"v{i}".encode() * 10, partition=0)
        producer.flush(30)
    broker.stop()
    path = tmp_path / "00000000000000000000.log"
    shutil.copy(segment(broker, "hurt"), path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - 5)
        f.write(b"!")
        f.seek(0, os.SEEK_END)
        f.write(b"garbage")
    result = dump_log(str(path), "--records")
    batches = batch_lines(result.stdout)
    assert [b["isvalid"] for b in batches] == ["true", "true", "false"]
    assert result.stdout.splitlines()[-1] == (f"Found 7 invalid bytes at the end of {path.name} (position {size}): "
                                              "shorter than a batch header")


def test_refuses_files_that_are_not_partition_files(broker):
    result = dump_log(str(broker.data_dir / "meta.properties"), check=False)
    assert result.returncode != 0
    assert "not a partition file; expected <20-digit offset>.log, .index, .timeindex, .txnindex or .snapshot" \
        in result.stderr


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex"])
def test_empty_files(tmp_path, suffix):
    path = tmp_path / f"{0:020d}{suffix}"
    path.write_bytes(b"")
    assert dump_log(str(path)).stdout.splitlines()[0] == f"Dumping {path}"
