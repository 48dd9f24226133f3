package kafkalog.spark;

import java.io.File;
import java.util.HashSet;
import java.util.Iterator;
import java.util.PriorityQueue;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A task's read of one offset range into Spark's column vectors (no object per row): whole batches from the
 * segments (PartitionLog), each CRC-checked and inflated, records parsed straight into the vectors (keys and values
 * dictionary-encoded while they repeat: BinaryColumn), topic and partition as constant vectors, only the columns the
 * query reads (Spark prunes the rest). Control batches are never rows; at read_committed a batch of a producer whose
 * aborted transaction the range overlaps is skipped until that producer's ABORT marker (Kafka's consumer rule,
 * as engine.log.read_committed.AbortedFilter applies it). Offset gaps (compaction, markers) are not data loss.
 * Not thread-safe: Spark calls a reader from its task's thread.
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;

    /** The executors' factory: the read options a task needs, serialized with the plan. */
    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        final boolean includeHeaders;
        final boolean readCommitted;
        final long maxDecompressedBytes;
        final StructType readSchema;   // the columns the query reads (Spark prunes the others)

        Factory(Options o, StructType readSchema) {
            includeHeaders = o.includeHeaders;
            readCommitted = o.readCommitted;
            maxDecompressedBytes = o.maxDecompressedBytes;
            this.readSchema = readSchema;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("kafkalog reads columnar batches only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new ColumnarReader((Planner.OffsetRange) partition, this);
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }
    }

    private final Planner.OffsetRange range;
    private final Factory settings;
    private final BinaryColumn key, value;
    private final WritableColumnVector offset, timestamp, timestampType, headers;
    private final ColumnarBatch batch;
    private final Iterator<PartitionLog.Segment> segments;
    private PartitionLog.Segment.Walker walker;
    private final RecordCursor cursor = new RecordCursor();
    private boolean inBatch;
    private boolean done;
    private boolean logAppendTime;
    private final PriorityQueue<PartitionLog.Aborted> pending =
            new PriorityQueue<>((a, b) -> Long.compare(a.firstOffset, b.firstOffset));
    private final Set<Long> abortedProducers = new HashSet<>();
    private final int[] header = new int[4];

    ColumnarReader(Planner.OffsetRange range, Factory settings) {
        this.range = range;
        this.settings = settings;
        StructType schema = settings.readSchema;
        key = binary(vector(schema, "key"));
        value = binary(vector(schema, "value"));
        offset = vector(schema, "offset");
        timestamp = vector(schema, "timestamp");
        timestampType = vector(schema, "timestampType");
        headers = vector(schema, "headers");
        ColumnVector[] columns = new ColumnVector[schema.size()];
        for (int i = 0; i < columns.length; i++) {
            String name = schema.fields()[i].name();
            if (name.equals("topic")) {
                ConstantColumnVector topic = new ConstantColumnVector(ROWS, DataTypes.StringType);
                topic.setUtf8String(UTF8String.fromString(range.topic));
                columns[i] = topic;
            } else if (name.equals("partition")) {
                ConstantColumnVector partition = new ConstantColumnVector(ROWS, DataTypes.IntegerType);
                partition.setInt(range.partition);
                columns[i] = partition;
            } else {
                columns[i] = name.equals("key") ? key.vector : name.equals("value") ? value.vector
                        : name.equals("offset") ? offset
                        : name.equals("timestamp") ? timestamp : name.equals("timestampType") ? timestampType : headers;
            }
        }
        batch = new ColumnarBatch(columns);
        for (PartitionLog.Aborted a : range.aborted) pending.add(a);
        if (range.start >= range.end) {
            segments = java.util.Collections.emptyIterator();
            done = true;
        } else {
            PartitionLog log = new PartitionLog(range.topic, range.partition, new File(range.directory), null, null);
            segments = log.from(range.start).iterator();
        }
    }

    private static BinaryColumn binary(WritableColumnVector vector) {
        return vector == null ? null : new BinaryColumn(vector);
    }

    /** A vector for `name` when the query reads that column, else null (nothing is put there). */
    private static WritableColumnVector vector(StructType schema, String name) {
        for (StructField f : schema.fields()) {
            if (f.name().equals(name)) return new OnHeapColumnVector(ROWS, f.dataType());
        }
        return null;
    }

    @Override
    public boolean next() {
        if (done) return false;
        for (WritableColumnVector v : new WritableColumnVector[] {offset, timestamp, timestampType, headers}) {
            if (v != null) v.reset();
        }
        for (BinaryColumn c : new BinaryColumn[] {key, value}) {
            if (c != null) c.reset();
        }
        int rows = 0;
        while (rows < ROWS) {
            if (!inBatch || !cursor.hasNext()) {
                inBatch = nextBatch();
                if (!inBatch) break;
                continue;
            }
            cursor.next();
            long off = cursor.offset;
            if (off < range.start) continue;
            if (off >= range.end) {
                done = true;
                break;
            }
            put(rows++);
        }
        for (BinaryColumn c : new BinaryColumn[] {key, value}) {
            if (c != null) c.finish();
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    private void put(int row) {
        byte[] d = cursor.data;
        if (key != null) {
            if (cursor.keyLength < 0) key.putNull(row); else key.put(row, d, cursor.keyStart, cursor.keyLength);
        }
        if (value != null) {
            if (cursor.valueLength < 0) value.putNull(row);
            else value.put(row, d, cursor.valueStart, cursor.valueLength);
        }
        if (offset != null) offset.putLong(row, cursor.offset);
        if (timestamp != null) timestamp.putLong(row, cursor.timestamp * 1000);
        if (timestampType != null) timestampType.putInt(row, logAppendTime ? 1 : 0);
        if (headers == null) return;
        if (cursor.headerCount == 0) {
            headers.putNull(row);
            return;
        }
        WritableColumnVector elements = headers.arrayData();
        int first = elements.getElementsAppended();
        int pos = cursor.headersStart;
        for (int h = 0; h < cursor.headerCount; h++) {
            pos = cursor.header(pos, header);
            elements.appendStruct(false);
            elements.getChild(0).appendByteArray(d, header[0], header[1]);
            if (header[3] < 0) elements.getChild(1).appendNull();
            else elements.getChild(1).appendByteArray(d, header[2], header[3]);
        }
        headers.putArray(row, first, cursor.headerCount);
    }

    /** Move to the next batch holding rows of the range; false at its end. */
    private boolean nextBatch() {
        while (true) {
            if (walker == null) {
                if (!segments.hasNext()) return finish();
                PartitionLog.Segment seg = segments.next();
                if (seg.base >= range.end) return finish();
                walker = seg.walker(seg.locate(range.start), Planner.CHUNK_BYTES);
            }
            if (!walker.next()) {
                walker.close();
                walker = null;
                continue;
            }
            RecordBatch b = walker.batch;
            if (b.lastOffset() < range.start) continue;
            if (b.baseOffset() >= range.end) return finish();
            if (settings.readCommitted && !visible(b)) continue;
            if (b.isControl()) continue;
            b.checkCrc();
            cursor.reset(b, settings.maxDecompressedBytes);
            logAppendTime = b.logAppendTime();
            return true;
        }
    }

    /** Whether a read_committed reader returns `b`'s records. */
    private boolean visible(RecordBatch b) {
        long pid = b.producerId();
        if (pid >= 0) {
            while (!pending.isEmpty() && pending.peek().firstOffset <= b.lastOffset()) abortedProducers.add(pending.poll().producerId);
        }
        if (b.isControl()) {
            if (abortedProducers.contains(pid)) {
                b.checkCrc();
                if (b.controlType() == RecordBatch.ABORT) abortedProducers.remove(pid);
            }
            return false;
        }
        return !(b.isTransactional() && abortedProducers.contains(pid));
    }

    private boolean finish() {
        done = true;
        if (walker != null) walker.close();
        walker = null;
        return false;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        finish();
        batch.close();
    }
}
