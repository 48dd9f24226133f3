package kafkalog.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * `write.format("kafkalog")` / `writeStream.format("kafkalog")` on the JVM, with the columns, options, errors and
 * exactly-once commit of engine.spark.sink. Tasks encode their rows as Kafka batches (StagedBatches: partitions
 * chosen by Kafka's partitioner over the topics' partition counts, read from the catalogue as the write is planned)
 * into a file of the attempt's under `<path>/.kafkalog-staging/<job>/`; a failed attempt removes its file. The
 * driver's commit hands the committed attempts' files to kafkalog's Python engine (`python -m engine.tools.staged_commit`,
 * the interpreter Spark's Python uses, started as the tasks are planned: CommitProcess), which appends their batches in one transaction, each with the transaction's
 * producer id, epoch and sequences (or asks the process that has the directory open to), as the Python sink's commit
 * does.
 * Thread-safety: a DataWriter belongs to its task; commits come one at a time from the driver.
 */
final class KafkalogWrite {
    static final Set<String> OPTIONS = new HashSet<>(Arrays.asList(
            "path", "topic", "transactionalid", "sinkid", "checkpointlocation", "committimeoutms"));
    static final DataType HEADERS = KafkalogTable.schema(true).apply("headers").dataType();

    /** The validated options and input columns of one write. */
    static final class Settings implements Serializable {
        private static final long serialVersionUID = 1L;
        final String path;
        final String topic;
        final String transactionalId;
        final String sinkId;
        final long commitTimeoutMs;
        final int value, key, topicColumn, partition, headers, timestamp;   // input ordinals, -1 when absent
        final boolean valueIsString, keyIsString;

        Settings(Map<String, String> raw, StructType input) {
            Map<String, String> o = new java.util.TreeMap<>();
            raw.forEach((k, v) -> o.put(k.toLowerCase(Locale.ROOT), v));
            for (String k : o.keySet()) {
                if (!OPTIONS.contains(k)) {
                    throw KafkalogError.badWrite("option '" + k + "'", "is unknown (known: path, topic, transactionalId, sinkId, commitTimeoutMs)");
                }
            }
            path = o.get("path");
            if (path == null || path.isEmpty()) throw KafkalogError.badWrite("option 'path'", "is required: .option('path', dir) or .save(dir)");
            topic = o.get("topic");
            try {
                commitTimeoutMs = Long.parseLong(o.getOrDefault("committimeoutms", "120000"));
            } catch (NumberFormatException e) {
                throw KafkalogError.badWrite("option 'commitTimeoutMs'", "must be an integer, got '" + o.get("committimeoutms") + "'");
            }
            transactionalId = o.getOrDefault("transactionalid", "kafkalog-spark-" + (topic == null ? "sink" : topic));
            String checkpoint = o.get("checkpointlocation");
            String sink = o.get("sinkid");
            sinkId = sink != null && !sink.isEmpty() ? sink : checkpoint != null ? "kafkalog-spark-sink-" + sha1(checkpoint).substring(0, 16) : "kafkalog-spark-sink";
            value = ordinal(input, "value", DataTypes.BinaryType, DataTypes.StringType);
            if (value < 0) throw KafkalogError.badWrite("column 'value'", "is required (binary or string)");
            key = ordinal(input, "key", DataTypes.BinaryType, DataTypes.StringType);
            topicColumn = ordinal(input, "topic", DataTypes.StringType);
            partition = ordinal(input, "partition", DataTypes.IntegerType);
            timestamp = ordinal(input, "timestamp", DataTypes.TimestampType, DataTypes.TimestampNTZType);
            headers = ordinal(input, "headers", HEADERS);
            valueIsString = input.fields()[value].dataType() == DataTypes.StringType;
            keyIsString = key >= 0 && input.fields()[key].dataType() == DataTypes.StringType;
            if (topic == null && topicColumn < 0) throw KafkalogError.badWrite("column 'topic'", "is required unless the 'topic' option names the topic");
        }

