import java.util.Collections;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's own transactional producer through a fixed script of transactions, the same against any Kafka: it creates
 * TOPIC (3 partitions), then runs the transactions below, one JSON line each. Kafka 4's producer uses transactions v2
 * (EndTxn v5, Produce v12, TxnOffsetCommit v5, no AddPartitionsToTxn or AddOffsetsToTxn) when the cluster finalizes
 * transaction.version 2, transactions v1 otherwise. Used by tests/broker/test_kafka_transactions_v2.py (make interop).
 *
 * Usage: KafkaTransactions BOOTSTRAP TRANSACTIONAL_ID TOPIC GROUP
 */
public class KafkaTransactions {
    // each transaction: the partitions it writes to (one record each), the offset it commits for GROUP (-1: none),
    // whether it commits
    private static final int[][] PARTITIONS = {{0, 1}, {1}, {0, 2}, {}, {2}, {0, 1, 2}};
    private static final long[] OFFSETS = {-1, -1, 5, 7, -1, 9};
    private static final boolean[] COMMIT = {true, false, true, false, true, true};

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(Collections.singleton(new NewTopic(args[2], 3, (short) 1))).all().get();
        }
        props.put("transactional.id", args[1]);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int t = 0; t < PARTITIONS.length; t++) {
                producer.beginTransaction();
                for (int p : PARTITIONS[t]) {
                    producer.send(new ProducerRecord<>(args[2], p, "t" + t, "t" + t + "-p" + p)).get();
                }
                if (OFFSETS[t] >= 0) {
                    producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(args[2], 0), new OffsetAndMetadata(OFFSETS[t])),
                        new ConsumerGroupMetadata(args[3]));
                }
                if (COMMIT[t]) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                System.out.println("{\"transaction\": " + t + ", \"committed\": " + COMMIT[t] + "}");
            }
        }
        System.out.flush();
    }
}
