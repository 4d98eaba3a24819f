"""Log compaction through a real broker and real clients: the cleaner keeps the latest value of
every key at its original offset, removes tombstones after delete.retention.ms and aborted
transactions' records, keeps every codec readable, and survives SIGKILL at any moment."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from crc32c import crc32c
from brokerproc import TO_THE_END
from test_idempotence import produce as raw_produce

from testkit.clusterproc import LocalCluster
from logcore.config import BrokerConfig, TopicConfig
from logcore.storage.checkpoint import read_checkpoint
from logcore.storage.compaction import clean
from logcore.storage.log import PartitionLog
from logcore.storage.log_cleaner import cleanable, job_for
from logcore.storage.records import decode_batch, encode_batch
from waiting import wait_for
from wire import WireClient

FAST_CLEANER = {"log.cleaner.backoff.ms": "50"}


def create_topic(address: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact", **configs})])[name].result(30)


def produce(address: str, topic: str, records: list[tuple[bytes, bytes | None]], **config) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, **config})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def consume_all(address: str, topic: str, isolation: str = "read_uncommitted") -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the start to the end, read by confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": isolation, **TO_THE_END})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline, "the reader never reached the end"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return got
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def cleaned_to(broker, topic: str, partition: int = 0) -> int:
    try:
        return read_checkpoint(str(broker.data_dir / "cleaner-offset-checkpoint")).get((topic, partition), 0)
    except FileNotFoundError:
        return 0


def segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(broker.data_dir / f"{topic}-0") if n.endswith(".log"))


def segment_paths(broker, topic: str, suffix: str) -> list[str]:
    directory = broker.data_dir / f"{topic}-0"
    return sorted(str(directory / n) for n in os.listdir(directory) if n.endswith(suffix))


def dump_log(path: str) -> list[str]:
    """dump-log's lines for a file of a running broker; none when a clean swapped the file away meanwhile."""
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "dump-log", "--records", path], capture_output=True,
                          text=True, timeout=60)
    if done.returncode and not os.path.exists(path):
        return []
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def batch_fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+): (\S+)", line))


def expected_after_clean(produced: list[tuple[bytes, bytes | None]], upto: int) -> list[tuple[int, bytes, bytes | None]]:
    """What a log of `produced` (offset = position) holds once cleaned below `upto`: below it, the
    last record of each key there; from it on, everything."""
    last = {key: offset for offset, (key, _) in enumerate(produced[:upto])}
    return [(offset, key, value) for offset, (key, value) in enumerate(produced)
            if offset >= upto or last[key] == offset]


@pytest.mark.parametrize("codec", ["none", "zstd", *(pytest.param(c, marks=pytest.mark.slow)
                                                      for c in ("gzip", "snappy", "lz4"))])
def test_the_latest_value_of_each_key_survives_at_its_offset(broker_factory, codec):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = [(b"key-%d" % (i % 37), b"value-%d" % i) for i in range(3000)]
    produce(broker.address, "kv", produced, **{"compression.type": codec, "batch.num.messages": 50})
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the cleaner's checkpoint")
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)


def test_small_cleaned_segments_are_merged(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = []
    for round_ in range(2):
        batch = [(b"key-%d" % (i % 37), b"value-%d-%d" % (round_, i)) for i in range(3000)]
        produce(broker.address, "kv", batch, **{"batch.num.messages": 50})
        produced += batch
        active = segment_bases(broker, "kv")[-1]
        wait_for(lambda: cleaned_to(broker, "kv") >= active, f"clean {round_ + 1}")
    first_round = [base for base in segment_bases(broker, "kv") if base < 3000]
    assert len(first_round) <= 2, f"the first round's cleaned segments were not merged: {first_round}"
    described = subprocess.run([sys.executable, "-m", "binlake.cli", "log-dirs", "--describe", "--data-dir",
                                str(broker.data_dir), "--topic-list", "kv"], capture_output=True, text=True,
                               check=True, timeout=60)
    [partition] = json.loads(described.stdout)["logDirs"][0]["partitions"]
    assert partition["cleaner"] == {"firstDirtyOffset": cleaned_to(broker, "kv"), "dirtyRatio": 0.0}
    assert partition["segments"] == len(segment_bases(broker, "kv"))
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, cleaned_to(broker, "kv"))


