// Kafka's own TransactionLogValue (kafka-transaction-coordinator) for the values given on the command
// line, version-prefixed as __transaction_state stores it, in hex: what logcore must write byte for byte.
// Arguments: version producerId previousProducerId nextProducerId epoch timeoutMs status lastUpdateMs
// startMs clientTransactionVersion [topic:partition,partition ...]
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.coordinator.transaction.generated.TransactionLogValue;

public class TxnLogValueBytes {
    public static void main(String[] args) {
        List<TransactionLogValue.PartitionsSchema> partitions = new ArrayList<>();
        for (int i = 10; i < args.length; i++) {
            String[] topicAndIds = args[i].split(":");
            List<Integer> ids = new ArrayList<>();
            for (String id : topicAndIds[1].split(",")) ids.add(Integer.parseInt(id));
            partitions.add(new TransactionLogValue.PartitionsSchema().setTopic(topicAndIds[0]).setPartitionIds(ids));
        }
        TransactionLogValue value = new TransactionLogValue()
            .setProducerId(Long.parseLong(args[1]))
            .setPreviousProducerId(Long.parseLong(args[2]))
            .setNextProducerId(Long.parseLong(args[3]))
            .setProducerEpoch(Short.parseShort(args[4]))
            .setTransactionTimeoutMs(Integer.parseInt(args[5]))
            .setTransactionStatus(Byte.parseByte(args[6]))
            .setTransactionLastUpdateTimestampMs(Long.parseLong(args[7]))
            .setTransactionStartTimestampMs(Long.parseLong(args[8]))
            .setClientTransactionVersion(Short.parseShort(args[9]))
            .setTransactionPartitions(partitions);
        byte[] bytes = MessageUtil.toVersionPrefixedBytes(Short.parseShort(args[0]), value);
        System.out.println(HexFormat.of().formatHex(bytes));
    }
}
