"""Storage without a broker: segments, indexes, PartitionLog, leader epochs, retention rules, records.

Real files in a temporary directory; batches built with the project's own encoder. The end-to-end
guarantees (real clients, SIGKILL) are in test_recovery.py and test_retention.py.
"""

import datetime
import gzip
import io
import asyncio
import os
import struct
import threading
import time

import pytest
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch

from logcore.config import BrokerConfig, TopicConfig
from logcore.replication.manager import ReplicaManager
from logcore.protocol.errors import OffsetOutOfRange
from logcore.storage.batch import HEADER_SIZE
from logcore.storage.checkpoint import CheckpointFile, read_checkpoint, write_checkpoint
from logcore.storage.epochs import LeaderEpochCache
from logcore.storage.index import OffsetIndex, TimeIndex
from logcore.storage.log import PartitionLog
from logcore.storage.records import DecodedRecord, control_marker, decode_batch, decompress, encode_batch
from logcore.storage.retention import deletable_segments
from logcore.storage.segment import CorruptSegment

T0 = 1_700_000_000_000


def config(**overrides) -> TopicConfig:
    broker = {"log.segment.bytes": "2000", "log.index.interval.bytes": "200"}
    return TopicConfig(BrokerConfig(broker), {k.replace("_", "."): str(v) for k, v in overrides.items()})


def open_log(path, cfg=None, clean=False, recovery_point=0, log_start=0) -> PartitionLog:
    pl = PartitionLog(str(path), "t", 0, cfg or config())
    pl.open(log_start, clean, recovery_point)
    pl.assign_leader_epoch(pl.leader_epoch)
    return pl


def append(pl: PartitionLog, n: int, size: int = 60, ts=None) -> list[int]:
    """n one-record batches; returns their offsets."""
    offsets = []
    for _ in range(n):
        i = pl.log_end_offset
        batch = encode_batch([(f"k{i}".encode(), f"v{i}".encode().ljust(size, b"."))], ts if ts is not None else T0 + i)
        offsets.append(pl.append(batch, pl.validate(batch)).base_offset)
    return offsets


def read_all(pl: PartitionLog) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from the log start, through the fetch path's byte ranges."""
    out, offset = [], pl.log_start_offset
    while offset < pl.log_end_offset:
        region = pl.read(offset, 1 << 20, pl.log_end_offset, True)
        if region is None:
            break
        data, pos = region.read(), 0
        while pos + HEADER_SIZE <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            records = decode_batch(data[pos : pos + 12 + length])
            out += [(r.offset, r.value.rstrip(b".")) for r in records if r.offset >= offset]
            pos += 12 + length
        offset = out[-1][0] + 1
    return out


def files(path) -> dict[str, bytes]:
    return {name: open(os.path.join(path, name), "rb").read() for name in sorted(os.listdir(path))}


# -- indexes -------------------------------------------------------------------------------------

def test_offset_and_time_index_round_trip_and_truncate(tmp_path):
    index = OffsetIndex(str(tmp_path / "0.index"), 100)
    index.reset()
    for offset, position in [(100, 0), (110, 400), (125, 900)]:
        index.append(offset, position)
    assert [index.lookup(o) for o in (99, 100, 109, 110, 124, 125, 500)] == [0, 0, 0, 400, 400, 900, 900]
    index.close()
    assert os.path.getsize(index.path) == 24
    again = OffsetIndex(index.path, 100)
    assert again.load() and list(again.keys) == [0, 10, 25] and list(again.values) == [0, 400, 900]
    again.truncate_to_position(400)
    assert list(again.values) == [0] and os.path.getsize(index.path) == 8

    times = TimeIndex(str(tmp_path / "0.timeindex"), 100)
    times.reset()
    for ts, offset in [(T0, 100), (T0, 101), (T0 + 5, 110), (T0 + 3, 111), (T0 + 9, 120)]:
        times.maybe_append(ts, offset)
    assert list(times.keys) == [T0, T0 + 5, T0 + 9]
    assert [times.lookup(t) for t in (T0 - 1, T0, T0 + 1, T0 + 6, T0 + 10)] == [100, 100, 100, 110, 120]
    times.truncate_to_offset(110)
    assert times.last_entry == (T0, 100)


