package kafkalog.spark;

import java.io.File;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.HasPartitionKey;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Driver-side planning, the JVM twin of KafkalogReader's planning in engine.spark.source: partition directories
 * matched against subscribe / subscribePattern / assign, each partition's range resolved from the options (offsets,
 * timestamps through the indexes, earliest/latest bounded by the high watermark or, at read_committed, the last
 * stable offset), checked against the log start (failOnDataLoss), narrowed by pushed filters, then split at
 * segment boundaries by maxBytesPerPartition and by offsets up to minPartitions; unsplit, the ranges are keyed by
 * partition for Spark (keyColumns).
 * Not thread-safe: one per query plan.
 */
final class Planner implements Serializable {
    private static final long serialVersionUID = 1L;
    static final int CHUNK_BYTES = 1 << 20;   // a read window: small enough to stay in cache between its copy and its parse

    final Options options;
    Set<Integer> partitionFilter;
    Set<String> topicFilter;
    long offsetLo = 0, offsetHi = Long.MAX_VALUE;    // [lo, hi)
    long timestampFromMs = Long.MIN_VALUE;           // every row read has a timestamp >= this (ms)

    Planner(Options options) {
        this.options = options;
    }

    /** Offsets [start, end) of one partition directory: a task's input. Its key (the values of keyColumns) is set
     *  when the planner reports the ranges as grouped by partition. */
    static final class OffsetRange implements HasPartitionKey {
        private static final long serialVersionUID = 1L;
        private InternalRow key;
        final String topic;
        final int partition;
        final String directory;
        final long start;
        final long end;
        final PartitionLog.Aborted[] aborted;

        OffsetRange(String topic, int partition, String directory, long start, long end, PartitionLog.Aborted[] aborted) {
            this.topic = topic;
            this.partition = partition;
            this.directory = directory;
            this.start = start;
            this.end = end;
            this.aborted = aborted;
        }

        @Override
        public InternalRow partitionKey() {
            return key;
        }
    }

    /** The columns the ranges are grouped by, for Spark's KeyGroupedPartitioning: `partition` when they are of one
     *  topic, `topic, partition` otherwise; null when a partition has more than one range (Spark would then read all of
     *  them in one task) or there is none. Sets each range's key. With a key, an aggregate or join grouped by these
     *  columns needs no shuffle: each task holds all of one partition's rows. */
    static String[] keyColumns(List<OffsetRange> ranges) {
        Set<String> partitions = new java.util.HashSet<>(), topics = new java.util.HashSet<>();
        for (OffsetRange r : ranges) {
            partitions.add(r.topic + "-" + r.partition);
            topics.add(r.topic);
        }
        if (ranges.isEmpty() || partitions.size() < ranges.size()) return null;
        boolean oneTopic = topics.size() == 1;
        for (OffsetRange r : ranges) {
            r.key = new GenericInternalRow(oneTopic ? new Object[] {r.partition}
                    : new Object[] {UTF8String.fromString(r.topic), r.partition});
        }
        return oneTopic ? new String[] {"partition"} : new String[] {"topic", "partition"};
    }

    /** A partition opened for planning: its log, and what a reader at the query's isolation level sees. */
    final class Opened {
        final PartitionLog log;
        final PartitionLog.Committed committed;

        Opened(PartitionLog log) {
            this.log = log;
            this.committed = options.readCommitted ? log.committed(CHUNK_BYTES) : null;
        }

        long bound() {
            return committed != null ? committed.lastStableOffset : log.highWatermark();
        }

        /** ListOffsets: the offset of the first visible record with timestamp >= ts; -1 when none. */
        long offsetFor(long ts) {
            long[] found = log.offsetForTimestamp(ts, CHUNK_BYTES);
            return found != null && found[1] < bound() ? found[1] : -1;
        }

        String where() {
            return log.dir.getPath();
        }
    }

    /** "topic-partition" -> directory, for each partition directory the options select (sorted). */
    Map<String, File> partitionDirs() {
        File root = new File(options.path);
        if (!root.isDirectory()) throw KafkalogError.badOption("path", "'" + options.path + "' is not a directory");
        Map<String, File> out = new TreeMap<>();
        String[] entries = root.list();
        if (entries == null) throw KafkalogError.storage("cannot list the log directory", options.path, null);
        Arrays.sort(entries);
        for (String name : entries) {
            int dash = name.lastIndexOf('-');
            if (dash <= 0) continue;
            String topic = name.substring(0, dash), part = name.substring(dash + 1);
            if (part.isEmpty() || part.length() > 10 || !part.chars().allMatch(c -> c >= '0' && c <= '9')) continue;
            long p = Long.parseLong(part);
            if (p > Integer.MAX_VALUE || !part.equals(Long.toString(p))) continue;
            try {
                Options.checkName("path", topic, p);
            } catch (KafkalogError e) {
                continue;
            }
            File dir = new File(root, name);
            if (dir.isDirectory() && options.wants(topic, (int) p)) out.put(name, dir);
        }
        return out;
    }

    Opened open(String tp, File dir, List<Map<String, Long>> checkpoints) {
        int dash = tp.lastIndexOf('-');
        return new Opened(new PartitionLog(tp.substring(0, dash), Integer.parseInt(tp.substring(dash + 1)), dir,
                checkpoints.get(0).get(tp), checkpoints.get(1).get(tp)));
    }

