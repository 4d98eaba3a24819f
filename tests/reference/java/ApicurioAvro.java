import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Apicurio Registry's Avro serde (2.x or 3.x) in Confluent's framing (magic byte 0, 4-byte id: as-confluent,
 * the id being the contentId), against a schema registry at REGISTRY (…/apis/registry/v2) and a broker at
 * BOOTSTRAP. tests/reference/test_apicurio.py runs it.
 *
 *   produce BOOTSTRAP REGISTRY TOPIC COUNT USER PASSWORD   writes COUNT orders, order(i) for i in 0..COUNT-1,
 *                                                          keyed "i"
 *   consume BOOTSTRAP REGISTRY TOPIC COUNT USER PASSWORD   reads COUNT records from the start and prints each
 *                                                          value (GenericRecord.toString, JSON) on its own line
 *
 * USER and PASSWORD: HTTP Basic authentication to the registry.
 *
 * An order: {id: i, note: null when i % 3 == 0 else "n<i>", amount: i * 1.5, paid: i % 2 == 0,
 * placed: 1700000000000 + i * 1000 (timestamp-millis)}; the test writes the same ones from Python.
 */
public class ApicurioAvro {
    static final Schema ORDER = new Schema.Parser().parse(
        "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\",\"fields\":["
        + "{\"name\":\"id\",\"type\":\"long\"},"
        + "{\"name\":\"note\",\"type\":[\"null\",\"string\"],\"default\":null},"
        + "{\"name\":\"amount\",\"type\":\"double\"},"
        + "{\"name\":\"paid\",\"type\":\"boolean\"},"
        + "{\"name\":\"placed\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}]}");

    /** The settings by name, not by SerdeConfig's constants: 3.x moved that class and dropped as-confluent (its
     *  default framing is Confluent's); with a …/apis/registry/v2 URL it speaks the v2 API, as 2.x does. */
    static Map<String, Object> serde(String registry, String user, String password) {
        Map<String, Object> config = new HashMap<>();
        config.put("apicurio.registry.url", registry);
        config.put("apicurio.auth.username", user);                 // (2.x's names)
        config.put("apicurio.auth.password", password);
        config.put("apicurio.registry.auth.username", user);        // (3.x's)
        config.put("apicurio.registry.auth.password", password);
        config.put("apicurio.registry.auto-register", true);
        config.put("apicurio.registry.as-confluent", true);
        config.put("apicurio.registry.use-id", "contentId");
        config.put("apicurio.registry.headers.enabled", false);
        return config;
    }

    static GenericRecord order(long i) {
        GenericRecord order = new GenericData.Record(ORDER);
        order.put("id", i);
        order.put("note", i % 3 == 0 ? null : "n" + i);
        order.put("amount", i * 1.5);
        order.put("paid", i % 2 == 0);
        order.put("placed", 1700000000000L + i * 1000);
        return order;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], registry = args[2], topic = args[3];
        int count = Integer.parseInt(args[4]);
        Map<String, Object> config = serde(registry, args[5], args[6]);
        config.put("bootstrap.servers", bootstrap);
        if (mode.equals("produce")) {
            config.put(ProducerConfig.ACKS_CONFIG, "all");
            AvroKafkaSerializer<GenericRecord> values = new AvroKafkaSerializer<>();
            values.configure(config, false);  // (a serializer given to the producer is not configured by it)
            try (KafkaProducer<String, GenericRecord> producer =
                     new KafkaProducer<>(config, new StringSerializer(), values)) {
                for (long i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, String.valueOf(i), order(i))).get();
                }
            }
            return;
        }
        config.put(ConsumerConfig.GROUP_ID_CONFIG, "apicurio-" + topic);
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        AvroKafkaDeserializer<GenericRecord> values = new AvroKafkaDeserializer<>();
        values.configure(config, false);
        try (KafkaConsumer<String, GenericRecord> consumer =
                 new KafkaConsumer<>(config, new StringDeserializer(), values)) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (seen < count) {
                if (System.nanoTime() > deadline) {
                    System.err.println("read " + seen + " of " + count + " records in 60 s");
                    System.exit(1);
                }
                for (ConsumerRecord<String, GenericRecord> record : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println(record.value());
                    seen++;
                }
            }
        }
    }
}