        private static int ordinal(StructType input, String name, DataType... types) {
            String[] names = input.fieldNames();
            for (int i = 0; i < names.length; i++) {
                if (!names[i].equals(name)) continue;
                DataType t = input.fields()[i].dataType();
                for (DataType ok : types) if (ok.sameType(t)) return i;
                String want = types.length == 1 && name.equals("headers") ? "array<struct<key:string,value:binary>>"
                        : String.join(" or ", Arrays.stream(types).map(DataType::typeName).toArray(String[]::new));
                throw KafkalogError.badWrite("column '" + name + "'", "must be " + want + ", got " + t.simpleString());
            }
            return -1;
        }

        private static String sha1(String s) {
            try {
                StringBuilder hex = new StringBuilder();
                for (byte b : MessageDigest.getInstance("SHA-1").digest(s.getBytes(StandardCharsets.UTF_8))) hex.append(String.format("%02x", b));
                return hex.toString();
            } catch (java.security.NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }

        File staging(String job) {
            return new File(new File(path, ".kafkalog-staging"), job);
        }
    }

    /** What one task attempt staged: its file (null when it had no rows) and its row count. */
    static final class Staged implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final String file;
        final long rows;

        Staged(String file, long rows) {
            this.file = file;
            this.rows = rows;
        }
    }

    static final class Builder implements WriteBuilder, SupportsTruncate {
        private final LogicalWriteInfo info;

        Builder(LogicalWriteInfo info) {
            this.info = info;
        }

        @Override
        public WriteBuilder truncate() {
            throw KafkalogError.badWrite("mode", "must be 'append': a log is only ever appended to");
        }

        @Override
        public Write build() {
            Settings settings = new Settings(info.options().asCaseSensitiveMap(), info.schema());
            String job = UUID.randomUUID().toString().replace("-", "");
            return new Write() {
                @Override
                public BatchWrite toBatch() {
                    return new Committer(settings, job);
                }

                @Override
                public StreamingWrite toStreaming() {
                    return new Committer(settings, job);
                }
            };
        }
    }

    /** The driver's side of a write: a batch job, or a stream's micro-batches (each its own job, by epoch). */
    static final class Committer implements BatchWrite, StreamingWrite {
        private final Settings settings;
        private final String job;
        private CommitProcess next;   // started with the tasks of the job (or micro-batch) Spark plans now

        Committer(Settings settings, String job) {
            this.settings = settings;
            this.job = job;
        }

        private synchronized Factory plan() {
            Factory factory = new Factory(settings, job);   // (refuses an unknown topic before anything starts)
            if (next != null) next.discard();
            next = new CommitProcess(settings);
            return factory;
        }

        /** The process started for the job Spark now commits or aborts (null: none was started). */
        private synchronized CommitProcess take() {
            CommitProcess cp = next;
            next = null;
            return cp;
        }

        private void commit(String name, WriterCommitMessage[] messages, Long batchId) {
            CommitProcess cp = take();
            KafkalogWrite.commit(settings, cp != null ? cp : new CommitProcess(settings), name, messages, batchId);
        }

        private void abort(String name, WriterCommitMessage[] messages) {
            CommitProcess cp = take();
            if (cp != null) cp.discard();
            discard(settings, name, messages);
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return plan();
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return plan();
        }

        @Override
        public boolean useCommitCoordinator() {
            return true;
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            commit(job, messages, null);
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            abort(job, messages);
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            commit(job + "-" + epochId, messages, epochId);
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            abort(job + "-" + epochId, messages);
        }
    }

    static final class Factory implements DataWriterFactory, StreamingDataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final Settings settings;
        private final String job;
        private final Catalogue catalogue;

