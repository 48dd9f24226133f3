package kafkalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The validated options of one read, the JVM twin of engine.spark.source.Settings: the same names, defaults and
 * refusals (each an InvalidConfigurationError naming the option), so a query behaves alike on either path.
 * Immutable once built; serializable to executors.
 */
final class Options implements Serializable {
    private static final long serialVersionUID = 1L;
    static final long EARLIEST = -2, LATEST = -1;
    private static final ObjectMapper JSON = new ObjectMapper();
    /** The options' names, defaults, bounds and syntax, shared with engine/spark/source.py (engine/spark/options.json). */
    static final JsonNode SPEC = spec();
    static final Set<String> KNOWN = new HashSet<>();
    static final List<String> STREAMING_ONLY = new java.util.ArrayList<>();
    static final List<String> BATCH_ONLY = new java.util.ArrayList<>();
    private static final Pattern INTEGER = Pattern.compile("\\s*[+-]?[0-9]+\\s*");
    private static final Pattern PARTITION_KEY = Pattern.compile("-?[0-9]+");
    private static final Pattern DURATION;
    private static final Map<Pattern, String> PATTERN_REFUSED = new java.util.LinkedHashMap<>();

    static {
        SPEC.get("names").forEach(n -> KNOWN.add(n.asText().toLowerCase(Locale.ROOT)));
        SPEC.get("streamingOnly").forEach(n -> STREAMING_ONLY.add(n.asText()));
        SPEC.get("batchOnly").forEach(n -> BATCH_ONLY.add(n.asText()));
        STREAMING_ONLY.sort(java.util.Comparator.comparing(n -> n.toLowerCase(Locale.ROOT)));  // (the order of refusal)
        BATCH_ONLY.sort(java.util.Comparator.comparing(n -> n.toLowerCase(Locale.ROOT)));
        SPEC.get("patternRefused").fields().forEachRemaining(e -> {
            if (!e.getKey().equals("about")) PATTERN_REFUSED.put(Pattern.compile(e.getKey()), e.getValue().asText());
        });
        List<String> units = new java.util.ArrayList<>();
        SPEC.get("durationUnits").fieldNames().forEachRemaining(units::add);
        units.sort((a, b) -> b.length() - a.length());
        DURATION = Pattern.compile("\\s*([0-9]+)\\s*(" + String.join("|", units) + ")\\s*");
    }