    List<OffsetRange> plan() {
        Map<String, File> dirs = partitionDirs();
        options.checkSpecified(dirs.keySet());
        if (options.mode.equals("assign")) {
            for (String tp : new java.util.TreeSet<>(options.assigned)) {
                if (!dirs.containsKey(tp)) {
                    throw KafkalogError.badOption("assign", "no partition directory for " + tp + " in '" + options.path + "'");
                }
            }
        }
        List<Map<String, Long>> checkpoints = PartitionLog.checkpoints(new File(options.path));
        List<OffsetRange> ranges = new ArrayList<>();
        for (Map.Entry<String, File> e : dirs.entrySet()) {
            Opened o = open(e.getKey(), e.getValue(), checkpoints);
            if (topicFilter != null && !topicFilter.contains(o.log.topic)) continue;
            if (partitionFilter != null && !partitionFilter.contains(o.log.partition)) continue;
            long[] range = range(o);
            if (range[0] < range[1]) ranges.addAll(ranges(o, range[0], range[1]));
        }
        return splitTo(ranges, options.minPartitions);
    }

    /** An offset for one side: -1 means none (a timestamp no record reaches). */
    private long resolve(Opened o, String tp, Options.Side side) {
        if (side.kind.equals("timestamp") || side.kind.equals("timestamps")) {
            Long ts = side.kind.equals("timestamp") ? Long.valueOf(side.timestamp) : side.byPartition.get(tp);
            if (ts == null) throw KafkalogError.badOption("startingOffsetsByTimestamp/endingOffsetsByTimestamp", "has no timestamp for " + tp);
            return o.offsetFor(ts);
        }
        long off;
        if (side.kind.equals("earliest")) off = Options.EARLIEST;
        else if (side.kind.equals("latest")) off = Options.LATEST;
        else if (!side.byPartition.containsKey(tp)) throw KafkalogError.badOption("startingOffsets/endingOffsets", "has no offset for " + tp);
        else off = side.byPartition.get(tp);
        return off == Options.EARLIEST ? o.log.logStartOffset : off == Options.LATEST ? o.bound() : off;
    }

    long[] range(Opened o) {
        String tp = o.log.topic + "-" + o.log.partition;
        long first = o.log.logStartOffset, bound = o.bound();
        long start = resolve(o, tp, options.start);
        if (start < 0) {
            if (!options.strategyLatest) {
                throw KafkalogError.outOfRange(tp + ": no offset has a timestamp at or after the starting timestamp "
                        + "(startingOffsetsByTimestampStrategy=error)", o.where(), -1);
            }
            start = bound;
        }
        long end = resolve(o, tp, options.end);
        end = end < 0 ? bound : end;
        String[] names = {"start", "end"};
        long[] both = {start, end};
        for (int i = 0; i < 2; i++) {
            if ((both[i] < first || both[i] > bound) && options.failOnDataLoss) {
                throw KafkalogError.outOfRange(tp + ": the " + names[i] + " offset " + both[i] + " is outside the log's ["
                        + first + ", " + bound + "] (records were deleted or never written; failOnDataLoss=false reads "
                        + "what is there)", o.where(), both[i]);
            }
        }
        start = Math.min(Math.max(start, first), bound);
        end = Math.min(Math.max(end, first), bound);
        if (start > end) throw KafkalogError.badOption("endingOffsets", tp + ": ending offset " + end + " is before starting offset " + start);
        start = Math.max(start, offsetLo);
        end = Math.min(end, offsetHi);
        if (timestampFromMs != Long.MIN_VALUE && start < end) {
            long found = o.offsetFor(timestampFromMs);   // every earlier record is older
            start = Math.max(start, found < 0 ? end : found);
        }
        return new long[] {start, end};
    }

    /** [start, end) of one partition as the ranges of its tasks: cut at segment boundaries by size, each with the
     *  aborted transactions it overlaps. */
    List<OffsetRange> ranges(Opened o, long start, long end) {
        List<OffsetRange> out = new ArrayList<>();
        long lo = start, size = 0;
        for (long[] seg : o.log.bytesBetween(start, end)) {
            if (size > 0 && size + seg[2] > options.maxBytesPerPartition) {
                out.add(range(o, lo, seg[0]));
                lo = seg[0];
                size = 0;
            }
            size += seg[2];
        }
        out.add(range(o, lo, end));
        return out;
    }

    private OffsetRange range(Opened o, long lo, long hi) {
        return new OffsetRange(o.log.topic, o.log.partition, o.log.dir.getPath(), lo, hi,
                o.committed == null ? new PartitionLog.Aborted[0] : overlapping(o.committed.aborted.toArray(new PartitionLog.Aborted[0]), lo, hi));
    }

    /** The aborted transactions a task reading [lo, hi) must know: those whose data or marker falls in it. */
    static PartitionLog.Aborted[] overlapping(PartitionLog.Aborted[] all, long lo, long hi) {
        return Arrays.stream(all).filter(t -> t.lastOffset >= lo && t.firstOffset < hi).toArray(PartitionLog.Aborted[]::new);
    }

    /** Split the widest ranges by offsets until there are at least `minimum` (Spark's minPartitions). */
    static List<OffsetRange> splitTo(List<OffsetRange> ranges, int minimum) {
        List<OffsetRange> out = new ArrayList<>(ranges);
        while (!out.isEmpty() && out.size() < minimum) {
            OffsetRange widest = out.get(0);
            for (OffsetRange r : out) if (r.end - r.start > widest.end - widest.start) widest = r;
            if (widest.end - widest.start < 2) break;
            long mid = widest.start + (widest.end - widest.start) / 2;
            int i = out.indexOf(widest);
            out.set(i, new OffsetRange(widest.topic, widest.partition, widest.directory, widest.start, mid,
                    overlapping(widest.aborted, widest.start, mid)));
            out.add(i + 1, new OffsetRange(widest.topic, widest.partition, widest.directory, mid, widest.end,
                    overlapping(widest.aborted, mid, widest.end)));
        }
        return out;
    }
}
