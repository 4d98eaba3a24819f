// A client on Canal's own Java client (com.alibaba.otter:canal.client 1.1.8), looping as Canal's
// SimpleCanalClientExample does: getWithoutAck(1000), process, ack; every fifth batch rolled back instead;
// on a lost server, disconnect and connect again. Writes what canal_python_client.py writes (one JSON line per
// batch, one per reconnection) to OUT; ends once STOP exists and a get comes back empty.
//
//     java -cp '.cache/canal-client-jars/*' CanalLoop.java HOST PORT DESTINATION OUT STOP [USER PASSWORD]
//     java -cp '.cache/canal-client-jars/*' CanalLoop.java zk ZK_SERVERS DESTINATION OUT STOP [USER PASSWORD]
//
// The second is Canal's cluster client (newClusterConnector with ZooKeeper): it finds the server running the
// destination in ZooKeeper and moves on its own to the next when that one dies, retrying the call that failed; such
// a move is written as a reconnection too (before the batch that follows it), since an ack sent just before it may
// not have been stored.

import com.alibaba.otter.canal.client.CanalConnector;
import com.alibaba.otter.canal.client.CanalConnectors;
import com.alibaba.otter.canal.client.impl.ClusterCanalConnector;
import com.alibaba.otter.canal.protocol.CanalEntry;
import com.alibaba.otter.canal.protocol.Message;

import java.io.File;
import java.io.FileWriter;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.util.List;

public class CanalLoop {
    public static void main(String[] args) throws Exception {
        String user = args.length > 5 ? args[5] : "", password = args.length > 6 ? args[6] : "";
        CanalConnector connector = args[0].equals("zk")
            ? CanalConnectors.newClusterConnector(args[1], args[2], user, password)
            : CanalConnectors.newSingleConnector(new InetSocketAddress(args[0], Integer.parseInt(args[1])), args[2],
                                                 user, password);
        File stop = new File(args[4]);
        long batches = 0;
        try (PrintWriter out = new PrintWriter(new FileWriter(args[3], true))) {
            while (true) {
                try {
                    connector.connect();
                    connector.subscribe("");
                    connector.rollback();
                    Object session = current(connector);
                    while (true) {
                        Message message = connector.getWithoutAck(1000);
                        session = noteMove(connector, session, out);
                        long batchId = message.getId();
                        if (batchId == -1 || message.getEntries().isEmpty()) {
                            if (stop.exists()) {
                                connector.disconnect();
                                return;
                            }
                            Thread.sleep(50);
                            continue;
                        }
                        batches++;
                        boolean ack = batches % 5 != 0;
                        out.println(batch(batchId, ack, message.getEntries()));
                        out.flush();
                        if (ack) {
                            connector.ack(batchId);
                        } else {
                            connector.rollback(batchId);
                        }
                        session = noteMove(connector, session, out);
                    }
                } catch (Exception e) {
                    System.out.println("reconnecting after: " + e);
                    out.println("{\"reconnect\": " + str(String.valueOf(e.getMessage())) + "}");
                    out.flush();
                    try {
                        connector.disconnect();
                    } catch (Exception ignored) {
                    }
                    Thread.sleep(200);
                }
            }
        }
    }

    /** The connection a cluster client works on now (a single client: itself). */
    static Object current(CanalConnector connector) {
        return connector instanceof ClusterCanalConnector ? ((ClusterCanalConnector) connector).getCurrentConnector()
                                                          : connector;
    }

    /** Writes a reconnection when the cluster client moved to another connection inside its last call. */
    static Object noteMove(CanalConnector connector, Object session, PrintWriter out) {
        Object now = current(connector);
        if (now != session) {
            out.println("{\"reconnect\": \"the cluster client moved to another connection\"}");
            out.flush();
        }
        return now;
    }

    static String batch(long id, boolean acked, List<CanalEntry.Entry> entries) throws Exception {
        StringBuilder b = new StringBuilder("{\"id\": ").append(id).append(", \"acked\": ").append(acked)
            .append(", \"entries\": [");
        for (int i = 0; i < entries.size(); i++) {
            CanalEntry.Entry entry = entries.get(i);
            CanalEntry.Header h = entry.getHeader();
            b.append(i > 0 ? ", " : "").append("{\"file\": ").append(str(h.getLogfileName()))
                .append(", \"offset\": ").append(h.getLogfileOffset())
                .append(", \"type\": ").append(entry.getEntryType().getNumber())
                .append(", \"db\": ").append(str(h.getSchemaName())).append(", \"table\": ").append(str(h.getTableName()))
                .append(", \"event\": ").append(h.getEventType().getNumber()).append(", \"rows\": [");
            if (entry.getEntryType() == CanalEntry.EntryType.ROWDATA) {
                CanalEntry.RowChange change = CanalEntry.RowChange.parseFrom(entry.getStoreValue());
                for (int r = 0; r < change.getRowDatasCount(); r++) {
                    CanalEntry.RowData row = change.getRowDatas(r);
                    List<CanalEntry.Column> cols = row.getAfterColumnsCount() > 0 ? row.getAfterColumnsList()
                                                                                  : row.getBeforeColumnsList();
                    b.append(r > 0 ? ", " : "").append("{\"before\": ").append(columns(row.getBeforeColumnsList()))
                        .append(", \"after\": ").append(columns(row.getAfterColumnsList())).append(", \"keys\": [");
                    String sep = "";
                    for (CanalEntry.Column c : cols) {
                        if (c.getIsKey()) {
                            b.append(sep).append(str(c.getName()));
                            sep = ", ";
                        }
                    }
                    b.append("], \"updated\": [");
                    sep = "";
                    for (CanalEntry.Column c : row.getAfterColumnsList()) {
                        if (c.getUpdated()) {
                            b.append(sep).append(str(c.getName()));
                            sep = ", ";
                        }
                    }
                    b.append("]}");
                }
                b.append("], \"ddl\": ").append(change.getIsDdl()).append(", \"sql\": ").append(str(change.getSql()));
            } else {
                b.append("]");
            }
            b.append("}");
        }
        return b.append("]}").toString();
    }

    static String columns(List<CanalEntry.Column> columns) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < columns.size(); i++) {
            CanalEntry.Column c = columns.get(i);
            b.append(i > 0 ? ", " : "").append(str(c.getName())).append(": ")
                .append(c.getIsNull() ? "null" : str(c.getValue()));
        }
        return b.append("}").toString();
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