    private static JsonNode spec() {
        try (java.io.InputStream in = Options.class.getResourceAsStream("options.json")) {
            if (in == null) throw new IllegalStateException("kafkalog-spark.jar lacks kafkalog/spark/options.json");
            return JSON.readTree(in);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    static final Set<String> INTERNAL_TOPICS = new HashSet<>(Arrays.asList(
            "__consumer_offsets", "__transaction_state", "__cluster_metadata"));
    private static final Pattern LEGAL_TOPIC = Pattern.compile("[a-zA-Z0-9._-]+");

    /** One side of the range: kind is earliest, latest, offsets, timestamp or timestamps. */
    static final class Side implements Serializable {
        private static final long serialVersionUID = 1L;
        final String kind;
        final long timestamp;
        final Map<String, Long> byPartition;   // "topic-partition" -> offset or timestamp

        Side(String kind, long timestamp, Map<String, Long> byPartition) {
            this.kind = kind;
            this.timestamp = timestamp;
            this.byPartition = byPartition;
        }
    }

    final boolean streaming;
    final String path;
    final String mode;
    final String selector;
    final Set<String> topics = new HashSet<>();
    final Set<String> assigned = new HashSet<>();
    final Pattern pattern;
    final boolean readCommitted;
    final boolean failOnDataLoss;
    final boolean includeHeaders;
    final int minPartitions;
    final long maxBytesPerPartition;
    final long maxDecompressedBytes;
    final boolean strategyLatest;
    final Side start;
    final Side end;
    final Long maxOffsets;
    final Long minOffsets;
    final long maxTriggerDelayMs;

    Options(Map<String, String> raw, boolean streaming) {
        Map<String, String> o = new TreeMap<>();
        raw.forEach((k, v) -> o.put(k.toLowerCase(Locale.ROOT), v));
        for (String k : o.keySet()) {
            if (!KNOWN.contains(k)) {
                throw KafkalogError.badOption(k, "unknown option (kafkalog reads the log directory given by 'path'; "
                        + "it takes Spark's Kafka source options for what to read)");
            }
        }
        for (String k : streaming ? BATCH_ONLY : STREAMING_ONLY) {
            if (o.containsKey(k.toLowerCase(Locale.ROOT))) {
                throw KafkalogError.badOption(k, "is not valid in " + (streaming ? "streaming" : "batch") + " queries");
            }
        }
        this.streaming = streaming;
        path = o.get("path");
        if (path == null || path.isEmpty()) throw KafkalogError.badOption("path", "the log directory is required: .option('path', dir) or .load(dir)");
        List<String> chosen = new java.util.ArrayList<>();
        for (String n : new String[] {"subscribe", "subscribePattern", "assign"}) {
            if (o.containsKey(n.toLowerCase(Locale.ROOT))) chosen.add(n);
        }
        if (chosen.size() != 1) {
            throw KafkalogError.badOption("subscribe", "exactly one of subscribe, subscribePattern, assign is required, got " + chosen);
        }
        mode = chosen.get(0);
        selector = o.get(mode.toLowerCase(Locale.ROOT));
        Pattern regex = null;
        if (mode.equals("subscribePattern")) {
            for (Map.Entry<Pattern, String> refused : PATTERN_REFUSED.entrySet()) {
                if (refused.getKey().matcher(selector).find()) {
                    throw KafkalogError.badOption("subscribePattern", refused.getValue() + ": '" + selector
                            + "' (use what both Java and Python read alike)");
                }
            }
            try {
                regex = Pattern.compile(selector);
            } catch (PatternSyntaxException e) {
                throw KafkalogError.badOption("subscribePattern", "not a regular expression: " + e.getDescription());
            }
        } else if (mode.equals("assign")) {
            try {
                JsonNode doc = JSON.readTree(selector);
                if (doc == null || !doc.isObject()) throw new IllegalArgumentException();
                for (Iterator<Map.Entry<String, JsonNode>> it = doc.fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> e = it.next();
                    if (!e.getValue().isArray()) throw new IllegalArgumentException();
                    for (JsonNode p : e.getValue()) {
                        long partition = jsonInt(p);
                        checkName("assign", e.getKey(), partition);
                        assigned.add(e.getKey() + "-" + partition);
                    }
                }
            } catch (KafkalogError e) {
                throw e;
            } catch (Exception e) {
                throw KafkalogError.badOption("assign", "must be JSON like {\"topic\": [0, 1]}, got '" + selector + "'");
            }
        } else {
            for (String t : selector.split(",")) {
                if (!t.trim().isEmpty()) topics.add(t.trim());
            }
            if (topics.isEmpty()) throw KafkalogError.badOption("subscribe", "names no topic");
            for (String t : topics) checkName("subscribe", t, 0);
        }
        pattern = regex;
        Map<String, String> levels = new TreeMap<>();
        for (String n : new String[] {"kafka.isolation.level", "isolation.level"}) {
            if (o.containsKey(n)) levels.put(n, o.get(n));
        }
        if (new HashSet<>(levels.values()).size() > 1) {
            throw KafkalogError.badOption("kafka.isolation.level", "and isolation.level disagree: " + levels);
        }
        String level = levels.isEmpty() ? "read_uncommitted" : levels.values().iterator().next();
        if (!level.equals("read_uncommitted") && !level.equals("read_committed")) {
            throw KafkalogError.badOption(levels.keySet().iterator().next(), "must be read_uncommitted or read_committed, got '" + level + "'");
        }
        readCommitted = level.equals("read_committed");
        failOnDataLoss = bool(o, "failOnDataLoss");
        includeHeaders = bool(o, "includeHeaders");
        minPartitions = (int) (long) integer(o, "minPartitions");
        maxBytesPerPartition = integer(o, "maxBytesPerPartition");
        maxDecompressedBytes = integer(o, "maxDecompressedBytes");
        String strategy = o.getOrDefault("startingoffsetsbytimestampstrategy", "error").toLowerCase(Locale.ROOT);
        if (!strategy.equals("error") && !strategy.equals("latest")) {
            throw KafkalogError.badOption("startingOffsetsByTimestampStrategy", "must be 'error' or 'latest', got '" + strategy + "'");
        }
        strategyLatest = strategy.equals("latest");
        start = side(o, "starting");
        end = side(o, "ending");
        if (!streaming && (start.kind.equals("latest") || (start.kind.equals("offsets") && start.byPartition.containsValue(LATEST)))) {
            throw KafkalogError.badOption("startingOffsets", "cannot be latest (or -1) in a batch query: there would be nothing to read");
        }
        maxOffsets = integer(o, "maxOffsetsPerTrigger");
        minOffsets = integer(o, "minOffsetsPerTrigger");
        maxTriggerDelayMs = duration(o.getOrDefault("maxtriggerdelay", SPEC.get("durations").get("maxTriggerDelay").asText()));
    }

    static void checkName(String option, String topic, long partition) {
        String why = null;
        if (topic.isEmpty()) why = "topic name must be a non-empty string, got ''";
        else if (topic.equals(".") || topic.equals("..")) why = "topic name cannot be '" + topic + "'";
        else if (topic.length() > 249) why = "topic name is " + topic.length() + " characters, the maximum is 249";
        else if (!LEGAL_TOPIC.matcher(topic).matches()) why = "topic name '" + topic + "' may only contain ASCII letters, digits, '.', '_' and '-'";
        else if (partition < 0 || partition > Integer.MAX_VALUE) why = "partition " + partition + " of '" + topic + "' is not in [0, 2**31)";
        if (why != null) throw KafkalogError.badOption(option, why);
    }

    private static boolean bool(Map<String, String> o, String name) {
        String dflt = SPEC.get("booleans").get(name).asText();
        String v = o.getOrDefault(name.toLowerCase(Locale.ROOT), dflt).toLowerCase(Locale.ROOT);
        if (!v.equals("true") && !v.equals("false")) throw KafkalogError.badOption(name, "must be true or false, got '" + v + "'");
        return v.equals("true");
    }

    /** The integer option `name` within its bounds (options.json), its default (maybe null) when absent. */
    private static Long integer(Map<String, String> o, String name) {
        JsonNode spec = SPEC.get("integers").get(name);
        String raw = o.get(name.toLowerCase(Locale.ROOT));
        if (raw == null) return spec.get("default").isNull() ? null : spec.get("default").longValue();
        if (!INTEGER.matcher(raw).matches()) throw KafkalogError.badOption(name, "must be an integer, got '" + raw + "'");
        java.math.BigInteger v = new java.math.BigInteger(raw.trim());
        if (v.compareTo(spec.get("min").bigIntegerValue()) < 0) {
            throw KafkalogError.badOption(name, "must be >= " + spec.get("min") + ", got " + v);
        }
        if (v.compareTo(spec.get("max").bigIntegerValue()) > 0) {
            throw KafkalogError.badOption(name, "must be <= " + spec.get("max") + ", got " + v);
        }
        return v.longValue();
    }

    /** A JSON integer (not a float, string or boolean) within int64, as both sources read one. */
    private static long jsonInt(JsonNode n) {
        if (!n.isIntegralNumber() || !n.canConvertToLong()) throw new IllegalArgumentException(String.valueOf(n));
        return n.longValue();
    }

    /** {"topic": {"0": n}} as {"topic-0": n}; null when the option is absent. */
    private static Map<String, Long> jsonMap(Map<String, String> o, String name) {
        String raw = o.get(name.toLowerCase(Locale.ROOT));
        if (raw == null) return null;
        Map<String, Long> out = new HashMap<>();
        try {
            JsonNode doc = JSON.readTree(raw);
            if (doc == null || !doc.isObject()) throw new IllegalArgumentException();
            for (Iterator<Map.Entry<String, JsonNode>> it = doc.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> t = it.next();
                if (!t.getValue().isObject()) throw new IllegalArgumentException();
                for (Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().fields(); ps.hasNext(); ) {
                    Map.Entry<String, JsonNode> p = ps.next();
                    if (!PARTITION_KEY.matcher(p.getKey()).matches()) throw new IllegalArgumentException(p.getKey());
                    long value = jsonInt(p.getValue());
                    long part = Long.parseLong(p.getKey());
                    checkName(name, t.getKey(), part);
                    out.put(t.getKey() + "-" + part, value);
                }
            }
        } catch (KafkalogError e) {
            throw e;
        } catch (Exception e) {
            throw KafkalogError.badOption(name, "must be JSON like {\"topic\": {\"0\": 23}}, got '" + raw + "'");
        }
        return out;
    }

    private Side side(Map<String, String> o, String side) {
        if (o.containsKey(side + "timestamp")) {
            return new Side("timestamp", integer(o, side + "Timestamp"), null);
        }
        Map<String, Long> byTs = jsonMap(o, side + "OffsetsByTimestamp");
        if (byTs != null) return new Side("timestamps", 0, byTs);
        String name = side + "Offsets";
        String raw = o.getOrDefault(name.toLowerCase(Locale.ROOT), side.equals("starting") && !streaming ? "earliest" : "latest");
        if (raw.equals("earliest") || raw.equals("latest")) {
            if (side.equals("ending") && raw.equals("earliest")) throw KafkalogError.badOption(name, "'earliest' is not allowed for endingOffsets");
            return new Side(raw, 0, null);
        }
        Map<String, Long> offsets = jsonMap(o, name);
        if (side.equals("ending") && offsets.containsValue(EARLIEST)) throw KafkalogError.badOption(name, "-2 (earliest) is not allowed for endingOffsets");
        return new Side("offsets", 0, offsets);
    }

    /** Offsets given per partition must name exactly the partitions read, as Spark requires. */
    void checkSpecified(Set<String> found) {
        for (Side s : new Side[] {start, end}) {
            if (s.kind.equals("offsets") || s.kind.equals("timestamps")) {
                for (String tp : new java.util.TreeSet<>(s.byPartition.keySet())) {
                    if (!found.contains(tp)) {
                        String option = (s == start ? "starting" : "ending") + (s.kind.equals("offsets") ? "Offsets" : "OffsetsByTimestamp");
                        throw KafkalogError.badOption(option, "names " + tp + ", which is not a partition being read; specify every partition read, and only those");
                    }
                }
            }
        }
    }

    boolean wants(String topic, int partition) {
        switch (mode) {
            case "subscribe": return topics.contains(topic);
            case "subscribePattern": return !INTERNAL_TOPICS.contains(topic) && pattern.matcher(topic).matches();
            default: return assigned.contains(topic + "-" + partition);
        }
    }

    static long duration(String raw) {
        Matcher m = DURATION.matcher(raw);
        long unit = m.matches() ? SPEC.get("durationUnits").get(m.group(2)).longValue() : 0;
        java.math.BigInteger ms = unit == 0 ? null : new java.math.BigInteger(m.group(1)).multiply(java.math.BigInteger.valueOf(unit));
        if (ms == null || ms.bitLength() > 63) {
            throw KafkalogError.badOption("maxTriggerDelay", "must be a duration like 15m, 30s or 500ms, got '" + raw + "'");
        }
        return ms.longValue();
    }
}