def test_tombstones_stay_for_delete_retention_ms_after_the_cleaner_reaches_them_then_go(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "4096", "delete.retention.ms": "4000"})
    produced = [(b"key-%d" % (i % 20), b"value-%d" % i) for i in range(400)]
    produced += [(b"key-%d" % i, None) for i in range(10)]  # half of the keys deleted
    produced += [(b"filler-%d" % (i % 5), b"x" * 50) for i in range(200)]  # the tombstones leave the active segment
    produce(broker.address, "kv", produced, **{"batch.num.messages": 20})
    active = segment_bases(broker, "kv")[-1]
    reached = time.monotonic()
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the first clean")
    kept = consume_all(broker.address, "kv")
    tombstones = [(offset, key) for offset, key, value in kept if value is None]
    assert sorted(key for _, key in tombstones) == sorted(b"key-%d" % i for i in range(10))
    assert kept == expected_after_clean(produced, upto)
    stamped = wait_for(lambda: [line for path in segment_paths(broker, "kv", ".log") for line in dump_log(path)
                                if "deleteHorizonMs" in line], "dump-log to show a batch with a delete horizon")
    assert all(int(batch["count"]) <= int(batch["lastOffset"]) - int(batch["baseOffset"]) + 1
               for batch in map(batch_fields, stamped))
    wait_for(lambda: not any(value is None for _, _, value in consume_all(broker.address, "kv")),
             "the tombstones to go")
    assert time.monotonic() - reached >= 4.0 - 0.5, "tombstones went before delete.retention.ms"
    deleted = {b"key-%d" % i for i in range(10)}
    assert consume_all(broker.address, "kv") == [r for r in expected_after_clean(produced, upto)
                                                  if r[1] not in deleted]


def test_aborted_transactions_are_removed_and_read_committed_sees_the_same(broker_factory):
    broker = broker_factory(config={**FAST_CLEANER, "transaction.state.log.replication.factor": "1",
                                    "transaction.state.log.min.isr": "1"})
    create_topic(broker.address, "txn", **{"segment.bytes": "4096"})
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "t1", "linger.ms": 5})
    producer.init_transactions(30)
    for round_ in range(30):
        producer.begin_transaction()
        for i in range(20):
            producer.produce("txn", key=b"key-%d" % (i % 50 + round_ % 2 * 50), value=b"r%d-%d" % (round_, i),
                             partition=0)
        if round_ % 3 == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    producer.flush(30)
    before = consume_all(broker.address, "txn", "read_committed")
    committed_latest = {key: value for _, key, value in before}
    produce(broker.address, "txn", [(b"filler", b"x" * 100)] * 100, **{"batch.num.messages": 10})
    active = segment_bases(broker, "txn")[-1]
    wait_for(lambda: cleaned_to(broker, "txn") >= active, "the clean")
    after_uncommitted = consume_all(broker.address, "txn")
    aborted_values = {b"r%d-%d" % (r, i) for r in range(30) if r % 3 == 2 for i in range(20)}
    assert not aborted_values & {value for _, _, value in after_uncommitted}, "aborted records survived the clean"
    after = [r for r in consume_all(broker.address, "txn", "read_committed") if r[1] != b"filler"]
    assert {key: value for _, key, value in after} == committed_latest
    assert len({key for _, key, _ in after}) == len(after), "a key kept more than one value"
    # The producer's last sequence survives in the snapshot, and dump-log reads both side files.
    snapshot = [line for path in segment_paths(broker, "txn", ".snapshot") for line in dump_log(path)]
    assert any("producerId:" in line and "lastSequence:" in line for line in snapshot)
    for path in segment_paths(broker, "txn", ".txnindex"):
        assert all(line.startswith(("Dumping", "version: 0 producerId:")) for line in dump_log(path))


