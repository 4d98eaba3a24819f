"""MySQL GTIDs with tags (MySQL 8.3+): sets parsed, unioned and printed as the server prints them and
encoded as the server encodes them; the tagged GTID event decoded from the server's own bytes; and a
source restarting by GTID set over tagged and untagged transactions, each read exactly once."""

from __future__ import annotations

import re
import struct
import threading

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import NotImplementedEvent
from pymysqlreplication.gtid import GtidSet as LibraryGtidSet

from sandbox.sql import start_server
from cdc.binlog.gtid_event import tagged_gtid
from cdc.errors import DecodeError
from cdc.gtid import MySqlGtidSet
from cdc.mysql_serialization import Reader, encode_unsigned
from cdc_harness import Capture
from cdc.source import MySqlSource
from waiting import wait_for

# A MySQL as deployed with GTIDs, and full row metadata (the source refuses minimal metadata for now).
GTID_SERVER = {"log_bin": "binlog", "server_id": "1", "gtid_mode": "ON", "enforce_gtid_consistency": "ON",
               "binlog_row_metadata": "FULL"}
A = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
B = "0bbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
GTID_TAGGED_LOG_EVENT = 42
PREVIOUS_GTIDS_LOG_EVENT = 35


@pytest.fixture(scope="module")
def mysql9(mysql_template, tmp_path_factory):
    server = start_server("mysql", tmp_path_factory.mktemp("mysql-gtid"), mysql_template,
                          {k.replace("_", "-"): v for k, v in GTID_SERVER.items()})
    yield server
    server.stop()


def _server_text(server, text: str) -> str:
    """The server's own reading of a GTID set text, printed as offsets store it (no newlines)."""
    return server.sql(f"SELECT GTID_SUBTRACT('{text}', '')")[0][0].replace("\n", "")


def _executed(server) -> str:
    return server.sql("SELECT @@gtid_executed")[0][0].replace("\n", "")


def _run_as_root(server, *statements: str) -> None:
    """One root session, so a `SET gtid_next` holds for the statements after it."""
    with server.connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


# --- MySQL's variable-length integers ---------------------------------------------------------------

def test_variable_length_integers_match_the_framework_examples_and_round_trip_at_every_width():
    # libs/mysql/serialization/readme.md: 65535 unsigned; 65535, -65535, -65536 signed (bytes shown big-endian)
    assert encode_unsigned(65535) == bytes.fromhex("07fffb")[::-1]
    for value, big_endian in ((65535, "0ffff3"), (-65535, "0fffeb"), (-65536, "0ffffb")):
        assert Reader(bytes.fromhex(big_endian)[::-1], "example").signed() == value
    for bits in range(65):
        for value in {max(0, (1 << bits) - 1), 1 << bits if bits < 64 else 0}:
            encoded = encode_unsigned(value)
            reader = Reader(encoded + b"\x07", "round trip")
            assert (reader.unsigned(), reader.pos) == (value, len(encoded))
    assert len(encode_unsigned(127)) == 1 and len(encode_unsigned(128)) == 2
    assert len(encode_unsigned((1 << 56) - 1)) == 8 and len(encode_unsigned(1 << 56)) == 9
    with pytest.raises(DecodeError, match="ends in the middle"):
        Reader(encode_unsigned(1 << 40)[:-1], "a cut value").unsigned()


# --- GTID sets: text ---------------------------------------------------------------------------------

SET_TEXTS = [
    "",
    f"{A}:1-5",
    f"{A}:5:1-3:4",                                   # out of order, adjacent: merged
    f"{A}:1-3:2-5:7:6",                               # overlapping
    f"{A}:Batch:1-2:batch:3,{A}:ZED:9",               # tags in any case; a uuid repeated
    f"{A}:x:3,{A}:2:x:4",                             # untagged first, then tags in order
    f" {A} : x : 3 , {B.upper()}:1",                  # blanks, an uppercase uuid
    f"{A}:{'t' * 32}:1:_:2:a1:3",                     # the longest tag, `_`, digits after the first
    f"{A}:a:b:1",                                     # a tag with no intervals
    f"{A}:5-3:7",                                     # a downward interval holds nothing
    f"{A}:1-9223372036854775806",                     # the largest transaction number
    f"{B}:only_tagged:1-2,{A}:1",
]


