package kafkalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * What the sink's tasks need of a log directory's topics, read on the driver when a write (or a micro-batch) is
 * planned: each topic's partition count and the largest batch it takes. The source is the engine's catalogue,
 * `kafkalog.metadata` (engine.metadata: UTF-8 JSON, `{"topics": {name: {"partitions": N, "config": {...}}}}`); a
 * directory without one (a Kafka broker's, adopted by the engine on its next open) is read from its partition
 * directories' names (`<topic>-<partition>`). A topic's batch limit is its max.message.bytes override, else Kafka's
 * default (1 MiB + 12), and at most Kafka's producer max.request.size (1 MiB).
 * Crash policy: read only; the engine rewrites the file whole, so a read sees one version.
 * Thread-safety: immutable once read.
 */
final class Catalogue implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String FILE = "kafkalog.metadata";
    static final int MAX_REQUEST_SIZE = 1 << 20;
    static final int DEFAULT_MAX_MESSAGE_BYTES = (1 << 20) + RecordBatch.LOG_OVERHEAD;

    /** One topic: its partition count and its batch limit in bytes. */
    static final class Topic implements Serializable {
        private static final long serialVersionUID = 1L;
        final int partitions;
        final int batchLimit;

        Topic(int partitions, int maxMessageBytes) {
            this.partitions = partitions;
            this.batchLimit = Math.min(MAX_REQUEST_SIZE, maxMessageBytes);
        }
    }

    private final Map<String, Topic> topics;
    final String path;

    private Catalogue(String path, Map<String, Topic> topics) {
        this.path = path;
        this.topics = topics;
    }

    /** The topic, or UnknownTopicOrPartitionError naming the directory. */
    Topic topic(String name) {
        Topic t = topics.get(name);
        if (t == null) throw KafkalogError.unknownTopic("topic '" + name + "' does not exist in " + path);
        return t;
    }

    static Catalogue read(String path) {
        File file = new File(path, FILE);
        Map<String, Topic> topics = new HashMap<>();
        if (!file.exists()) {
            String[] names = new File(path).list();
            Map<String, Integer> counts = new HashMap<>();
            for (String name : names == null ? new String[0] : names) {
                int dash = name.lastIndexOf('-');
                if (dash <= 0 || !new File(path, name).isDirectory()) continue;
                try {
                    int p = Integer.parseInt(name.substring(dash + 1));
                    if (p >= 0) counts.merge(name.substring(0, dash), p + 1, Math::max);
                } catch (NumberFormatException notAPartition) {
                    // a directory of something else (a deleted or stray partition has a suffix after its number)
                }
            }
            counts.forEach((t, n) -> topics.put(t, new Topic(n, DEFAULT_MAX_MESSAGE_BYTES)));
            return new Catalogue(path, topics);
        }
        try {
            JsonNode root = new ObjectMapper().readTree(file);
            Iterator<Map.Entry<String, JsonNode>> it = root.path("topics").fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                JsonNode limit = e.getValue().path("config").path("max.message.bytes");
                int max = limit.isMissingNode() || limit.isNull() ? DEFAULT_MAX_MESSAGE_BYTES
                        : (int) Math.min(Integer.MAX_VALUE, Long.parseLong(limit.asText().trim()));
                topics.put(e.getKey(), new Topic(e.getValue().path("partitions").asInt(), max));
            }
        } catch (IOException | RuntimeException e) {
            throw KafkalogError.storage("cannot read the catalogue: " + e, file.getPath(), e);
        }
        return new Catalogue(path, topics);
    }
}