def test_a_consumer_positioned_in_a_removed_range_goes_on_at_the_next_offset(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "4096"})
    produced = [(b"key-%d" % (i % 10), b"value-%d" % i) for i in range(500)]
    produce(broker.address, "kv", produced, **{"batch.num.messages": 20})
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the clean")
    kept = [offset for offset, _, _ in expected_after_clean(produced, upto)]
    removed = next(offset for offset in range(upto) if offset not in kept)
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("kv", 0, removed)])
    msg = wait_for(lambda: consumer.poll(0.2), "a record")
    consumer.close()
    assert msg.error() is None and msg.offset() == min(o for o in kept if o > removed)


def leftovers(broker, topic: str) -> list[str]:
    return [n for n in os.listdir(broker.data_dir / f"{topic}-0") if n.endswith((".cleaned", ".swap"))]


# 20 kills take about 6 minutes here (each round throttles a clean to seconds, then restarts the broker).
@pytest.mark.parametrize("kills", [2, pytest.param(20, marks=[pytest.mark.slow, pytest.mark.timeout(900)])])
def test_sigkill_while_cleaning_loses_and_duplicates_nothing(broker_factory, kills):
    # The cleaner is throttled so that a clean takes seconds and each SIGKILL lands somewhere in one.
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.io.max.bytes.per.second": "1000000"})
    create_topic(broker.address, "kv", **{"segment.bytes": "65536"})
    produced = []
    rng = random.Random(kills)
    for kill in range(kills):
        batch = [(b"key-%d" % rng.randrange(2000), b"value-%d-%d-" % (kill, i) + b"v" * 200) for i in range(8000)]
        produce(broker.address, "kv", batch, **{"batch.num.messages": 100, "acks": "all"})
        produced += batch
        wait_for(lambda: leftovers(broker, "kv"), "a clean to start")
        time.sleep(rng.uniform(0, 2.0))  # a random moment of the clean, not a wait for a condition
        broker.kill()
        broker.start()
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "a whole clean",
                    timeout=120)
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)
    assert not leftovers(broker, "kv")


# -- in-process: the swap, crashed at each of its file operations ------------------------------------

class Crash(BaseException):
    """Stands for the process dying between two file operations: a crash at one exact point of a
    swap cannot be produced for real, so the test raises this from os.replace / os.unlink."""


def compacted_log(path) -> PartitionLog:
    config = TopicConfig(BrokerConfig(), {"cleanup.policy": "compact", "segment.bytes": "3000",
                                          "index.interval.bytes": "200"})
    pl = PartitionLog(str(path), "t", 0, config)
    pl.open(0, clean=False)
    for i in range(300):
        batch = encode_batch([(b"key-%d" % (i % 7), b"value-%d" % i)], 1_700_000_000_000 + i)
        pl.append(batch, pl.validate(batch))
    return pl


def log_records(pl: PartitionLog) -> list[tuple[int, bytes, bytes | None]]:
    out = []
    for segment in pl.segments:
        for position, header in segment.headers():
            out += [(r.offset, r.key, r.value) for r in decode_batch(os.pread(segment.fd, header.size, position))]
    return out


def test_a_crash_at_any_step_of_a_swap_leaves_the_old_segments_or_the_new_ones(tmp_path, monkeypatch):
    pl = compacted_log(tmp_path / "reference")
    before = log_records(pl)
    last = {key: offset for offset, key, _ in before if offset < pl.active.base_offset}
    after = [r for r in before if r[0] >= pl.active.base_offset or last[r[1]] == r[0]]
    steps = 0
    crash_at = None

    def step(real):
        def operation(*args, **kwargs):
            nonlocal steps
            steps += 1
            if steps == crash_at:
                raise Crash()
            return real(*args, **kwargs)
        return operation

    for k in range(1, 200):
        directory = tmp_path / f"crash-{k}"
        pl = compacted_log(directory)
        found = cleanable(pl, pl.log_end_offset, 0, 1_700_000_000_000)
        cleaned_from = {s.base_offset: s for s in pl.segments}
        groups = []
        clean(job_for(pl, found, 1_700_000_000_000, 1 << 20), groups.append)
        steps, crash_at = 0, k
        monkeypatch.setattr(os, "replace", step(os.replace))
        monkeypatch.setattr(os, "unlink", step(os.unlink))
        try:
            for group in groups:
                assert pl.install_cleaned(group, cleaned_from)
            crashed = False
        except Crash:
            crashed = True
        monkeypatch.undo()
        reopened = PartitionLog(str(directory), "t", 0, pl.config)
        reopened.open(0, clean=False)
        # Each group's swap is whole or not done: the first j groups cleaned, the rest as they were.
        partly_cleaned = [[r for r in before if r[0] >= group.end or r in after] for group in groups]
        assert log_records(reopened) in [before, *partly_cleaned] if crashed else log_records(reopened) == after
        assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".tmp"))]
        if not crashed:
            assert k > 3, "the swap made fewer file operations than the test expects"
            return
    raise AssertionError("the swaps never finished within 200 file operations")


