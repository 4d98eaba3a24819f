// Drains a Canal destination with Canal's Java client (canal.client 1.1.8) as fast as it goes:
// getWithoutAck(BATCH), parse each entry's RowChange, count rows, ack; until ROWS rows. Prints
// "rows seconds" (from the first non-empty batch to the last row) on one line.
//
//     java -cp CLASSES:.cache/canal-client-jars/* CanalBench HOST PORT DESTINATION ROWS [BATCH]

import com.alibaba.otter.canal.client.CanalConnector;
import com.alibaba.otter.canal.client.CanalConnectors;
import com.alibaba.otter.canal.protocol.CanalEntry;
import com.alibaba.otter.canal.protocol.Message;

import java.net.InetSocketAddress;

public class CanalBench {
    public static void main(String[] args) throws Exception {
        long wanted = Long.parseLong(args[3]);
        int batch = args.length > 4 ? Integer.parseInt(args[4]) : 1000;
        CanalConnector connector = CanalConnectors.newSingleConnector(
            new InetSocketAddress(args[0], Integer.parseInt(args[1])), args[2], "", "");
        connector.connect();
        connector.subscribe("");
        connector.rollback();
        long rows = 0, start = 0;
        while (rows < wanted) {
            Message message = connector.getWithoutAck(batch);
            if (message.getId() == -1 || message.getEntries().isEmpty()) {
                Thread.sleep(1);
                continue;
            }
            if (start == 0) {
                start = System.nanoTime();
            }
            for (CanalEntry.Entry entry : message.getEntries()) {
                if (entry.getEntryType() == CanalEntry.EntryType.ROWDATA) {
                    rows += CanalEntry.RowChange.parseFrom(entry.getStoreValue()).getRowDatasCount();
                }
            }
            connector.ack(message.getId());
        }
        System.out.println(rows + " " + (System.nanoTime() - start) / 1e9);
        connector.disconnect();
    }
}