def test_index_load_ignores_kafka_preallocation_and_refuses_disorder(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">iiii", 3, 500, 9, 1200) + bytes(8 * 100))
    index = OffsetIndex(str(path), 0)
    assert index.load() and list(index.keys) == [3, 9]
    index.append(20, 1500)
    again = OffsetIndex(str(path), 0)
    assert again.load() and list(again.keys) == [3, 9, 20], "appends follow the real entries"
    path.write_bytes(struct.pack(">iiii", 9, 500, 3, 1200))
    assert not OffsetIndex(str(path), 0).load()
    path.write_bytes(b"\x00" * 7)
    assert not OffsetIndex(str(path), 0).load()
    assert not TimeIndex(str(tmp_path / "missing.timeindex"), 0).load()


# -- PartitionLog --------------------------------------------------------------------------------

def test_segments_roll_at_segment_bytes_and_reads_cross_them(tmp_path):
    pl = open_log(tmp_path / "t-0")
    assert append(pl, 60) == list(range(60))
    assert len(pl.segments) > 3
    assert all(s.size <= 2000 for s in pl.segments)
    assert [s.base_offset for s in pl.segments] == sorted({s.base_offset for s in pl.segments})
    assert read_all(pl) == [(i, f"v{i}".encode()) for i in range(60)]
    assert pl.offset_for_timestamp(T0 + 37) == (37, T0 + 37)
    assert pl.offset_for_timestamp(T0 + 1000) is None
    assert pl.max_timestamp() == (59, T0 + 59)
    with pytest.raises(OffsetOutOfRange):
        pl.read(61, 100, 60, True)
    pl.close()


def test_list_offsets_by_time_points_at_the_record_inside_a_batch(tmp_path):
    pl = open_log(tmp_path / "t-0")
    append(pl, 2, ts=T0)
    when = [datetime.datetime.fromtimestamp((T0 + d) / 1000, datetime.UTC) for d in (10, 30, 20)]
    batch = NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0, records=tuple(
        Record(attributes=0, timestamp=w, offset=i, key=None, value=b"x", headers=()) for i, w in enumerate(when)))
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    pl.append(buf.getvalue(), pl.validate(buf.getvalue()))  # offsets 2, 3, 4
    assert [pl.offset_for_timestamp(T0 + d) for d in (0, 5, 10, 15, 25, 30)] == [
        (0, T0), (2, T0 + 10), (2, T0 + 10), (3, T0 + 30), (3, T0 + 30), (3, T0 + 30)]
    assert pl.offset_for_timestamp(T0 + 31) is None
    assert pl.max_timestamp() == (3, T0 + 30)


def test_clean_reopen_keeps_everything_and_indexes_unchanged(tmp_path):
    pl = open_log(tmp_path / "t-0")
    append(pl, 45)
    pl.close()
    before = files(tmp_path / "t-0")
    again = open_log(tmp_path / "t-0", clean=True)
    assert again.log_end_offset == 45 and again.max_timestamp() == (44, T0 + 44)
    assert again.offset_for_timestamp(T0 + 20) == (20, T0 + 20)
    again.close()
    assert files(tmp_path / "t-0") == before
    third = open_log(tmp_path / "t-0", clean=True)
    append(third, 5)
    assert read_all(third) == [(i, f"v{i}".encode()) for i in range(50)]


def test_missing_or_garbage_indexes_are_rebuilt_identically(tmp_path):
    d = tmp_path / "t-0"
    pl = open_log(d)
    append(pl, 50)
    pl.close()
    before = files(d)
    indexes = sorted(n for n in before if n.endswith("index"))
    os.unlink(d / indexes[0])
    (d / indexes[1]).write_bytes(os.urandom(36))
    (d / indexes[-1]).write_bytes(struct.pack(">ii", 5, 10**6))  # points past the end of its log
    again = open_log(d, clean=True)
    assert files(d) == before
    assert read_all(again) == [(i, f"v{i}".encode()) for i in range(50)]
    assert again.offset_for_timestamp(T0 + 33) == (33, T0 + 33)