@pytest.mark.parametrize("commits", [3000, pytest.param(30000, marks=pytest.mark.slow)])
def test_consumer_offsets_stay_bounded_and_a_restart_replays_only_what_the_cleaner_kept(broker_factory, commits):
    broker = broker_factory(config={**FAST_CLEANER, "offsets.topic.segment.bytes": "20000",
                                    "offsets.topic.replication.factor": "1"})
    create_topic(broker.address, "t", **{"cleanup.policy": "delete"})
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "committer", "enable.auto.commit": False})
    for i in range(commits):
        consumer.commit(offsets=[TopicPartition("t", 0, i)], asynchronous=False)
    consumer.close()
    [partition] = [name for name in os.listdir(broker.data_dir) if name.startswith("__consumer_offsets-")
                   and len(segment_bases_of(broker.data_dir / name)) > 1]
    offsets_dir = broker.data_dir / partition
    wait_for(lambda: cleaned_to(broker, "__consumer_offsets", int(partition.rpartition("-")[2]))
             >= segment_bases_of(offsets_dir)[-1], "the clean of __consumer_offsets")
    size = sum(os.path.getsize(offsets_dir / n) for n in os.listdir(offsets_dir) if n.endswith(".log"))
    assert size < 3 * 20000, f"{partition} holds {size} bytes after {commits} commits of one offset"
    broker.stop()
    broker.start()
    loaded = re.findall(r"loaded \d+ group\(s\) from (\d+) __consumer_offsets record", broker.log())
    assert int(loaded[-1]) < 1000, f"the restart replayed {loaded[-1]} records for {commits} commits"
    reader = Consumer({"bootstrap.servers": broker.address, "group.id": "committer"})
    [committed] = reader.committed([TopicPartition("t", 0)], timeout=30)
    reader.close()
    assert committed.offset == commits - 1


def segment_bases_of(directory) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log"))


def test_a_producers_last_batch_survives_as_an_empty_batch_so_its_sequence_does(tmp_path):
    config = TopicConfig(BrokerConfig(), {"cleanup.policy": "compact", "segment.bytes": "2000"})
    pl = PartitionLog(str(tmp_path / "t-0"), "t", 0, config)
    pl.open(0, clean=False)
    for sequence in range(0, 30, 3):  # an idempotent producer writes keys a-c ...
        batch = encode_batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], 1_700_000_000_000, producer_id=7,
                             producer_epoch=0, base_sequence=sequence)
        pl.append(batch, pl.validate(batch))
    for i in range(60):  # ... and a plain producer overwrites them all
        batch = encode_batch([(b"abc"[i % 3:i % 3 + 1], b"%d" % i)], 1_700_000_000_000)
        pl.append(batch, pl.validate(batch))
    found = cleanable(pl, pl.log_end_offset, 0, 1_700_000_000_000)
    cleaned_from = {s.base_offset: s for s in pl.segments}
    clean(job_for(pl, found, 1_700_000_000_000, 1 << 20), lambda group: pl.install_cleaned(group, cleaned_from))
    assert not [r for r in log_records(pl) if r[2] == b"1"], "the idempotent producer's records were not removed"
    pl.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "t-0" / name)  # the producer state is rebuilt from the cleaned log alone
    reopened = PartitionLog(str(tmp_path / "t-0"), "t", 0, config)
    reopened.open(0, clean=False)
    [entry] = [e for e in reopened.producers.active_producers() if e.producer_id == 7]
    assert entry.last_seq == 29 and entry.last_data_offset == 29


