package kafkalog.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsReportPartitioning;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.Partitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * `format("kafkalog")` on the JVM: a log directory as a table with the schema of Spark's Kafka source, read in
 * batches (KafkalogTable.Reading: filters pushed down, only the columns the query uses), as a micro-batch stream (KafkalogStream) and written (KafkalogWrite), with the
 * options, errors and results of the Python source in engine.spark. Found by Spark through
 * META-INF/services/org.apache.spark.sql.sources.DataSourceRegister in kafkalog-spark.jar.
 * Stateless; Spark builds one table per query.
 */
public final class KafkalogTable implements SupportsRead, SupportsWrite {
    private final StructType schema;

    KafkalogTable(StructType schema) {
        this.schema = schema;
    }

    /** The schema of Spark's Kafka source (every field nullable), with headers when asked. */
    static StructType schema(boolean includeHeaders) {
        List<StructField> fields = new ArrayList<>(Arrays.asList(
                DataTypes.createStructField("key", DataTypes.BinaryType, true),
                DataTypes.createStructField("value", DataTypes.BinaryType, true),
                DataTypes.createStructField("topic", DataTypes.StringType, true),
                DataTypes.createStructField("partition", DataTypes.IntegerType, true),
                DataTypes.createStructField("offset", DataTypes.LongType, true),
                DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
                DataTypes.createStructField("timestampType", DataTypes.IntegerType, true)));
        if (includeHeaders) {
            ArrayType headers = DataTypes.createArrayType(DataTypes.createStructType(new StructField[] {
                    DataTypes.createStructField("key", DataTypes.StringType, true),
                    DataTypes.createStructField("value", DataTypes.BinaryType, true)}), true);
            fields.add(DataTypes.createStructField("headers", headers, true));
        }
        return DataTypes.createStructType(fields);
    }

    /** The provider Spark finds by the name `kafkalog`. */
    public static final class Provider implements TableProvider, DataSourceRegister {
        @Override
        public String shortName() {
            return "kafkalog";
        }

        @Override
        public StructType inferSchema(CaseInsensitiveStringMap options) {
            return schema("true".equalsIgnoreCase(options.getOrDefault("includeHeaders", "false")));
        }

