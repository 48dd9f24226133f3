package kafkalog.spark;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A task attempt's rows, encoded by the task as Kafka batches, in one file `<path>/.kafkalog-staging/<job>/<uuid>
 * .batches` that the driver's commit appends (engine.staged_writes.staged_batches reads it). Byte layout: frames, each
 * the topic's length (int16) and UTF-8 name, the partition (int32), flags (int8; bit 0: the batch's timestamps are
 * the commit's), then one uncompressed RecordBatch v2 as MemoryRecordsBuilder builds it (its size field gives its
 * length). Partitions are chosen here: the row's `partition`, else Kafka's partitioner over the topic's partition
 * count as the write was planned (Catalogue). A partition's batch is written once it reaches the topic's batch limit,
 * and the largest open batches whenever the task's open batches hold more than OPEN_BYTES, so a partition's rows stay
 * in their order across batches. Rows are checked as the engine's producer checks them: a topic the directory does
 * not have, a partition outside the topic, a timestamp before 1970 and a header without a key are typed errors.
 * Crash policy: a failed attempt deletes its file; a killed one leaves a file no commit names (the job's folder goes
 * with its commit or abort).
 * Thread-safety: none; a DataWriter belongs to its task.
 */
final class StagedBatches implements DataWriter<InternalRow> {
    static final long OPEN_BYTES = 32L << 20;
    static final int FIRST_CAPACITY = 4 << 10;
    static final int STAMPED_AT_COMMIT = 1;

    /** A topic's partitioner and its partitions' open batches. */
    private static final class TopicBatches {
        final byte[] name;
        final String topic;
        final int partitions;
        final int limit;
        final BuiltInPartitioner partitioner;
        final MemoryRecordsBuilder[] open;

        TopicBatches(String topic, Catalogue.Topic t) {
            this.topic = topic;
            this.name = topic.getBytes(StandardCharsets.UTF_8);
            this.partitions = t.partitions;
            this.limit = t.batchLimit;
            this.partitioner = new BuiltInPartitioner(t.partitions);
            this.open = new MemoryRecordsBuilder[t.partitions];
        }
    }

    private final KafkalogWrite.Settings s;
    private final Catalogue catalogue;
    private final File directory;
    private final Map<UTF8String, TopicBatches> topics = new HashMap<>();
    private final List<TopicBatches> used = new ArrayList<>();
    private final TopicBatches fixed;
    private byte[][] headerKeys = new byte[4][];
    private byte[][] headerValues = new byte[4][];
    private int[] headerKeyLengths = new int[4];
    private int[] headerValueLengths = new int[4];
    private File file;
    private OutputStream out;
    private long rows;
    private long openBytes;

    StagedBatches(KafkalogWrite.Settings s, Catalogue catalogue, File directory) {
        this.s = s;
        this.catalogue = catalogue;
        this.directory = directory;
        this.fixed = s.topic == null ? null : topicBatches(UTF8String.fromString(s.topic));
    }

    private TopicBatches topicBatches(UTF8String name) {
        TopicBatches t = topics.get(name);
        if (t == null) {
            String topic = name.toString();
            t = new TopicBatches(topic, catalogue.topic(topic));
            topics.put(name.clone(), t);
            used.add(t);
        }
        return t;
    }

    @Override
    public void write(InternalRow row) throws IOException {
        if (out == null) open();
        TopicBatches t = fixed;
        if (t == null) {
            if (row.isNullAt(s.topicColumn)) {
                throw KafkalogError.badWrite("column 'topic'", "holds a null: every row needs a topic");
            }
            t = topicBatches(row.getUTF8String(s.topicColumn));
        }
        byte[] key = s.key < 0 || row.isNullAt(s.key) ? null
                : s.keyIsString ? row.getUTF8String(s.key).getBytes() : row.getBinary(s.key);
        byte[] value = row.isNullAt(s.value) ? null
                : s.valueIsString ? row.getUTF8String(s.value).getBytes() : row.getBinary(s.value);
        int partition;
        if (s.partition >= 0 && !row.isNullAt(s.partition)) {
            partition = row.getInt(s.partition);
            if (partition < 0 || partition >= t.partitions) {
                throw KafkalogError.unknownTopic("partition " + partition + " is not in [0, " + t.partitions
                        + ") for topic '" + t.topic + "'");
            }
        } else {
            partition = key != null ? t.partitioner.forKey(key) : t.partitioner.sticky();
        }
        boolean atCommit = s.timestamp < 0 || row.isNullAt(s.timestamp);
        long timestamp = atCommit ? 0 : Math.floorDiv(row.getLong(s.timestamp), 1000L);
        if (timestamp < 0) {
            throw KafkalogError.invalidTimestamp("a row's timestamp is before 1970 (" + timestamp + " ms): Kafka "
                    + "stores timestamps from 0");
        }
        int headerCount = s.headers < 0 || row.isNullAt(s.headers) ? 0 : headers(row.getArray(s.headers));
        int headersSize = MemoryRecordsBuilder.headersSize(headerKeyLengths, headerValueLengths, headerCount);
        int keyLength = key == null ? -1 : key.length, valueLength = value == null ? -1 : value.length;

        MemoryRecordsBuilder b = t.open[partition];
        if (b == null) {
            b = t.open[partition] = new MemoryRecordsBuilder(FIRST_CAPACITY);
            openBytes += b.capacity();
        }
        if (b.records() > 0 && b.stampedAtCommit != atCommit) seal(t, partition);
        b.stampedAtCommit = atCommit;
        int body = b.bodySize(timestamp, keyLength, valueLength, headerCount, headersSize);
        if (b.records() > 0 && b.sizeInBytes() + MemoryRecordsBuilder.recordSize(body) > t.limit) {
            seal(t, partition);
            t.partitioner.batchFull(partition);
            body = b.bodySize(timestamp, keyLength, valueLength, headerCount, headersSize);
        }
        int before = b.capacity();
        b.append(timestamp, body, key, 0, keyLength, value, 0, valueLength, headerKeys, headerValues, headerCount);
        openBytes += b.capacity() - before;
        rows++;
        if (openBytes > OPEN_BYTES) shed();
    }

    /** A row's headers into headerKeys/headerValues (and their lengths); returns their count. */
    private int headers(ArrayData array) {
        int n = array.numElements();
        if (n > headerKeys.length) {
            int grown = Math.max(n, headerKeys.length * 2);
            headerKeys = new byte[grown][];
            headerValues = new byte[grown][];
            headerKeyLengths = new int[grown];
            headerValueLengths = new int[grown];
        }
        for (int i = 0; i < n; i++) {
            InternalRow h = array.getStruct(i, 2);
            if (h == null || h.isNullAt(0)) {
                throw KafkalogError.invalidRecord("a row has a header without a key: Kafka's header keys are not null",
                        null, -1, -1);
            }
            headerKeys[i] = h.getUTF8String(0).getBytes();
            headerValues[i] = h.isNullAt(1) ? null : h.getBinary(1);
            headerKeyLengths[i] = headerKeys[i].length;
            headerValueLengths[i] = headerValues[i] == null ? -1 : headerValues[i].length;
        }
        return n;
    }

    private void open() throws IOException {
        // the staging root may vanish under mkdirs (the owner removes it once a commit leaves it empty): again
        for (int tries = 0; tries < 3 && !directory.isDirectory(); tries++) directory.mkdirs();
        file = new File(directory, UUID.randomUUID().toString().replace("-", "") + ".batches");
        out = new BufferedOutputStream(new FileOutputStream(file), 1 << 16);
    }

    /** Write the partition's open batch as one frame. */
    private void seal(TopicBatches t, int partition) throws IOException {
        MemoryRecordsBuilder b = t.open[partition];
        if (b == null || b.records() == 0) return;
        out.write(t.name.length >>> 8);
        out.write(t.name.length);
        out.write(t.name);
        out.write(partition >>> 24);
        out.write(partition >>> 16);
        out.write(partition >>> 8);
        out.write(partition);
        out.write(b.stampedAtCommit ? STAMPED_AT_COMMIT : 0);
        int before = b.capacity();
        b.writeTo(out);
        b.shrinkTo(Math.max(FIRST_CAPACITY, t.limit + t.limit / 4));
        openBytes += b.capacity() - before;
    }

    /** Over OPEN_BYTES: the largest open batches written and their buffers given back, down to half of it. */
    private void shed() throws IOException {
        List<long[]> open = new ArrayList<>();   // (size, topic index, partition)
        for (int ti = 0; ti < used.size(); ti++) {
            MemoryRecordsBuilder[] builders = used.get(ti).open;
            for (int p = 0; p < builders.length; p++) {
                if (builders[p] != null) open.add(new long[] {builders[p].capacity(), ti, p});
            }
        }
        open.sort((a, b) -> Long.compare(b[0], a[0]));
        for (long[] o : open) {
            if (openBytes <= OPEN_BYTES / 2) break;
            TopicBatches t = used.get((int) o[1]);
            int p = (int) o[2];
            seal(t, p);
            openBytes -= t.open[p].capacity();
            t.open[p] = null;
        }
    }

    @Override
    public WriterCommitMessage commit() throws IOException {
        if (out == null) return new KafkalogWrite.Staged(null, 0);
        for (TopicBatches t : used) {
            for (int p = 0; p < t.partitions; p++) seal(t, p);
        }
        out.close();
        out = null;
        return new KafkalogWrite.Staged(file.getPath(), rows);
    }

    @Override
    public void abort() {
        close();
        if (file != null) file.delete();   // a failed attempt leaves nothing for the commit to find
    }

    @Override
    public void close() {
        try {
            if (out != null) out.close();
        } catch (IOException ignored) {
            // the attempt is over either way: abort deletes the file, commit already wrote it whole
        } finally {
            out = null;
        }
    }
}
