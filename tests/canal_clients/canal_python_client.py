"""A Canal client on canal-python (PyPI), looping as Canal's SimpleCanalClientExample does: get_without_ack,
process, ack (every fifth batch rolled back instead), reconnecting when the server goes away. Every batch it
receives is one JSON line of OUT: {"id", "acked", "entries": [{"file", "offset", "type", "db", "table",
"event", "rows": [{"before": {...}, "after": {...}}]}]}, and each reconnection a line {"reconnect": why}. Ends once STOP exists and a get comes back empty.

Run with canal-python's directory (and no binlake checkout) on sys.path, and
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python: canal-python's generated modules predate protobuf 4.

    python canal_python_client.py HOST PORT DESTINATION OUT STOP
"""

import json
import os
import sys
import time

from canal.client import Client
from canal.protocol import EntryProtocol_pb2 as pb


def columns(cols):
    return {c.name: None if c.isNull else c.value for c in cols}


def decode(entry):
    header = entry.header
    decoded = {"file": header.logfileName, "offset": header.logfileOffset, "type": entry.entryType,
               "db": header.schemaName, "table": header.tableName, "event": header.eventType, "rows": []}
    if entry.entryType == pb.EntryType.ROWDATA:
        change = pb.RowChange()
        change.MergeFromString(entry.storeValue)
        decoded["ddl"] = change.isDdl
        decoded["sql"] = change.sql
        decoded["rows"] = [{"before": columns(r.beforeColumns), "after": columns(r.afterColumns),
                            "keys": [c.name for c in r.afterColumns or r.beforeColumns if c.isKey],
                            "updated": [c.name for c in r.afterColumns if c.updated]} for r in change.rowDatas]
    return decoded


def main(host, port, destination, out_path, stop_path):
    batches = 0
    with open(out_path, "a") as out:
        while True:
            client = Client()
            try:
                client.connect(host=host, port=int(port))
                client.check_valid(username=b"", password=b"")
                client.subscribe(client_id=b"1001", destination=destination.encode(), filter=b"")
                while True:
                    message = client.get_without_ack(1000)
                    batch_id, entries = message["id"], message["entries"]
                    if not batch_id:
                        if os.path.exists(stop_path):
                            return
                        time.sleep(0.05)
                        continue
                    batches += 1
                    acked = batches % 5 != 0
                    out.write(json.dumps({"id": batch_id, "acked": acked,
                                          "entries": [decode(e) for e in entries]}) + "\n")
                    out.flush()
                    if acked:
                        client.ack(batch_id)
                    else:
                        client.rollback(batch_id)
            except Exception as exc:                       # the server went away: connect again
                print(f"reconnecting after: {exc}", flush=True)
                out.write(json.dumps({"reconnect": str(exc)}) + "\n")
                out.flush()
                time.sleep(0.2)
            finally:
                try:
                    client.disconnect()
                except Exception:
                    pass


if __name__ == "__main__":
    main(*sys.argv[1:])
