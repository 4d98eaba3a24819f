"""A broker's start with many partitions: the logs it holds are opened in worker threads while the
event loop keeps running, and every partition comes back whole, after a clean stop or a crash —
records, log ends, producer state (an idempotent retry is still answered as a duplicate) — and
writes no leader-epoch file whose epochs did not change. Real logs in a real data directory."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from logcore.config import BrokerConfig, InvalidConfig, TopicConfig
from logcore.replication.manager import OPEN_BATCH, ReplicaManager
from logcore.storage.log import PartitionLog
from logcore.storage.records import decode_batch, encode_batch

PARTITIONS = 6 * OPEN_BATCH  # several batches per worker thread
T0 = 1_700_000_000_000
PRODUCER_ID, PRODUCER_EPOCH = 7, 0
LOOP_ANSWERS_S = 60.0  # how long an open waits for the event loop to run a callback: only a blocked loop takes it


def with_data(index: int) -> bool:
    return index % 10 == 0


def batch(index: int, sequence: int) -> bytes:
    return encode_batch([(None, f"{index}-{sequence}".encode())], T0 + sequence, producer_id=PRODUCER_ID,
                        producer_epoch=PRODUCER_EPOCH, base_sequence=sequence)


async def hosting(data_dir: str, config: BrokerConfig) -> ReplicaManager:
    replicas = ReplicaManager(data_dir, 0, config)
    await replicas.open_existing([("t", i, TopicConfig(config, {"segment.bytes": "256"})) for i in range(PARTITIONS)])
    replicas.started()
    return replicas


def values(replicas: ReplicaManager, index: int) -> list[bytes]:
    """The record values of partition `index`, read as a consumer does (a segment per read)."""
    partition, out = replicas.get("t", index), []
    while (region := partition.read(len(out), 1 << 20, True)) is not None:
        data, position = os.pread(region.fd, region.length, region.position), 0
        while position < len(data):
            size = int.from_bytes(data[position + 8:position + 12], "big") + 12  # (batch length, after offset)
            out += [r.value for r in decode_batch(data[position:position + size])]
            position += size
    return out


def epoch_file(data_dir, index: int) -> tuple[int, int]:
    """Which file holds partition `index`'s leader epochs, and when it was written (a write replaces it)."""
    stat = os.stat(data_dir / f"t-{index}" / "leader-epoch-checkpoint")
    return stat.st_ino, stat.st_mtime_ns


@pytest.mark.parametrize("stop", ["clean", "crash"])
async def test_a_start_opens_every_log_off_the_event_loop_and_each_comes_back_whole(tmp_path, monkeypatch, stop):
    config = BrokerConfig({"num.recovery.threads.per.data.dir": "2"})
    first = await hosting(str(tmp_path), config)
    for index in filter(with_data, range(PARTITIONS)):
        for sequence in range(5):  # several segments (segment.bytes 256), with producer state
            first.get("t", index).append_as_leader(batch(index, sequence))
    if stop == "clean":
        first.shutdown()
    # (a crash: nothing closed, flushed or checkpointed, no clean-shutdown marker)

    epoch_files = {i: epoch_file(tmp_path, i) for i in range(PARTITIONS)}
    loop = asyncio.get_running_loop()
    real_open, answered = PartitionLog.open, []

    def open_while_the_loop_answers(log: PartitionLog, *args, **kwargs) -> None:
        real_open(log, *args, **kwargs)
        if log.partition == PARTITIONS - 1:
            ran = threading.Event()
            loop.call_soon_threadsafe(ran.set)
            answered.append(ran.wait(LOOP_ANSWERS_S))
    monkeypatch.setattr(PartitionLog, "open", open_while_the_loop_answers)
    again = await hosting(str(tmp_path), config)

    assert answered == [True], "the event loop ran nothing while a log was being opened"
    assert len(again.hosted()) == PARTITIONS and not any(p.offline_reason for p in again.hosted())
    for index in range(PARTITIONS):
        expected = [f"{index}-{s}".encode() for s in range(5)] if with_data(index) else []
        assert values(again, index) == expected, f"t-{index} came back changed"
        assert again.get("t", index).log.log_end_offset == len(expected)
    rewritten = [i for i, before in epoch_files.items() if epoch_file(tmp_path, i) != before]
    assert not rewritten, f"unchanged leader epochs written again (a file replaced) for {len(rewritten)} partitions"
    retried = again.get("t", 0).append_as_leader(batch(0, 4))  # the producer's last batch, sent again
    assert (retried.base_offset, retried.records) == (4, 0), "the producer state did not come back"
    again.shutdown()


def test_num_recovery_threads_per_data_dir_is_validated():
    with pytest.raises(InvalidConfig, match="num.recovery.threads.per.data.dir"):
        BrokerConfig({"num.recovery.threads.per.data.dir": "0"})
    assert BrokerConfig({"num.recovery.threads.per.data.dir": "4"}).get("num.recovery.threads.per.data.dir") == 4