def test_truncate_to_mid_batch_across_segments_and_below_the_log(tmp_path):
    pl = open_log(tmp_path / "t-0")
    append(pl, 30)
    batch = encode_batch([(None, b"a"), (None, b"b"), (None, b"c")], T0 + 30)  # offsets 30-32
    pl.append(batch, pl.validate(batch))
    append(pl, 10)
    pl.truncate_to(31)  # inside the three-record batch: the whole batch goes
    assert pl.log_end_offset == 30
    assert read_all(pl)[-1] == (29, b"v29")
    assert pl.max_timestamp() == (29, T0 + 29)
    assert append(pl, 1) == [30]
    pl.truncate_to(3)
    assert len(pl.segments) == 1 and pl.log_end_offset == 3
    assert read_all(pl) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]
    pl.delete_records_before(2)
    pl.truncate_to(1)  # below the log start: start over there
    assert (pl.log_start_offset, pl.log_end_offset) == (1, 1)
    assert append(pl, 1) == [1]
    pl.close()
    again = open_log(tmp_path / "t-0", clean=True, log_start=1)
    assert read_all(again) == [(1, b"v1")]


def test_roll_on_segment_ms(tmp_path):
    pl = open_log(tmp_path / "t-0", config(segment_ms=50))
    append(pl, 2)
    time.sleep(0.08)
    append(pl, 1)
    assert [s.base_offset for s in pl.segments] == [0, 2]


def test_flush_messages_and_flush_ms_move_the_recovery_point(tmp_path):
    pl = open_log(tmp_path / "t-0", config(flush_messages=3))
    append(pl, 2)
    assert pl.recovery_point == 0
    append(pl, 1)
    assert pl.recovery_point == 3
    pl.config = config(flush_ms=50)
    append(pl, 1)
    pl.flush_if_due(pl.last_flush_ms + 10)
    assert pl.recovery_point == 3
    pl.flush_if_due(pl.last_flush_ms + 50)
    assert pl.recovery_point == 4



def test_a_roll_fsyncs_the_sealed_segments_off_the_event_loop_then_moves_the_recovery_point(tmp_path):
    async def rolls_then_waits():
        pl = open_log(tmp_path / "t-0")
        append(pl, 40)  # several rolls, inside a running event loop
        sealed_end = pl.active.base_offset
        assert len(pl.segments) > 2
        deadline = time.monotonic() + 30
        while pl.recovery_point < sealed_end and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert pl.recovery_point == sealed_end  # the active segment is not flushed by a roll
        append(pl, 40)
        pl.truncate_to(5)  # before any flush in flight reports back: none may move the recovery point past it
        await asyncio.get_running_loop().shutdown_default_executor()  # every flush has finished
        await asyncio.sleep(0)  # and reported back
        assert pl.recovery_point <= pl.log_end_offset == 5
        pl.close()
    asyncio.run(rolls_then_waits())

# -- recovery ------------------------------------------------------------------------------------

def test_torn_tail_after_crash_is_cut_and_later_segments_dropped(tmp_path):
    d = tmp_path / "t-0"
    pl = open_log(d)
    append(pl, 40)  # several segments; no close(): as after SIGKILL
    first = pl.segments[0]
    with open(first.path, "ab") as f:  # as if the first segment's last write was torn
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x10")
    again = open_log(d, recovery_point=0)
    assert again.log_end_offset == first.next_offset
    assert len(again.segments) == 1
    assert sorted(n for n in os.listdir(d) if n.endswith(("log", "index"))) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    assert append(again, 1) == [first.next_offset]


def test_segments_below_the_recovery_point_are_not_rescanned(tmp_path):
    d = tmp_path / "t-0"
    pl = open_log(d)
    append(pl, 40)
    pl.flush()
    second = pl.segments[1]
    # Damage inside a flushed segment is not looked for without a reason (indexes agree with the log):
    with open(second.path, "r+b") as f:
        f.seek(HEADER_SIZE + 5)
        f.write(b"\xff\xff")
    again = open_log(d, recovery_point=pl.log_end_offset)
    assert again.log_end_offset == 40
    # ...but recovering from an earlier point finds it, with file and offset.
    with pytest.raises(CorruptSegment) as err:
        open_log(d, recovery_point=second.base_offset)
    assert err.value.path == second.path and err.value.position == 0 and err.value.offset == second.base_offset
    assert f"truncate -s 0 {second.path}" in str(err.value)