@pytest.mark.parametrize("text", SET_TEXTS)
def test_a_set_prints_as_the_server_prints_it(mysql9, text):
    assert str(MySqlGtidSet(text)) == _server_text(mysql9, text)


@pytest.mark.parametrize("left, right", [
    (f"{A}:1-3", f"{A}:4-6:9"),
    (f"{A}:1-3:batch:1-2", f"{A}:2:batch:3:alpha:1,{B}:7"),
    (f"{B}:z:5", f"{A}:z:1-4"),
    ("", f"{A}:t:1"),
])
def test_union_is_the_servers(mysql9, left, right):
    union = MySqlGtidSet(left).union(MySqlGtidSet(right))
    assert str(union) == _server_text(mysql9, f"{left},{right}" if left else right)
    assert union == MySqlGtidSet(right).union(MySqlGtidSet(left))


def test_gtids_add_one_at_a_time_into_the_servers_text(mysql9):
    gtids = MySqlGtidSet(f"{A}:1-2:batch:1")
    for gtid in (f"{A}:3", f"{A}:Batch:2", f"{A}:5", f"{A}:4", f"{B}:ops:7", f"{A}:batch:9"):
        gtids.add(gtid)
    assert str(gtids) == _server_text(mysql9, f"{A}:1-5:batch:1-2:9,{B}:ops:7")


@pytest.mark.parametrize("text, named", [
    (f"{A}:0", "interval 0-0"),
    (f"{A}:1-9223372036854775807", "interval 1-9223372036854775807"),
    (f"{A}::1", f"{A}::1"),
    (f"{A}:1:", f"{A}:1:"),
    (f"{A}:{'t' * 33}:1", "t" * 33),
    (f"{A}:1x:1", "1x"),
    ("not-a-uuid:1", "not-a-uuid"),
])
def test_a_text_the_server_refuses_is_refused_with_the_text_named(mysql9, text, named):
    with pytest.raises(pymysql.MySQLError, match="Malformed GTID set"):
        _server_text(mysql9, text)
    with pytest.raises(ValueError, match="not a MySQL GTID set") as refused:
        MySqlGtidSet(text)
    assert named in str(refused.value)


# --- GTID sets: the binary encoding --------------------------------------------------------------------

def _previous_gtids(server) -> bytes:
    """Rotate to a new binlog file and return its PREVIOUS_GTIDS event's body: the server's own encoding
    (Gtid_set::encode) of @@gtid_executed, the encoding a replica sends in COM_BINLOG_DUMP_GTID."""
    server.sql("FLUSH BINARY LOGS")
    name = server.sql("SHOW BINARY LOG STATUS")[0][0]
    data = (server.data_dir / name).read_bytes()
    pos = 4                                          # past the magic number
    while pos < len(data):
        event_type, size = data[pos + 4], struct.unpack_from("<I", data, pos + 9)[0]
        if event_type == PREVIOUS_GTIDS_LOG_EVENT:
            return data[pos + 19:pos + size - 4]     # header, body, CRC32
        pos += size
    raise AssertionError(f"no PREVIOUS_GTIDS event in {name}")


def test_sets_encode_as_the_server_encodes_them_classic_and_tagged(mysql_factory):
    server = mysql_factory(**GTID_SERVER)
    _run_as_root(server, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                 f"SET gtid_next='{A}:7'", "INSERT INTO d.t VALUES (1)", "SET gtid_next='AUTOMATIC'")
    untagged = MySqlGtidSet(_executed(server))
    assert str(untagged).count(",") == 1                         # the server's uuid and A
    classic = untagged.encode()
    assert classic == _previous_gtids(server)
    assert classic == LibraryGtidSet(str(untagged)).encoded()    # pymysqlreplication's, for untagged sets
    _run_as_root(server, "SET gtid_next='AUTOMATIC:Batch'", "INSERT INTO d.t VALUES (2)",
                 f"SET gtid_next='{B}:ops:3'", "INSERT INTO d.t VALUES (3)",
                 f"SET gtid_next='{A}:{'t' * 32}:9223372036854775806'", "INSERT INTO d.t VALUES (4)")
    tagged = MySqlGtidSet(_executed(server))
    assert str(tagged) == _executed(server)
    assert tagged.encode()[:1] == tagged.encode()[7:8] == b"\x01"    # the tagged format
    assert tagged.encode() == _previous_gtids(server)


# --- the tagged GTID event -------------------------------------------------------------------------------

