import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Kafka's own share consumer (KafkaShareConsumer, KIP-932) as a member of a share group: it reads until ACCEPTED
 * records were accepted or SECONDS passed, releasing the first delivery of every record whose key is a multiple of
 * RELEASE_EVERY (so it comes back), accepting the others, and committing after each poll; one JSON line per delivery.
 * Used by tests/broker/test_kafka_tools.py (make interop).
 *
 * Usage: KafkaShareConsume BOOTSTRAP GROUP TOPIC ACCEPTED RELEASE_EVERY SECONDS
 */
public class KafkaShareConsume {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        // (Kafka 4.1+ asks for the mode; 4.0 infers it from the first acknowledge() and ignores this setting)
        props.put("share.acknowledgement.mode", "explicit");
        int wanted = Integer.parseInt(args[3]);
        int releaseEvery = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(args[5]);
        int accepted = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (accepted < wanted && System.currentTimeMillis() < deadline) {
                // (Kafka 4.0's share consumer takes a second poll before any acknowledge() as implicit
                // acknowledgement: each poll waits long enough to return records)
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofSeconds(10));
                for (ConsumerRecord<String, String> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    boolean release = Integer.parseInt(r.key()) % releaseEvery == 0 && count == 1;
                    consumer.acknowledge(r, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    if (!release) {
                        accepted++;
                    }
                    System.out.println("{\"partition\": " + r.partition() + ", \"offset\": " + r.offset()
                        + ", \"delivery\": " + count + ", \"released\": " + release + "}");
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        System.out.flush();
    }
}
