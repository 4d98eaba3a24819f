"""Canal's MQ output with canal.mq.flatMessage=false: its protobuf `Message`s in Kafka, as Canal's
CanalKafkaProducer writes them: a `Packet` of type MESSAGES holding a batch of serialized `Entry`s
(cdc/formats/canal_entry.py builds both, the same entries TCP mode serves), no key, an explicit partition.

A MySQL transaction's entries (TRANSACTIONBEGIN, ROWDATA, TRANSACTIONEND) make one Message per (topic, partition)
they route to, written at its commit; a larger one is cut into Messages of at most `max_bytes` of entries, so
memory stays bounded. Routing is Canal's MQMessageUtils.messageTopics and messagePartition:

- no dynamicTopic and no partitionHash: every entry to canal.mq.topic, partition canal.mq.partition;
- a dynamicTopic or a partitionHash drops the TRANSACTIONBEGIN and TRANSACTIONEND entries (Canal's rule), and
  each entry goes to its table's topic; with a partitionHash a DDL goes to partition 0, a table without a hash
  rule to 0, a table hash puts the whole entry on its table's partition, and a primary-key or column hash makes
  one entry per row (one RowData), each on its row's partition;
- `transaction_entries` false (canal.instance.filter.transaction.entry=true) drops BEGIN and END too.

The Message's batch id is the binlog position of its transaction's first captured event (Canal's is its
in-memory batch number, which restarts at 1 with the server), as a FlatMessage's `id` is.
"""

from __future__ import annotations

from typing import Callable

from cdc.canal_routing import CanalMq
from cdc.formats.canal import texts
from cdc.formats.canal_entry import CanalEntryOutput, messages_packet
from cdc.formats.canal_mq import CanalMqOutput
from cdc.records import Record


class CanalMqMessages:
    """The Message records of one destination. Owned by the source's emitter; one transaction open at a time."""

    def __init__(self, settings: CanalMq, partitions: Callable[[str], int], gtids: bool, max_bytes: int) -> None:
        self.settings = settings
        self.routes = CanalMqOutput(settings, partitions)      # (topics, their partition counts checked)
        self.router = self.routes.router
        self.entries = CanalEntryOutput("", gtids)
        self.whole = not settings.dynamic_topic and not self.router.hashed
        self.transaction_entries = settings.transaction_entries and self.whole
        self.max_bytes = max_bytes
        self._pending: dict[tuple[str, int], list[bytes]] = {}
        self._bytes = 0
        self._batch_id: int | None = None

    def rows(self, table, kind: str, images: list[dict], start: int, stop: int, source, out: list[Record]) -> None:
        self._first(source.fields["pos"])
        topic = self.routes.topic(table.db, table.table)
        mode = self.router.hash_mode(table.db, table.table) if self.router.hashed else None
        if mode is None or mode.table:            # the entry whole, on canal.mq.partition, 0 or its table's
            [(partition, _)] = self.router.split(table.db, table.table, topic, None, [{}])   # (a stand-in row)
            self._add(table, kind, images, start, stop, source, topic, partition)
        else:
            rows = [texts(row) for row in (images[2 * start + 1:2 * stop:2] if kind == "u" else images[start:stop])]
            key_set = set(table.primary_key)
            pk_names = [c for c in rows[0] if c in key_set] or None
            by_row = {i: p for p, indexes in self.router.split(table.db, table.table, topic, pk_names, rows)
                      for i in indexes}
            for i in range(start, stop):            # (in row order: one entry per row, on its row's partition)
                self._add(table, kind, images, i, i + 1, source, topic, by_row[i - start])
        if self._bytes >= self.max_bytes:
            self._flush(out)

    def commit(self, txid: str | None, position, out: list[Record]) -> None:
        scratch: list[Record] = []
        self.entries.commit(txid, position, scratch)
        for record in scratch:
            self._transaction_entry(record.value)
        self._flush(out)
        self._batch_id = None

    def ddl(self, change, ddl: str, source: dict, out: list[Record]) -> None:
        scratch: list[Record] = []
        self.entries.ddl(change, ddl, source, scratch)
        if scratch:
            self._first(source["pos"])
            topic = self.routes.topic(change.db, change.table)
            self._append((topic, 0 if self.router.hashed else self.settings.partition), scratch[0].value)

    # --- pending entries ---------------------------------------------------------------------------------------
    def _first(self, pos: int) -> None:
        if self._batch_id is None:
            self._batch_id = pos

    def _add(self, table, kind: str, images, start: int, stop: int, source, topic: str, partition: int) -> None:
        scratch: list[Record] = []
        self.entries.rows(table, kind, images, start, stop, source, scratch)
        for record in scratch:
            if record.key is None:
                self._transaction_entry(record.value)
            else:
                self._append((topic, partition), record.value)

    def _transaction_entry(self, value: bytes) -> None:
        if self.transaction_entries:
            self._append((self.settings.topic, self.settings.partition), value)

    def _append(self, where: tuple[str, int], value: bytes) -> None:
        self._pending.setdefault(where, []).append(value)
        self._bytes += len(value)

    def _flush(self, out: list[Record]) -> None:
        for (topic, partition), values in self._pending.items():
            out.append(Record(topic, None, messages_packet(self._batch_id or 0, values), partition))
        self._pending.clear()
        self._bytes = 0