def _tagged_gtid_bodies(server, start: tuple[str, int]) -> list[bytes]:
    """The bodies of the GTID_TAGGED_LOG_EVENTs the server sends a replica from `start`, as streamed."""
    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": server.port, "user": "root", "passwd": ""},
        server_id=901, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        only_events=[NotImplementedEvent], filter_non_implemented_events=False, enable_logging=False)
    try:
        return [bytes(e.packet.packet._data[20:20 + e.packet.event_size - 19]) for e in reader
                if e.packet.event_type == GTID_TAGGED_LOG_EVENT]
    finally:
        reader.close()


def test_tagged_gtid_event_decodes_from_the_servers_bytes(mysql9):
    db = mysql9.new_database()
    uuid = mysql9.sql("SELECT @@server_uuid")[0][0]
    start = tuple(mysql9.sql("SHOW BINARY LOG STATUS")[0][:2])
    _run_as_root(mysql9, f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
                 "SET gtid_next='AUTOMATIC:Decoded'", f"INSERT INTO `{db}`.t VALUES (1)",
                 f"INSERT INTO `{db}`.t VALUES (2)",
                 f"SET gtid_next='{B}:big_GNO_2:1234567890123'", f"INSERT INTO `{db}`.t VALUES (3)",
                 "SET gtid_next='AUTOMATIC'", f"INSERT INTO `{db}`.t VALUES (4)")   # untagged: type 33
    bodies = _tagged_gtid_bodies(mysql9, start)
    assert [tagged_gtid(b) for b in bodies] == [f"{uuid}:decoded:1", f"{uuid}:decoded:2",
                                                f"{B}:big_gno_2:1234567890123"]
    assert f"{uuid}:1-" in _executed(mysql9) and f":decoded:1-2" in _executed(mysql9)
    body = bodies[0]
    assert tagged_gtid(body + b"\x12\x34\x56\x78") == tagged_gtid(body)   # a checksum after the message
    with pytest.raises(DecodeError, match="declares"):
        tagged_gtid(body[:30])
    with pytest.raises(DecodeError, match="serialization format 2"):
        tagged_gtid(encode_unsigned(2) + body[1:])
    with pytest.raises(DecodeError, match="field 12, which readers must understand"):
        tagged_gtid(body[:2] + encode_unsigned(13) + body[3:])


# --- restart by GTID set, end to end -------------------------------------------------------------------

def _changes(batches) -> list[tuple[str, int, str]]:
    return [(c["op"], (c["after"] or c["before"])["id"], c["source"]["gtid"]) for c in Capture.changes(batches)]


def test_restart_by_gtid_reads_tagged_and_untagged_transactions_exactly_once(mysql_factory):
    server = mysql_factory(**GTID_SERVER)
    uuid = server.sql("SELECT @@server_uuid")[0][0]
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
    capture = Capture(server)
    config = capture.config(db, restart_by="gtid")
    snapshot = capture.run(config)
    untagged = re.fullmatch(rf"{uuid}:1-(\d+)", snapshot[-1].offset["gtids"])
    assert untagged and snapshot[-1].offset["gtids"] == _executed(server)
    n = int(untagged.group(1))                                   # the last transaction before the stream

    def write(*statements):
        _run_as_root(server, f"USE `{db}`", *statements)

    write("INSERT INTO t VALUES (1, 'plain')",
          "SET gtid_next='AUTOMATIC:Batch'", "INSERT INTO t VALUES (2, 'b')", "INSERT INTO t VALUES (3, 'b')",
          "BEGIN", "INSERT INTO t VALUES (4, 'b')", "UPDATE t SET v = 'b1' WHERE id = 1", "COMMIT",
          "SET gtid_next='AUTOMATIC:ddl'", "ALTER TABLE t ADD COLUMN n INT",
          f"SET gtid_next='{B}:ops:1'", "INSERT INTO t VALUES (5, 'ops', 0)",
          "SET gtid_next='AUTOMATIC'", "DELETE FROM t WHERE id = 2")
    executed = _executed(server)
    first = capture.run(config, offset=snapshot[-1].offset)      # from an untagged set: the classic encoding
    assert _changes(first) == [
        ("c", 1, f"{uuid}:{n + 1}"), ("c", 2, f"{uuid}:batch:1"), ("c", 3, f"{uuid}:batch:2"),
        ("c", 4, f"{uuid}:batch:3"), ("u", 1, f"{uuid}:batch:3"), ("c", 5, f"{B}:ops:1"),
        ("d", 2, f"{uuid}:{n + 2}")]
    assert first[-1].offset["gtids"] == executed
    assert [v["tableChanges"][0]["type"] for v in (r["value"] for r in Capture.records(first))
            if v and "ddl" in v] == ["ALTER"]                    # the tagged DDL, a group of its own

    write("SET gtid_next='AUTOMATIC:batch'", "INSERT INTO t VALUES (6, 'b', 1)",
          "SET gtid_next='AUTOMATIC'", "INSERT INTO t VALUES (7, 'plain', 2)",
          "SET gtid_next='AUTOMATIC:new_tag'", "UPDATE t SET n = 3 WHERE id = 7",
          f"SET gtid_next='{B}:ops:2'", "DELETE FROM t WHERE id = 3", "SET gtid_next='AUTOMATIC'")
    # as if the source had failed over to a server where the stored file and position mean nothing
    moved = {**first[-1].offset, "file": "elsewhere.000042", "pos": 4}
    second = capture.run(config, offset=moved)                   # from a tagged set: the tagged encoding
    assert _changes(second) == [
        ("c", 6, f"{uuid}:batch:4"), ("c", 7, f"{uuid}:{n + 3}"), ("u", 7, f"{uuid}:new_tag:1"),
        ("d", 3, f"{B}:ops:2")]
    assert second[-1].offset["gtids"] == _executed(server)
    assert capture.run(config, offset=second[-1].offset) == []  # nothing new: nothing replayed