def test_a_follower_copies_a_cleaned_log_batch_for_batch(tmp_path):
    leader = compacted_log(tmp_path / "leader")
    found = cleanable(leader, leader.log_end_offset, 0, 1_700_000_000_000)
    cleaned_from = {s.base_offset: s for s in leader.segments}
    clean(job_for(leader, found, 1_700_000_000_000, 1 << 20), lambda group: leader.install_cleaned(group, cleaned_from))
    follower = PartitionLog(str(tmp_path / "follower"), "t", 0, leader.config)
    follower.open(0, clean=False)
    while follower.log_end_offset < leader.log_end_offset:  # what a follower's fetches do, chunk by chunk
        region = leader.read(follower.log_end_offset, 1000, leader.log_end_offset, min_one_batch=True)
        follower.append_replicated(region.read())
    assert log_records(follower) == log_records(leader)
    assert len(log_records(leader)) < 300


@pytest.mark.slow
def test_a_replica_rebuilt_from_a_cleaned_leader_serves_the_same_records(tmp_path):
    nodes = LocalCluster(tmp_path / "cluster", 2, {**FAST_CLEANER, "zookeeper.session.timeout.ms": "6000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
        admin.create_topics([NewTopic("kv", 1, 2, config={"cleanup.policy": "compact", "segment.bytes": "8192",
                                                           "min.insync.replicas": "2"})])["kv"].result(30)
        produced = [(b"key-%d" % (i % 37), b"value-%d" % i) for i in range(3000)]
        wait_for(lambda: admin.list_topics("kv", timeout=10).topics["kv"].partitions[0].leader >= 0, "a leader")
        produce(nodes.bootstrap, "kv", produced, **{"acks": "all", "batch.num.messages": 50})
        leader = admin.list_topics("kv", timeout=10).topics["kv"].partitions[0].leader
        follower = 1 - leader
        active = segment_bases(nodes.brokers[leader], "kv")[-1]
        upto = wait_for(lambda: cleaned_to(nodes.brokers[leader], "kv") >= active
                        and cleaned_to(nodes.brokers[leader], "kv"), "the leader's clean")
        nodes.brokers[follower].kill()
        shutil.rmtree(nodes.brokers[follower].data_dir / "kv-0")  # it copies the leader's cleaned log from scratch
        nodes.brokers[follower].start()
        wait_for(lambda: sorted(admin.list_topics("kv", timeout=10).topics["kv"].partitions[0].isrs) == [0, 1],
                 "the rebuilt replica back in the ISR")
        nodes.brokers[leader].kill()
        wait_for(lambda: admin.list_topics("kv", timeout=10).topics["kv"].partitions[0].leader == follower,
                 "the rebuilt replica to lead")
        records = consume_all(nodes.brokers[follower].address, "kv")
        # The rebuilt replica's own cleaner may have gone further than the leader's had.
        assert records == expected_after_clean(produced, max(upto, cleaned_to(nodes.brokers[follower], "kv")))
    finally:
        nodes.stop()


def test_a_partition_that_cannot_be_cleaned_is_left_alone_and_the_others_are_cleaned(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    for topic in ("bad", "good"):
        create_topic(broker.address, topic, **{"segment.bytes": "4096"})
    # A batch whose header says gzip over bytes that are not: its CRC is right, so the produce path,
    # which never decompresses, takes it; the cleaner cannot read it. (No real client writes one.)
    batch = bytearray(encode_batch([(b"k", b"v")], int(time.time() * 1000)))
    batch[22] |= 1
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    with WireClient(broker.address) as client:
        assert raw_produce(client, "bad", bytes(batch)) == (0, 0)
    produced = [(b"key-%d" % (i % 10), b"value-%d" % i) for i in range(500)]
    for topic in ("bad", "good"):
        produce(broker.address, topic, produced, **{"batch.num.messages": 20})
    wait_for(lambda: "bad-0 cannot be cleaned" in broker.log(), "the cleaner to give up on bad-0")
    active = segment_bases(broker, "good")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "good") >= active and cleaned_to(broker, "good"), "good-0's clean")
    assert consume_all(broker.address, "good") == expected_after_clean(produced, upto)
    assert cleaned_to(broker, "bad") == 0


# -- the cleaner's settings, each taking effect ------------------------------------------------------

def fill(broker, topic: str, rounds: int = 1, keys: int = 10, records: int = 500) -> list:
    produced = []
    for round_ in range(rounds):
        batch = [(b"key-%d" % (i % keys), b"value-%d-%d" % (round_, i)) for i in range(records)]
        produce(broker.address, topic, batch, **{"batch.num.messages": 20})
        produced += batch
    return produced


def clean_lines(broker, topic: str) -> list[str]:
    return [line for line in broker.log().splitlines() if f"{topic}-0: cleaned up to" in line]


def test_log_cleaner_enable_false_cleans_nothing(broker_factory):
    enabled, disabled = broker_factory(config=FAST_CLEANER, name="on"), \
        broker_factory(config={**FAST_CLEANER, "log.cleaner.enable": "false"}, name="off")
    for broker in (enabled, disabled):
        create_topic(broker.address, "kv", **{"segment.bytes": "4096"})
        fill(broker, "kv")
    wait_for(lambda: clean_lines(enabled, "kv"), "the enabled broker's clean")
    assert not clean_lines(disabled, "kv") and cleaned_to(disabled, "kv") == 0


def test_min_cleanable_dirty_ratio_and_max_compaction_lag_decide_when_to_clean_again(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "lazy", **{"segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.9"})
    create_topic(broker.address, "eager", **{"segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"})
    create_topic(broker.address, "overdue", **{"segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.9",
                                               "max.compaction.lag.ms": "1"})
    for topic in ("lazy", "eager", "overdue"):
        fill(broker, topic, keys=500, records=1000)  # first clean: everything is dirty, ratio 1
        wait_for(lambda: clean_lines(broker, topic), f"{topic}'s first clean")
        fill(broker, topic, keys=500, records=300)  # then a little dirt: a share well below 0.9
    wait_for(lambda: len(clean_lines(broker, "eager")) >= 2 and len(clean_lines(broker, "overdue")) >= 2,
             "the eager and the overdue topic's second clean")
    assert len(clean_lines(broker, "lazy")) == 1


def test_min_compaction_lag_ms_keeps_young_records_uncleaned(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "young", **{"segment.bytes": "4096", "min.compaction.lag.ms": "3600000"})
    create_topic(broker.address, "control", **{"segment.bytes": "4096"})
    produced = fill(broker, "young")
    fill(broker, "control")
    wait_for(lambda: clean_lines(broker, "control"), "the control topic's clean")
    assert not clean_lines(broker, "young")
    assert consume_all(broker.address, "young") == [(o, k, v) for o, (k, v) in enumerate(produced)]


def test_a_small_dedupe_buffer_cleans_in_several_passes(broker_factory):
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.dedupe.buffer.size": "3000"})
    create_topic(broker.address, "kv", **{"segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"})
    produced = fill(broker, "kv", keys=200, records=2000)  # a map of ~25 keys holds only part of them
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the last pass")
    assert len(clean_lines(broker, "kv")) > 2
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)


