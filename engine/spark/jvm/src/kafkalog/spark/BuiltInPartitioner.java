package kafkalog.spark;

import java.util.concurrent.ThreadLocalRandom;

/**
 * Kafka's default partitioning for the sink's rows without a partition (kafka-format.md, partitioning): a key goes
 * to toPositive(murmur2(key)) % partitions, over all of the topic's partitions; rows without a key stay on one
 * partition, picked at random, until a batch of it is full, then move to another (KIP-794's sticky partitioning,
 * without its load weighting: a task's batches are all written at the commit).
 * Thread-safety: none; one per topic of a task's writer.
 */
final class BuiltInPartitioner {
    private final int partitions;
    private int sticky = -1;

    BuiltInPartitioner(int partitions) {
        this.partitions = partitions;
    }

    int forKey(byte[] key) {
        return (murmur2(key, key.length) & 0x7fffffff) % partitions;
    }

    /** The partition of a row without a key. */
    int sticky() {
        if (sticky < 0) sticky = ThreadLocalRandom.current().nextInt(partitions);
        return sticky;
    }

    /** A batch of `partition` was full: rows without a key move on (to another partition, when there is one). */
    void batchFull(int partition) {
        if (partition != sticky || partitions == 1) return;
        int next = ThreadLocalRandom.current().nextInt(partitions - 1);
        sticky = next >= sticky ? next + 1 : next;
    }

    /** Kafka's murmur2 of the first `length` bytes (seed 0x9747b28c, 4-byte little-endian words). */
    static int murmur2(byte[] data, int length) {
        final int m = 0x5bd1e995;
        int h = 0x9747b28c ^ length;
        int words = length / 4;
        for (int i = 0; i < words; i++) {
            int at = i * 4;
            int k = (data[at] & 0xff) | ((data[at + 1] & 0xff) << 8) | ((data[at + 2] & 0xff) << 16)
                    | ((data[at + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> 24;
            k *= m;
            h *= m;
            h ^= k;
        }
        int tail = words * 4;
        switch (length % 4) {
            case 3:
                h ^= (data[tail + 2] & 0xff) << 16;
                // fall through
            case 2:
                h ^= (data[tail + 1] & 0xff) << 8;
                // fall through
            case 1:
                h ^= data[tail] & 0xff;
                h *= m;
                break;
            default:
                break;
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }
}
