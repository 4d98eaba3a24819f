"""Canal's protobuf Messages in Kafka (canal.mq.flatMessage=false, cdc/formats/canal_mq_messages.py), decoded with
the protobuf classes: a transaction's entries in one MESSAGES packet, routed as Canal's MQMessageUtils routes them."""

from __future__ import annotations

from types import SimpleNamespace

from cdc.canal_routing import CanalMq, java_hash
from cdc.formats.canal_mq_messages import CanalMqMessages
from cdc.formats.proto import CanalProtocol_pb2 as packets
from cdc.formats.proto import EntryProtocol_pb2 as pb
from cdc.offsets import BinlogPosition
from test_canal_entries import TABLE, source

ROWS = [{"id": i, "name": f"n{i}", "n": i} for i in range(1, 7)]


def decode(record) -> tuple[int, list[pb.Entry]]:
    packet = packets.Packet.FromString(record.value)
    assert (packet.type, packet.version) == (packets.MESSAGES, 1) and record.key is None
    messages = packets.Messages.FromString(packet.body)
    return messages.batch_id, [pb.Entry.FromString(m) for m in messages.messages]


def kinds(entries: list[pb.Entry]) -> list[str]:
    return [pb.EntryType.Name(e.entryType) for e in entries]


def run(settings: CanalMq, max_bytes: int = 1 << 20) -> list:
    output, out = CanalMqMessages(settings, lambda topic: 3, gtids=False, max_bytes=max_bytes), []
    output.rows(TABLE, "c", ROWS, 0, 4, source(300), out)
    output.rows(TABLE, "d", ROWS, 4, 6, source(400), out)
    output.commit("0-7-9", BinlogPosition("binlog.000003", 500), out)
    return out


def test_a_transaction_is_one_message_with_its_begin_and_end():
    [record] = run(CanalMq(topic="example", partition=2))
    assert (record.topic, record.partition) == ("example", 2)
    batch_id, entries = decode(record)
    assert batch_id == 300 and kinds(entries) == ["TRANSACTIONBEGIN", "ROWDATA", "ROWDATA", "TRANSACTIONEND"]
    inserted = pb.RowChange.FromString(entries[1].storeValue)
    assert [c.value for c in inserted.rowDatas[3].afterColumns] == ["4", "n4", "4"]
    [record] = run(CanalMq(topic="example", transaction_entries=False))
    assert kinds(decode(record)[1]) == ["ROWDATA", "ROWDATA"]


def test_a_primary_key_hash_makes_an_entry_per_row_on_its_partition():
    out = run(CanalMq(topic="example", partitions_num=3, partition_hash=".*\\..*:$pk$"))
    placed = {}
    for record in out:
        _, entries = decode(record)
        assert kinds(entries) == ["ROWDATA"] * len(entries)                 # (BEGIN and END dropped)
        for entry in entries:
            [row] = pb.RowChange.FromString(entry.storeValue).rowDatas     # one row each
            columns = row.afterColumns or row.beforeColumns
            placed[columns[0].value] = record.partition
    assert placed == {str(i): abs(java_hash("shop") ^ java_hash(str(i))) % 3 for i in range(1, 7)}


def test_a_table_hash_keeps_entries_whole_and_ddl_goes_to_partition_zero():
    output, out = CanalMqMessages(CanalMq(topic="example", partitions_num=3, partition_hash="shop.t"),
                                  lambda topic: 3, gtids=False, max_bytes=1 << 20), []
    output.rows(TABLE, "c", ROWS, 0, 6, source(300), out)
    output.commit("x", BinlogPosition("binlog.000003", 500), out)
    output.ddl(SimpleNamespace(db="shop", table="t", type="ALTER"), "ALTER TABLE t ADD c INT",
               {**source(600).fields, "snapshot": "false"}, out)
    output.commit(None, BinlogPosition("binlog.000003", 700), out)
    (rows, ddl) = out
    assert rows.partition == abs(java_hash("t")) % 3 and len(pb.RowChange.FromString(
        decode(rows)[1][0].storeValue).rowDatas) == 6
    batch_id, [entry] = decode(ddl)
    assert (ddl.partition, batch_id, pb.RowChange.FromString(entry.storeValue).isDdl) == (0, 600, True)


def test_a_large_transaction_is_cut_into_messages():
    out = run(CanalMq(topic="example"), max_bytes=1)
    assert [kinds(decode(r)[1]) for r in out] == [["TRANSACTIONBEGIN", "ROWDATA"], ["ROWDATA"], ["TRANSACTIONEND"]]
    assert {decode(r)[0] for r in out} == {300}
