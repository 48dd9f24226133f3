package kafkalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The reader's options on their own, for the test that runs one table of cases through both sources:
 * `kafkalog.spark.OptionsCheck CASES` (compiled and run by tests/spark/jvm_checks.py), CASES holding one JSON object
 * per line ({"options": {...}, "streaming": bool}), prints one JSON object per line: what Options made of them (the
 * fields of engine/spark/source.py's Settings, by the names below) or {"error": kind, "message": ...}. Stateless; one
 * thread.
 */
public final class OptionsCheck {
    private static final ObjectMapper JSON = new ObjectMapper();

    private OptionsCheck() {}

    public static void main(String[] args) throws IOException {
        StringBuilder out = new StringBuilder();
        try (BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream(args[0]),
                StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                JsonNode c = JSON.readTree(line);
                Map<String, String> raw = new TreeMap<>();
                for (Iterator<Map.Entry<String, JsonNode>> it = c.get("options").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> e = it.next();
                    raw.put(e.getKey(), e.getValue().asText());
                }
                out.append(JSON.writeValueAsString(verdict(raw, c.get("streaming").asBoolean()))).append('\n');
            }
        }
        System.out.write(out.toString().getBytes(StandardCharsets.UTF_8));
        System.out.flush();
    }

    static ObjectNode verdict(Map<String, String> raw, boolean streaming) {
        ObjectNode v = JSON.createObjectNode();
        Options o;
        try {
            o = new Options(raw, streaming);
        } catch (KafkalogError e) {
            return v.put("error", e.kind).put("message", e.getMessage());
        }
        v.put("mode", o.mode);
        v.set("topics", o.mode.equals("subscribe") ? JSON.valueToTree(new TreeSet<>(o.topics)) : null);
        v.set("assigned", o.mode.equals("assign") ? JSON.valueToTree(new TreeSet<>(o.assigned)) : null);
        v.put("readCommitted", o.readCommitted).put("failOnDataLoss", o.failOnDataLoss)
                .put("includeHeaders", o.includeHeaders).put("minPartitions", o.minPartitions)
                .put("maxBytesPerPartition", o.maxBytesPerPartition).put("maxDecompressedBytes", o.maxDecompressedBytes)
                .put("strategyLatest", o.strategyLatest).put("maxOffsets", o.maxOffsets).put("minOffsets", o.minOffsets)
                .put("maxTriggerDelayMs", o.maxTriggerDelayMs);
        v.set("start", side(o.start));
        v.set("end", side(o.end));
        return v;
    }

    private static ObjectNode side(Options.Side s) {
        ObjectNode n = JSON.createObjectNode().put("kind", s.kind);
        if (s.kind.equals("timestamp")) n.put("timestamp", s.timestamp);
        if (s.byPartition != null) n.set("byPartition", JSON.valueToTree(new TreeMap<>(s.byPartition)));
        return n;
    }
}