def test_zero_pages_past_the_recovery_point_are_a_power_loss_not_corruption(tmp_path):
    """Power loss cannot be produced for real here: a file where the page cache lost some pages reads
    as zeros in them, so zero the bytes of a page in the middle of the unflushed data."""
    d = tmp_path / "t-0"
    pl = open_log(d, config(segment_bytes=1 << 20))
    append(pl, 100, size=200)
    pl.flush()
    flushed = pl.log_end_offset
    append(pl, 100, size=200)
    path, size = pl.active.path, pl.active.size
    hole = (size * 3 // 4) // 4096 * 4096
    with open(path, "r+b") as f:
        f.seek(hole)
        f.write(bytes(4096))
    again = open_log(d, recovery_point=flushed)
    assert flushed < again.log_end_offset < 200
    assert again.active.size <= hole
    assert read_all(again)[-1][0] == again.log_end_offset - 1

    # The same zeros in data the recovery point says was flushed: damage, reported.
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(bytes(4096))
    with pytest.raises(CorruptSegment):
        open_log(d, recovery_point=again.log_end_offset)


# -- leader epochs -------------------------------------------------------------------------------

def test_leader_epoch_cache_answers_like_kafka_and_uses_kafkas_file(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in [(0, 0), (2, 10), (5, 30)]:
        cache.assign(epoch, start)
    cache.assign(2, 50)  # an older epoch changes nothing
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    assert cache.end_offset_for(5, 42) == (5, 42)
    assert cache.end_offset_for(3, 42) == (2, 30)
    assert cache.end_offset_for(1, 42) == (0, 10)
    assert cache.end_offset_for(6, 42) == (-1, -1)
    assert cache.end_offset_for(-1, 42) == (-1, -1)
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12), (5, 30)]
    cache.truncate_from_end(30)
    assert cache.entries == [(2, 12)]
    again = LeaderEpochCache(str(tmp_path))
    assert again.load() and again.entries == [(2, 12)]


def test_leader_epochs_survive_restarts_and_are_rebuilt_from_batches(tmp_path):
    d = tmp_path / "t-0"
    pl = open_log(d)
    append(pl, 5)
    pl.assign_leader_epoch(3)
    append(pl, 5)
    pl.close()
    again = open_log(d, clean=True)
    assert again.leader_epoch == 3 and again.epochs.entries == [(0, 0), (3, 5)]
    again.close()
    os.unlink(d / "leader-epoch-checkpoint")
    rebuilt = open_log(d, clean=True)
    assert rebuilt.epochs.entries == [(0, 0), (3, 5)]
    assert rebuilt.epochs.end_offset_for(1, rebuilt.log_end_offset) == (0, 5)
    rebuilt.truncate_to(4)
    assert rebuilt.epochs.entries == [(0, 0)]


def test_a_follower_copies_its_leaders_log_byte_for_byte_from_fetches_that_cut_batches(tmp_path):
    leader = open_log(tmp_path / "leader")
    append(leader, 20)
    leader.assign_leader_epoch(3)
    append(leader, 20)
    follower = open_log(tmp_path / "follower")
    while follower.log_end_offset < leader.log_end_offset:
        # 200 bytes hold one 131-byte batch whole and the next one cut: the cut one comes next time
        region = leader.read(follower.log_end_offset, 200, leader.log_end_offset, True)
        follower.append_replicated(region.read())
    assert read_all(follower) == read_all(leader)
    assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (3, 20)]
    assert files(tmp_path / "follower") == files(tmp_path / "leader")


# -- retention rules -----------------------------------------------------------------------------