def test_io_max_bytes_per_second_slows_a_clean_down(broker_factory):
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.io.max.bytes.per.second": "200000"})
    create_topic(broker.address, "kv", **{"segment.bytes": "16384"})
    fill(broker, "kv", records=3000)
    [line] = wait_for(lambda: clean_lines(broker, "kv"), "the clean")
    seconds, read = re.search(r"in ([\d.]+) s: .* (\d+) → \d+ bytes", line).groups()
    assert float(seconds) >= int(read) / 200000 * 0.9, line  # it read the log at least once, at 200 kB/s


def test_log_cleaner_threads_clean_partitions_in_parallel_processes(broker_factory):
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.threads": "2",
                                    "log.cleaner.io.max.bytes.per.second": "2000000"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    for topic in ("a", "b"):
        create_topic(broker.address, topic, **{"segment.bytes": "65536", "cleanup.policy": "delete"})
        fill(broker, topic, keys=100, records=20000)
    resources = [ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)]) for topic in "ab"]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)
    wait_for(lambda: len(cleaner_processes(broker)) == 2, "two cleaner processes at work")
    wait_for(lambda: clean_lines(broker, "a") and clean_lines(broker, "b"), "both cleans")



def test_a_clean_runs_on_idle_cpu_time_unless_its_partition_is_overdue(broker_factory):
    """Each clean runs in a thread of a worker process: SCHED_IDLE for an ordinary clean, niceness 10
    for one past max.compaction.lag.ms (read from /proc while both cleans run, slowed by the io limit)."""
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.threads": "2",
                                    "log.cleaner.io.max.bytes.per.second": "400000"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    create_topic(broker.address, "calm", **{"segment.bytes": "65536", "cleanup.policy": "delete"})
    create_topic(broker.address, "late", **{"segment.bytes": "65536", "cleanup.policy": "delete",
                                            "max.compaction.lag.ms": "1"})
    for topic in ("calm", "late"):
        fill(broker, topic, keys=100, records=20000)
    resources = [ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        for topic in ("calm", "late")]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)
    policies = wait_for(lambda: len(found := cleaning_threads(broker)) == 2 and found, "two cleans at work")
    niceness = min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)  # (ten above the broker's, which is ours)
    assert sorted(policies) == [(os.SCHED_OTHER, niceness), (os.SCHED_IDLE, niceness)]
    wait_for(lambda: clean_lines(broker, "calm") and clean_lines(broker, "late"), "both cleans")


