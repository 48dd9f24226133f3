package kafkalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * `readStream.format("kafkalog")` on the JVM, the twin of engine.spark.stream: offsets are Spark's Kafka source
 * JSON ({"topic": {"0": next offset}}); the latest offset of a partition is its high watermark from
 * `replication-offset-checkpoint` (or, at read_committed, its last stable offset); a first run starts at
 * startingOffsets (latest by default) or startingTimestamp; partitions that appear later are read from their start.
 * Admission follows Spark's Kafka rules: maxOffsetsPerTrigger shared by lag (none starved below one record),
 * minOffsetsPerTrigger waits at most maxTriggerDelay, Trigger.AvailableNow reads what was there at the start.
 * Offsets below the log start (retention) fail the query under failOnDataLoss, else are skipped.
 * Thread-safety: Spark calls it from one driver thread.
 */
final class KafkalogStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final Planner planner;
    private final Options options;
    private final StructType readSchema;
    private Map<String, Long> target;          // Trigger.AvailableNow: what was there when the query started
    private long lastTriggerMs = System.currentTimeMillis();

    KafkalogStream(Planner planner, StructType readSchema) {
        this.planner = planner;
        this.options = planner.options;
        this.readSchema = readSchema;
    }

    /** Spark's Kafka offsets: {"topic": {"partition": offset}}, by "topic-partition". */
    static final class KafkaOffsets extends Offset {
        final Map<String, Long> offsets;

        KafkaOffsets(Map<String, Long> offsets) {
            this.offsets = new TreeMap<>(offsets);
        }

        @Override
        public String json() {
            ObjectNode doc = JSON.createObjectNode();
            for (Map.Entry<String, Long> e : offsets.entrySet()) {
                int dash = e.getKey().lastIndexOf('-');
                String topic = e.getKey().substring(0, dash);
                ObjectNode parts = doc.has(topic) ? (ObjectNode) doc.get(topic) : doc.putObject(topic);
                parts.put(e.getKey().substring(dash + 1), e.getValue());
            }
            return doc.toString();
        }

        static KafkaOffsets parse(String json) {
            Map<String, Long> out = new HashMap<>();
            try {
                JsonNode doc = JSON.readTree(json);
                for (Iterator<Map.Entry<String, JsonNode>> it = doc.fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> t = it.next();
                    for (Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().fields(); ps.hasNext(); ) {
                        Map.Entry<String, JsonNode> p = ps.next();
                        out.put(t.getKey() + "-" + Integer.parseInt(p.getKey()), p.getValue().longValue());
                    }
                }
            } catch (Exception e) {
                throw KafkalogError.badOption("offsets", "not Spark's Kafka offsets JSON: " + json);
            }
            return new KafkaOffsets(out);
        }
    }

    /** {log start offset, latest readable offset} of every selected partition. */
    private Map<String, long[]> bounds() {
        List<Map<String, Long>> checkpoints = PartitionLog.checkpoints(new File(options.path));
        Map<String, long[]> out = new TreeMap<>();
        for (Map.Entry<String, File> e : planner.partitionDirs().entrySet()) {
            Planner.Opened o = planner.open(e.getKey(), e.getValue(), checkpoints);
            out.put(e.getKey(), new long[] {o.log.logStartOffset, o.bound()});
        }
        return out;
    }

    private Map<String, Long> latest() {
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<String, long[]> e : bounds().entrySet()) {
            long off = e.getValue()[1];
            if (target != null) off = Math.min(off, target.getOrDefault(e.getKey(), 0L));
            out.put(e.getKey(), off);
        }
        return out;
    }

    @Override
    public Offset initialOffset() {
        List<Map<String, Long>> checkpoints = PartitionLog.checkpoints(new File(options.path));
        Map<String, File> dirs = planner.partitionDirs();
        options.checkSpecified(dirs.keySet());
        Map<String, Long> out = new TreeMap<>();
        Options.Side start = options.start;
        for (Map.Entry<String, File> e : dirs.entrySet()) {
            Planner.Opened o = planner.open(e.getKey(), e.getValue(), checkpoints);
            long first = o.log.logStartOffset, bound = o.bound();
            if (start.kind.equals("timestamp") || start.kind.equals("timestamps")) {
                Long ts = start.kind.equals("timestamp") ? Long.valueOf(start.timestamp) : start.byPartition.get(e.getKey());
                long found = ts == null ? -1 : o.offsetFor(ts);
                if (found < 0 && !options.strategyLatest && ts != null) {
                    throw KafkalogError.outOfRange(e.getKey() + ": no offset has a timestamp at or after the starting timestamp",
                            o.where(), -1);
                }
                out.put(e.getKey(), found < 0 ? bound : found);
            } else if (start.kind.equals("offsets")) {
                long off = start.byPartition.getOrDefault(e.getKey(), Options.LATEST);
                out.put(e.getKey(), off == Options.EARLIEST ? first : off == Options.LATEST ? bound : off);
            } else {
                out.put(e.getKey(), start.kind.equals("earliest") ? first : bound);
            }
        }
        return new KafkaOffsets(out);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        if (options.maxOffsets != null && options.minOffsets != null) {
            return ReadLimit.compositeLimit(new ReadLimit[] {
                ReadLimit.minRows(options.minOffsets, options.maxTriggerDelayMs), ReadLimit.maxRows(options.maxOffsets)});
        }
        if (options.maxOffsets != null) return ReadLimit.maxRows(options.maxOffsets);
        if (options.minOffsets != null) return ReadLimit.minRows(options.minOffsets, options.maxTriggerDelayMs);
        return ReadLimit.allAvailable();
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = new TreeMap<>();
        bounds().forEach((tp, b) -> target.put(tp, b[1]));
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the one Spark calls");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        Map<String, Long> start = ((KafkaOffsets) startOffset).offsets;
        Map<String, long[]> bounds = bounds();
        Map<String, Long> latest = latest();
        Map<String, Long> begin = new TreeMap<>(start);
        for (String tp : latest.keySet()) begin.putIfAbsent(tp, bounds.get(tp)[0]);   // a new partition: from its start
        Map<String, Long> ends = new TreeMap<>();
        latest.forEach((tp, off) -> ends.put(tp, Math.max(off, begin.get(tp))));
        Long maxRows = null, minRows = null;
        for (ReadLimit l : limit instanceof CompositeReadLimit ? ((CompositeReadLimit) limit).getReadLimits() : new ReadLimit[] {limit}) {
            if (l instanceof ReadMaxRows) maxRows = ((ReadMaxRows) l).maxRows();
            if (l instanceof ReadMinRows) minRows = ((ReadMinRows) l).minRows();
        }
        Map<String, Long> out = new TreeMap<>(start);
        if (limit instanceof ReadAllAvailable) {
            out.putAll(ends);
            return new KafkaOffsets(out);
        }
        long now = System.currentTimeMillis();
        long fresh = 0;
        for (Map.Entry<String, Long> e : ends.entrySet()) fresh += e.getValue() - begin.get(e.getKey());
        if (minRows != null && fresh < minRows && now - lastTriggerMs < options.maxTriggerDelayMs) return startOffset;
        Map<String, Long> admitted = maxRows == null ? ends : rateLimit(begin, ends, maxRows);
        boolean moved = false;
        for (Map.Entry<String, Long> e : admitted.entrySet()) moved |= !e.getValue().equals(begin.get(e.getKey()));
        if (moved) lastTriggerMs = now;
        out.putAll(admitted);
        return new KafkaOffsets(out);
    }

    /** Spark's Kafka admission: at most `limit` records, shared by each partition's lag (a share below one rounds up). */
    static Map<String, Long> rateLimit(Map<String, Long> start, Map<String, Long> end, long limit) {
        Map<String, Long> sizes = new TreeMap<>();
        double total = 0;
        for (Map.Entry<String, Long> e : end.entrySet()) {
            long size = e.getValue() - start.get(e.getKey());
            if (size > 0) {
                sizes.put(e.getKey(), size);
                total += size;
            }
        }
        if (total < 1) return new TreeMap<>(end);
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<String, Long> e : end.entrySet()) {
            Long size = sizes.get(e.getKey());
            if (size == null) {
                out.put(e.getKey(), e.getValue());
                continue;
            }
            double prorate = limit * (size / total);
            long take = (long) (prorate < 1 ? Math.ceil(prorate) : Math.floor(prorate));
            out.put(e.getKey(), Math.min(e.getValue(), start.get(e.getKey()) + take));
        }
        return out;
    }

    @Override
    public Offset reportLatestOffset() {
        return new KafkaOffsets(latest());
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        Map<String, Long> begin = ((KafkaOffsets) start).offsets, until = ((KafkaOffsets) end).offsets;
        List<Map<String, Long>> checkpoints = PartitionLog.checkpoints(new File(options.path));
        Map<String, File> dirs = planner.partitionDirs();
        List<Planner.OffsetRange> ranges = new ArrayList<>();
        for (Map.Entry<String, Long> e : until.entrySet()) {
            String tp = e.getKey();
            File dir = dirs.get(tp);
            if (dir == null) {
                if (options.failOnDataLoss) {
                    throw KafkalogError.outOfRange(tp + " is gone from " + options.path + " (failOnDataLoss=true)", options.path, -1);
                }
                continue;
            }
            Planner.Opened o = planner.open(tp, dir, checkpoints);
            long first = o.log.logStartOffset;
            long lo = begin.getOrDefault(tp, first);
            if (lo < first) {
                if (options.failOnDataLoss) {
                    throw KafkalogError.outOfRange(tp + ": offsets [" + lo + ", " + first + ") were deleted before the query "
                            + "read them (failOnDataLoss=false skips them)", o.where(), lo);
                }
                lo = first;
            }
            if (lo < e.getValue()) ranges.addAll(planner.ranges(o, lo, e.getValue()));
        }
        return ranges.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ColumnarReader.Factory(options, readSchema);
    }

    @Override
    public Offset deserializeOffset(String json) {
        return KafkaOffsets.parse(json);
    }

    @Override
    public void commit(Offset end) {
        // nothing to release: the log keeps its records by its own retention, not by the query's progress
    }

    @Override
    public void stop() {
        // no threads, no open files between calls
    }
}