def test_retention_rules(tmp_path):
    pl = open_log(tmp_path / "t-0")
    append(pl, 60)
    sizes = [s.size for s in pl.segments]
    total = sum(sizes)
    now = T0 + 1000
    keep_all = config(retention_ms=-1)
    assert deletable_segments(pl.segments, keep_all, now, 0, 60, 60)[0] == 0
    by_bytes = config(retention_ms=-1, retention_bytes=total - sizes[0] - sizes[1])
    assert deletable_segments(pl.segments, by_bytes, now, 0, 60, 60) == (2, f"retention.bytes={total - sizes[0] - sizes[1]}")
    by_time = config(retention_ms=1000 - 30)  # segments whose newest record is older than offset 30's
    count, why = deletable_segments(pl.segments, by_time, now, 0, 60, 60)
    assert pl.segments[count].base_offset <= 30 < (pl.segments[count + 1].base_offset if count + 1 < len(pl.segments) else 60)
    assert why == "retention.ms=970"
    everything = config(retention_ms=0)
    assert deletable_segments(pl.segments, everything, now, 0, 60, 60)[0] == len(pl.segments)
    assert deletable_segments(pl.segments, everything, now, 0, 60, pl.segments[1].base_offset)[0] == 1, \
        "never past the high watermark"
    assert deletable_segments(pl.segments, config(cleanup_policy="compact", retention_ms=0), now, 0, 60, 60)[0] == 0
    assert deletable_segments(pl.segments, keep_all, now, pl.segments[2].base_offset, 60, 60) == (2, "log start offset")

    pl.config = everything
    segments = len(pl.segments)
    assert pl.apply_retention(60, now) == segments
    assert (pl.log_start_offset, pl.log_end_offset, len(pl.segments), pl.active.size) == (60, 60, 1, 0)
    assert deletable_segments(pl.segments, everything, now, 60, 60, 60)[0] == 0, "an empty active segment stays"
    assert append(pl, 1) == [60]


# -- checkpoints and records ---------------------------------------------------------------------

def test_offset_checkpoint_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    write_checkpoint(path, {("b", 1): 7, ("a.x", 0): 42})
    assert open(path).read() == "0\n2\na.x 0 42\nb 1 7\n"
    assert read_checkpoint(path) == {("a.x", 0): 42, ("b", 1): 7}
    assert read_checkpoint(str(tmp_path / "missing")) == {}


def test_a_checkpoint_never_goes_back_to_offsets_read_before_those_on_disk(tmp_path):
    """A worker thread's write of older offsets can end after the event loop wrote newer ones."""
    file = CheckpointFile(str(tmp_path / "log-start-offset-checkpoint"))
    file.write({("t", 0): 50}, taken=2)
    file.write({("t", 0): 10}, taken=1)
    assert read_checkpoint(file.path) == {("t", 0): 50}
    file.write({("t", 0): 60}, taken=3)
    assert read_checkpoint(file.path) == {("t", 0): 60}


def test_the_periodic_checkpoint_is_written_off_the_event_loop(tmp_path, monkeypatch):
    replicas = ReplicaManager(str(tmp_path), 0, BrokerConfig())
    asyncio.run(replicas.open_existing([("t", 0, config())]))
    partition = replicas.get("t", 0)
    partition.append_as_leader(encode_batch([(None, b"v")] * 3, T0))
    partition.delete_records_before(2)
    writers = []
    real = CheckpointFile.write
    monkeypatch.setattr(CheckpointFile, "write", lambda self, *a, **kw: (writers.append(threading.current_thread()),
                                                                         real(self, *a, **kw)))

    async def periodic():
        await replicas.checkpoint_in_background()
        return threading.current_thread()

    loop_thread = asyncio.run(periodic())
    assert len(writers) == 2 and loop_thread not in writers
    assert read_checkpoint(str(tmp_path / "log-start-offset-checkpoint")) == {("t", 0): 2}
    assert ("t", 0) in read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint"))


def test_records_decode_headers_nulls_and_control_markers():
    when = datetime.datetime.fromtimestamp(T0 / 1000, datetime.UTC)
    batch = NewRecordBatch(producer_id=9, producer_epoch=1, base_sequence=4, attributes=0, records=(
        Record(attributes=0, timestamp=when, offset=0, key=None, value=b"\x00\x01",
               headers=(RecordHeader(key=b"h", value=b"x"), RecordHeader(key=b"n", value=None))),
        Record(attributes=0, timestamp=when, offset=1, key=b"k", value=None, headers=()),
    ))
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    records = decode_batch(buf.getvalue())
    assert records == [DecodedRecord(0, T0, None, b"\x00\x01", (("h", b"x"), ("n", None)), 4),
                       DecodedRecord(1, T0, b"k", None, (), 5)]
    assert decompress(1, gzip.compress(b"abc")) == b"abc"
    marker = DecodedRecord(5, T0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7), (), -1)
    assert control_marker(marker).commit and control_marker(marker).coordinator_epoch == 7