        @Override
        public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
            return new KafkalogTable(schema);
        }
    }

    @Override
    public String name() {
        return "kafkalog";
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
                TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA, TableCapability.TRUNCATE);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new Reading(options.asCaseSensitiveMap());
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return new KafkalogWrite.Builder(info);
    }

    /** A batch scan with partition/topic/offset/timestamp filters pushed down, reported as grouped by partition when
     *  each partition is one task (Planner.keyColumns), or a stream. */
    static final class Reading implements ScanBuilder, SupportsPushDownFilters, SupportsPushDownRequiredColumns,
            SupportsReportPartitioning, Scan, Batch {
        private final Map<String, String> raw;
        private final boolean includeHeaders;
        private final List<Filter> pushed = new ArrayList<>();
        private final List<Filter> accepted = new ArrayList<>();
        private Planner planner;
        private List<Planner.OffsetRange> ranges;   // planned once per query: Spark asks for the partitioning first
        private StructType required;   // what the query reads, when Spark pruned the schema

        Reading(Map<String, String> raw) {
            this.raw = raw;
            this.includeHeaders = "true".equalsIgnoreCase(new CaseInsensitiveStringMap(raw).getOrDefault("includeHeaders", "false"));
        }

        @Override
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> left = new ArrayList<>();
            for (Filter f : filters) {
                if (isTimestampFrom(f)) {
                    pushed.add(f);
                    accepted.add(f);
                    left.add(f);   // Spark still applies it row by row; the scan only starts later
                } else if (isExact(f)) {
                    pushed.add(f);
                    accepted.add(f);
                } else {
                    left.add(f);
                }
            }
            return left.toArray(new Filter[0]);
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed.toArray(new Filter[0]);
        }

        private static boolean isExact(Filter f) {
            String[] refs = f.references();
            if (refs.length != 1) return false;
            if (refs[0].equals("partition")) {
                return f instanceof EqualTo && ((EqualTo) f).value() instanceof Integer
                        || f instanceof In && Arrays.stream(((In) f).values()).allMatch(v -> v instanceof Integer);
            }
            if (refs[0].equals("topic")) {
                return f instanceof EqualTo && ((EqualTo) f).value() instanceof String
                        || f instanceof In && Arrays.stream(((In) f).values()).allMatch(v -> v instanceof String);
            }
            return refs[0].equals("offset") && offsetBound(f) != null;
        }

        private static boolean isTimestampFrom(Filter f) {
            return timestampFrom(f) != Long.MIN_VALUE;
        }

        /** The value a comparison filter (=, >, >=, <, <=) compares its column with; null for other filters. */
        private static Object compared(Filter f) {
            return f instanceof EqualTo ? ((EqualTo) f).value() : f instanceof GreaterThan ? ((GreaterThan) f).value()
                    : f instanceof GreaterThanOrEqual ? ((GreaterThanOrEqual) f).value() : f instanceof LessThan ? ((LessThan) f).value()
                    : f instanceof LessThanOrEqual ? ((LessThanOrEqual) f).value() : null;
        }

        /** {lo, hi} (one may be null) of an offset comparison with a whole-number value, else null. */
        private static Long[] offsetBound(Filter f) {
            Object v = compared(f);
            if (!(v instanceof Long || v instanceof Integer)) return null;
            long n = ((Number) v).longValue();
            if (n == Long.MAX_VALUE || n == Long.MIN_VALUE) return null;
            if (f instanceof EqualTo) return new Long[] {n, n + 1};
            if (f instanceof GreaterThan) return new Long[] {n + 1, null};
            if (f instanceof GreaterThanOrEqual) return new Long[] {n, null};
            if (f instanceof LessThan) return new Long[] {null, n};
            return new Long[] {null, n + 1};
        }

        /** Epoch ms every row of a `timestamp >=, >, =` filter is at or after; Long.MIN_VALUE for other filters. */
        private static long timestampFrom(Filter f) {
            String[] refs = f.references();
            if (refs.length != 1 || !refs[0].equals("timestamp")) return Long.MIN_VALUE;
            Object v = f instanceof LessThan || f instanceof LessThanOrEqual ? null : compared(f);
            if (v instanceof java.sql.Timestamp) return ((java.sql.Timestamp) v).getTime();   // whole ms, rounded down
            if (v instanceof java.time.Instant) return ((java.time.Instant) v).toEpochMilli();
            return Long.MIN_VALUE;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public StructType readSchema() {
            if (required == null) return schema(includeHeaders);
            List<StructField> kept = new ArrayList<>();
            for (StructField f : schema(includeHeaders).fields()) {
                if (Arrays.asList(required.fieldNames()).contains(f.name())) kept.add(f);
            }
            return DataTypes.createStructType(kept);
        }

        @Override
        public String description() {
            return "kafkalog " + raw.getOrDefault("path", "") + " (JVM)";
        }

        @Override
        public ColumnarSupportMode columnarSupportMode() {
            return ColumnarSupportMode.SUPPORTED;
        }

        private Planner planner() {
            if (planner == null) {
                planner = new Planner(new Options(raw, false));
                for (Filter f : accepted) apply(planner, f);
            }
            return planner;
        }

        private static void apply(Planner p, Filter f) {
            long from = timestampFrom(f);
            if (from != Long.MIN_VALUE) {
                p.timestampFromMs = Math.max(p.timestampFromMs, from);
                return;
            }
            String column = f.references()[0];
            if (column.equals("offset")) {
                Long[] b = offsetBound(f);
                if (b[0] != null) p.offsetLo = Math.max(p.offsetLo, b[0]);
                if (b[1] != null) p.offsetHi = Math.min(p.offsetHi, b[1]);
                return;
            }
            Object[] values = f instanceof EqualTo ? new Object[] {((EqualTo) f).value()} : ((In) f).values();
            if (column.equals("partition")) {
                Set<Integer> s = new HashSet<>();
                for (Object v : values) s.add((Integer) v);
                if (p.partitionFilter != null) s.retainAll(p.partitionFilter);
                p.partitionFilter = s;
            } else {
                Set<String> s = new HashSet<>();
                for (Object v : values) s.add((String) v);
                if (p.topicFilter != null) s.retainAll(p.topicFilter);
                p.topicFilter = s;
            }
        }

        @Override
        public Batch toBatch() {
            planner();
            return this;
        }

        private List<Planner.OffsetRange> ranges() {
            if (ranges == null) ranges = planner().plan();
            return ranges;
        }

        @Override
        public Partitioning outputPartitioning() {
            String[] keys = Planner.keyColumns(ranges());
            if (keys == null) return new UnknownPartitioning(ranges().size());
            Expression[] columns = Arrays.stream(keys).map(Expressions::identity).toArray(Expression[]::new);
            return new KeyGroupedPartitioning(columns, ranges().size());
        }

        @Override
        public InputPartition[] planInputPartitions() {
            return ranges().toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ColumnarReader.Factory(planner().options, readSchema());
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new KafkalogStream(new Planner(new Options(raw, true)), readSchema());
        }
    }
}
