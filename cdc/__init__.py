"""The MySQL/MariaDB source: binlog streaming, consistent snapshots, schema history, output formats.

`cdc.source.MySqlSource` is the entry point (docs/cdc.md). Its pieces, Debezium's shape:
  offsets.py      restart position (Offset) apart from where an event came from (SourceInfo)
  binlog/         the binlog behind an interface: neutral events, pymysqlreplication client, replay
  rowdecoder.py   per-table compiled decoders of ROWS event bodies; values.py maps types
  schema/         table model, DDL parser, schema history (record/recover) over a pluggable store
  snapshot/       snapshotter (policy) and the snapshot source (numbered steps)
  streaming.py    binlog event type -> handler
  emitter.py      one row change -> records (formats/: Debezium envelope, Canal flat message)
  dispatcher.py   table filters, transaction metadata, heartbeats, bounded batches
  checks.py       startup checks; murmur2.py Kafka's partitioner
  connector.py    the `mysql` plugin of the connector runtime (connect/): config model, source thread
"""