def test_restart_by_gtid_inside_a_split_tagged_transaction(mysql9):
    db = mysql9.new_database()
    mysql9.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture = Capture(mysql9)
    config = capture.config(db, restart_by="gtid", max_batch_records=100)
    snapshot = capture.run(config)
    rows = ", ".join(f"({i})" for i in range(1, 301))
    _run_as_root(mysql9, f"USE `{db}`", "SET gtid_next='AUTOMATIC:bulk'", f"INSERT INTO t VALUES {rows}",
                 "SET gtid_next='AUTOMATIC'", "INSERT INTO t VALUES (999)")
    batches = capture.run(config, offset=snapshot[-1].offset)
    assert [len(b.records) for b in batches[:3]] == [100, 100, 100]
    # a slice's offset: the transaction's start, the GTIDs before it, and the rows already emitted
    middle = {**batches[1].offset, "file": "elsewhere.000042", "pos": 4}
    assert middle["skip_rows"] == 200 and middle["gtids"] == snapshot[-1].offset["gtids"]
    resumed = capture.run(config, offset=middle)
    assert [c["after"]["id"] for c in Capture.changes(resumed)] == list(range(201, 301)) + [999]
    assert Capture.changes(resumed)[0]["source"]["gtid"].endswith(":bulk:1")
    assert resumed[-1].offset == batches[-1].offset and resumed[-1].offset["gtids"] == _executed(mysql9)


def test_a_restart_by_gtid_keeps_its_position_while_the_server_skips_what_it_has_read(mysql9):
    """Restarted by GTID set, the server streams from the start of the first binlog file that may hold a
    missing GTID (its first Rotate names position 4) and skips what the set holds. The stored position
    must not follow that Rotate back: a heartbeat storing it would replay the schema history to before the
    snapshot on the next start, and the first DDL after it found its table unknown (seen in the MySQL
    crash test)."""
    db = mysql9.new_database()
    mysql9.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
    capture = Capture(mysql9)
    config = capture.config(db, restart_by="gtid", heartbeat_interval_s=0.2)
    stored = capture.run(config)[-1].offset
    source = MySqlSource(config, capture.stores[config["server_id"]], stored)   # follows, as in production
    batches: list = []
    reader = threading.Thread(target=lambda: batches.extend(source.batches()))
    reader.start()
    try:
        wait_for(lambda: batches, "a heartbeat")
    finally:
        source.stop()
        reader.join(10)
    assert [(b.offset["file"], b.offset["pos"]) for b in batches] == [(stored["file"], stored["pos"])] * len(batches)

    mysql9.sql(f"ALTER TABLE `{db}`.t ADD COLUMN v INT", f"INSERT INTO `{db}`.t VALUES (2, 20)")
    after = capture.run(config, offset=batches[-1].offset)
    assert [c["after"] for c in Capture.changes(after)] == [{"id": 2, "v": 20}]