        Factory(Settings settings, String job) {
            this.settings = settings;
            this.job = job;
            this.catalogue = Catalogue.read(settings.path);   // as the write (or micro-batch) is planned
            if (settings.topic != null) catalogue.topic(settings.topic);
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return new StagedBatches(settings, catalogue, settings.staging(job));
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return new StagedBatches(settings, catalogue, settings.staging(job + "-" + epochId));
        }
    }

    private static String request(Settings s, String job, WriterCommitMessage[] messages, Long batchId) {
        ObjectMapper json = new ObjectMapper();
        ObjectNode req = json.createObjectNode();
        req.put("job", job);
        ArrayNode files = req.putArray("files");
        for (WriterCommitMessage m : messages) {
            if (!(m instanceof Staged)) {  // never commit without a task's rows: fail, and Spark aborts the job
                throw KafkalogError.badWrite("commit", "refused: a task answered with "
                        + (m == null ? "nothing" : "a " + m.getClass().getName() + " from another class loader")
                        + " (is kafkalog-spark.jar loaded twice, by ADD JAR? use engine.spark.register or --jars);"
                        + " nothing was written");
            }
            if (((Staged) m).file != null) files.add(((Staged) m).file);
        }
        req.put("transactional_id", s.transactionalId);
        req.put("sink_id", s.sinkId);
        if (batchId == null) req.putNull("batch_id"); else req.put("batch_id", batchId);
        return req.toString();
    }

    /** Spark gave up the job (or micro-batch): its staged files go, and the staging root once nothing is left. */
    static void discard(Settings s, String job, WriterCommitMessage[] messages) {
        for (WriterCommitMessage m : messages) {
            if (m instanceof Staged && ((Staged) m).file != null) new File(((Staged) m).file).delete();
        }
        File dir = s.staging(job);
        File[] left = dir.listFiles();
        if (left != null) for (File f : left) f.delete();
        dir.delete();
        // then the requests folder and the staging root, each only once it is empty (a delete of a folder that is
        // not fails); a writer staging meanwhile makes its folders again
        File root = dir.getParentFile();
        if (new File(root, "requests").delete() || !new File(root, "requests").exists()) root.delete();
    }

    /**
     * The process that will commit a job: `python -m engine.tools.staged_commit`, started as the job's tasks are planned so
     * that its interpreter and kafkalog are loaded while they run; it waits for the request on its stdin. Its stderr
     * goes to a file, not a pipe read to its end: the wait in commit() is what bounds the commit.
     */
    static final class CommitProcess {
        final String python;
        final File err;
        final Process process;
        final IOException failed;   // the start failed: commit() reports it

        CommitProcess(Settings s) {
            String py = SparkEnv.get() == null ? null : SparkEnv.get().conf().get("spark.pyspark.python", null);
            if (py == null) py = System.getenv("PYSPARK_PYTHON");
            python = py == null ? "python3" : py;
            File e = null;
            Process p = null;
            IOException f = null;
            try {
                e = File.createTempFile("kafkalog-commit-", ".err");
                p = new ProcessBuilder(python, "-m", "engine.tools.staged_commit", s.path, Long.toString(s.commitTimeoutMs))
                        .redirectError(e).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            } catch (IOException x) {
                f = x;
            }
            err = e;
            process = p;
            failed = f;
        }

        /** The job went no further: the process ends (an empty request) and its file goes. */
        void discard() {
            if (process != null) process.destroy();
            if (err != null) err.delete();
        }
    }

    /** The driver's side: kafkalog's Python engine, in `cp`, applies the committed attempts' files in one transaction. */
    static void commit(Settings s, CommitProcess cp, String job, WriterCommitMessage[] messages, Long batchId) {
        try {
            if (cp.failed != null) throw cp.failed;
            String req = request(s, job, messages, batchId);
            Process p = cp.process;
            try (java.io.OutputStream in = p.getOutputStream()) {
                in.write(req.getBytes(StandardCharsets.UTF_8));
            }
            // the child answers within its timeout and a second (engine.tools.staged_commit); a minute more to start
            if (!p.waitFor(s.commitTimeoutMs + 60_000, TimeUnit.MILLISECONDS)) {
                p.destroyForcibly();
                throw KafkalogError.storage("the commit did not finish in " + s.commitTimeoutMs + " ms", s.path, null);
            }
            if (p.exitValue() != 0) {
                String[] lines = new String(java.nio.file.Files.readAllBytes(cp.err.toPath()), StandardCharsets.UTF_8)
                        .trim().split("\n");
                String last = lines[lines.length - 1];
                throw KafkalogError.badWrite("commit", "failed (" + cp.python + " -m engine.tools.staged_commit): " + last);
            }
        } catch (IOException e) {
            throw KafkalogError.storage("cannot run " + cp.python + " -m engine.tools.staged_commit (kafkalog's Python engine "
                    + "applies the staged rows; set spark.pyspark.python to the Python that has kafkalog installed): " + e,
                    s.path, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw KafkalogError.storage("interrupted while committing", s.path, e);
        } finally {
            cp.discard();
        }
    }
}
