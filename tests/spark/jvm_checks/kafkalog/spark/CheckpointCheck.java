package kafkalog.spark;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.PrintStream;
import java.util.Map;
import java.util.TreeMap;

/**
 * The reader's checkpoint parsing on its own, for the test that holds it to Kafka's reader and the Python one:
 * `kafkalog.spark.CheckpointCheck FILE...` (compiled and run by tests/spark/jvm_checks.py) prints one line per file:
 * "ok", then a tab and "topic-partition=offset" for each entry in key order, or "error " and the error's report
 * ("kind: message"). Stateless; one thread.
 */
public final class CheckpointCheck {
    private CheckpointCheck() {}

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, "UTF-8");
        for (String path : args) {
            StringBuilder line = new StringBuilder();
            try {
                Map<String, Long> found = CheckpointFile.offsets(new File(path));
                line.append("ok");
                for (Map.Entry<String, Long> e : new TreeMap<>(found == null ? Map.of() : found).entrySet()) {
                    line.append('\t').append(e.getKey()).append('=').append(e.getValue());
                }
            } catch (KafkalogError e) {
                line.setLength(0);
                line.append("error ").append(e.getMessage().replace('\n', ' '));
            }
            out.println(line);
        }
        out.flush();
    }
}