def cleaning_threads(broker) -> list[tuple[int, int]]:
    """(scheduling policy, niceness) of each cleaner process's cleaning thread (the one beside its main thread)."""
    found = []
    for pid in cleaner_processes(broker):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                if int(tid) != pid:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        fields = f.read().rpartition(")")[2].split()
                    found.append((int(fields[38]), int(fields[16])))  # stat fields 41 and 19
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found

def cleaner_processes(broker) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                spawned = b"multiprocessing.spawn" in f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if parent == broker.proc.pid and spawned:
            found.append(int(pid))
    return found


def test_a_topic_deleted_mid_clean_and_created_again_is_cleaned(broker_factory):
    broker = broker_factory(config={**FAST_CLEANER, "log.cleaner.io.max.bytes.per.second": "300000"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    fill(broker, "kv", records=3000)
    wait_for(lambda: leftovers(broker, "kv"), "a clean to start")
    admin.delete_topics(["kv"])["kv"].result(30)
    wait_for(lambda: "kv" not in admin.list_topics(timeout=10).topics, "the topic to go")
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = fill(broker, "kv", records=1000)
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the new topic's clean")
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)
    assert "cannot be cleaned" not in broker.log()


def test_a_deleted_topics_cleaner_checkpoint_goes_so_the_topic_created_again_is_cleaned_after_a_restart(
        broker_factory):
    """As Kafka: deleting a topic drops its cleaner-offset-checkpoint entry. Kept, a broker restarted
    before the new topic's first clean would take the old topic's cleaned-to offset for the new log's
    and leave everything below it uncleaned."""
    broker = broker_factory(config=FAST_CLEANER)
    admin = AdminClient({"bootstrap.servers": broker.address})
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    fill(broker, "kv", records=3000)
    old_active = segment_bases(broker, "kv")[-1]
    wait_for(lambda: cleaned_to(broker, "kv") >= old_active, "the first topic's clean")
    admin.delete_topics(["kv"])["kv"].result(30)
    wait_for(lambda: "kv" not in admin.list_topics(timeout=10).topics, "the topic to go")
    assert cleaned_to(broker, "kv") == 0, read_checkpoint(str(broker.data_dir / "cleaner-offset-checkpoint"))
    broker.stop()  # the new topic is created with the cleaner off, so that only the restart can clean it
    broker.config["log.cleaner.enable"] = "false"
    broker.start()
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = fill(broker, "kv", records=1000)
    broker.stop()
    broker.config["log.cleaner.enable"] = "true"
    broker.start()
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the new topic's clean")
    assert upto < old_active
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)
