// Kafka's own checkpoint-file readers as a filter, for tests/broker/checkpoint_corpus.py: each argument is
// "offsets|epochs <path>"; each output line is a JSON object {"file": <file name>, ...} with what Kafka's
// OffsetCheckpointFile (offsets) or LeaderEpochCheckpointFile (epochs) read from it: "offsets": [[topic, partition,
// offset], ...] sorted, "epochs": [[epoch, startOffset], ...] in file order, or "error": the exception's class when
// the reader refuses the file. The files are read in place (each exists, so the readers create nothing).
import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;

public class KafkaCheckpoints {
    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            File file = new File(args[i + 1]);
            if (!file.isFile()) {
                throw new IllegalArgumentException("no such file: " + file);
            }
            StringBuilder out = new StringBuilder("{\"file\": " + quote(file.getName()) + ", ");
            try {
                LogDirFailureChannel channel = new LogDirFailureChannel(1);
                if (args[i].equals("offsets")) {
                    Map<TopicPartition, Long> read = new OffsetCheckpointFile(file, channel).read();
                    List<String> rows = new ArrayList<>();
                    for (Map.Entry<TopicPartition, Long> e : read.entrySet()) {
                        rows.add("[" + quote(e.getKey().topic()) + ", " + e.getKey().partition() + ", " + e.getValue() + "]");
                    }
                    rows.sort(null);
                    out.append("\"offsets\": [").append(String.join(", ", rows)).append("]}");
                } else {
                    List<String> rows = new ArrayList<>();
                    for (EpochEntry e : new LeaderEpochCheckpointFile(file, channel).read()) {
                        rows.add("[" + e.epoch + ", " + e.startOffset + "]");
                    }
                    out.append("\"epochs\": [").append(String.join(", ", rows)).append("]}");
                }
            } catch (Exception e) {
                out.append("\"error\": ").append(quote(e.getClass().getSimpleName())).append("}");
            }
            System.out.println(out);
        }
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
