package kafkalog.spark;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A read-only view of one partition directory, the JVM twin of engine.segments.partition_reader: it takes no lock,
 * runs no recovery and never writes, so it reads a directory an engine or a Kafka broker has open.
 * Files: `<base, 20 digits>.log` segments (`.deleted`/`.cleaned`/`.swap` leftovers ignored); `.index` entries of
 * 8 bytes (relative offset int32, position int32) and `.timeindex` entries of 12 (timestamp int64, relative offset
 * int32), big-endian, where a preallocated active index ends in zeros (only the leading entries count); the log
 * directory's `log-start-offset-checkpoint` and `replication-offset-checkpoint` (CheckpointFile: empty while a broker
 * starts) give the log start offset and the high watermark (without one: the log end).
 * Crash policy: a partial batch at the tail of the last segment is a write in progress and is not read; a partial
 * batch elsewhere, a batch that does not follow its predecessor, or a bad CRC is CorruptRecordError naming the file,
 * position and offset. An index entry that does not match its batch makes the walk scan the segment instead.
 * Files are read with positional reads, never mapped (a writer may truncate them under us).
 * Thread-safety: one per thread (planning builds its own; each task opens the segments it reads).
 */
final class PartitionLog {
    static final String LOG_START_CHECKPOINT = "log-start-offset-checkpoint";
    static final String HW_CHECKPOINT = "replication-offset-checkpoint";

    final String topic;
    final int partition;
    final File dir;
    final Segment[] segments;
    final long logStartOffset;
    private final Long hwCheckpoint;
    private long logEnd = -1;

    PartitionLog(String topic, int partition, File dir, Long logStartCheckpoint, Long hwCheckpoint) {
        this.topic = topic;
        this.partition = partition;
        this.dir = dir;
        List<Long> bases = new ArrayList<>();
        String[] names = dir.list();
        if (names == null) throw KafkalogError.storage("cannot list the partition directory", dir.getPath(), null);
        for (String n : names) {
            if (n.length() == 24 && n.endsWith(".log") && n.substring(0, 20).chars().allMatch(Character::isDigit)) {
                bases.add(Long.parseLong(n.substring(0, 20)));
            }
        }
        bases.sort(null);
        segments = new Segment[bases.size()];
        for (int i = 0; i < segments.length; i++) {
            long next = i + 1 < segments.length ? bases.get(i + 1) : -1;
            segments[i] = new Segment(dir, bases.get(i), next);
        }
        long first = segments.length > 0 ? segments[0].base : 0;
        this.logStartOffset = Math.max(first, logStartCheckpoint == null ? 0 : logStartCheckpoint);
        this.hwCheckpoint = hwCheckpoint;
    }

    /** {log start offsets, high watermarks} of a log directory's checkpoint files, by "topic-partition". */
    static List<Map<String, Long>> checkpoints(File logDir) {
        List<Map<String, Long>> out = new ArrayList<>();
        for (String name : new String[] {LOG_START_CHECKPOINT, HW_CHECKPOINT}) {
            Map<String, Long> found = CheckpointFile.offsets(new File(logDir, name));
            out.add(found == null ? new HashMap<>() : found);
        }
        return out;
    }

    long logEndOffset() {
        if (logEnd < 0) logEnd = segments.length == 0 ? logStartOffset : segments[segments.length - 1].nextOffset();
        return logEnd;
    }

    long highWatermark() {
        long hw = hwCheckpoint == null ? logEndOffset() : hwCheckpoint;
        return Math.max(logStartOffset, Math.min(hw, logEndOffset()));
    }

    /** The segments holding offsets from `offset` on (the one containing it first). */
    List<Segment> from(long offset) {
        int i = segments.length - 1;
        while (i > 0 && segments[i].base > offset) i--;
        return Arrays.asList(segments).subList(Math.max(i, 0), segments.length);
    }

    /** What a read_committed reader sees, from one pass over the batch headers up to the high watermark. */
    Committed committed(int chunkBytes) {
        long start = logStartOffset;
        long hw = highWatermark();
        Map<Long, Long> open = new HashMap<>();
        List<Aborted> aborted = new ArrayList<>();
        for (Segment seg : from(start)) {
            if (seg.base >= hw) break;
            Segment.Walker w = seg.walker(seg.locate(start), chunkBytes);
            while (w.next()) {
                RecordBatch b = w.batch;
                if (b.baseOffset() >= hw) break;
                long pid = b.producerId();
                if (b.lastOffset() < start || pid < 0 || !b.isTransactional()) continue;
                if (b.isControl()) {
                    b.checkCrc();
                    Long first = open.remove(pid);
                    if (first != null && b.controlType() == RecordBatch.ABORT) aborted.add(new Aborted(pid, first, b.baseOffset()));
                } else {
                    open.putIfAbsent(pid, b.baseOffset());
                }
            }
        }
        long unstable = open.values().stream().mapToLong(Long::longValue).min().orElse(hw);
        return new Committed(Math.max(start, Math.min(unstable, hw)), aborted);
    }

    /** {timestamp, offset} of the first record at or after the log start whose timestamp is >= `ts`; null if none. */
    long[] offsetForTimestamp(long ts, int chunkBytes) {
        RecordCursor records = new RecordCursor();
        for (Segment seg : from(logStartOffset)) {
            long indexed = seg.timeIndexLookup(ts);
            long position = seg.indexLookup(Math.max(indexed, logStartOffset))[1];
            Segment.Walker w = seg.walker(new long[] {position, seg.base - 1}, chunkBytes);
            while (w.next()) {
                RecordBatch b = w.batch;
                if (b.isControl() || b.maxTimestamp() < ts || b.lastOffset() < logStartOffset) continue;
                b.checkCrc();
                records.reset(b, 128L << 20);   // the default maxDecompressedBytes, as the Python reader's lookup
                while (records.hasNext()) {
                    records.next();
                    if (records.offset >= logStartOffset && records.timestamp >= ts) {
                        return new long[] {records.timestamp, records.offset};
                    }
                }
            }
        }
        return null;
    }

    /** {first offset, end offset, bytes} of each segment's share of [start, end), from the indexes. */
    List<long[]> bytesBetween(long start, long end) {
        List<long[]> out = new ArrayList<>();
        for (int i = 0; i < segments.length; i++) {
            Segment seg = segments[i];
            long next = i + 1 < segments.length ? segments[i + 1].base : logEndOffset();
            long lo = Math.max(start, seg.base);
            long hi = Math.min(end, next);
            if (lo >= hi) continue;
            long first = seg.indexLookup(lo)[1];
            long last = hi < next ? seg.indexLookup(hi)[1] : seg.size();
            out.add(new long[] {lo, hi, Math.max(last - first, 1)});
        }
        return out;
    }

    /** A transaction a read_committed reader skips: its producer, first offset and ABORT marker's offset. */
    static final class Aborted implements Serializable {
        private static final long serialVersionUID = 1L;
        final long producerId;
        final long firstOffset;
        final long lastOffset;

        Aborted(long producerId, long firstOffset, long lastOffset) {
            this.producerId = producerId;
            this.firstOffset = firstOffset;
            this.lastOffset = lastOffset;
        }
    }

    static final class Committed {
        final long lastStableOffset;
        final List<Aborted> aborted;

        Committed(long lastStableOffset, List<Aborted> aborted) {
            this.lastStableOffset = lastStableOffset;
            this.aborted = aborted;
        }
    }

    /** One `.log` file with its `.index` and `.timeindex`. */
    static final class Segment {
        final long base;
        final long nextBase;   // the next segment's base offset, -1 for the last segment
        final File log;
        private final File dir;
        private byte[] index;
        private int indexEntries = -1;
        private long size = -1;

        Segment(File dir, long base, long nextBase) {
            this.dir = dir;
            this.base = base;
            this.nextBase = nextBase;
            this.log = new File(dir, String.format("%020d.log", base));
        }

        long size() {
            if (size < 0) size = log.length();
            return size;
        }

        private static byte[] readAll(File f) {
            try {
                return Files.readAllBytes(f.toPath());
            } catch (NoSuchFileException e) {
                return new byte[0];   // no index: the walk starts at the segment's start
            } catch (IOException e) {
                throw KafkalogError.readFailed(f.getPath(), e);
            }
        }

        /** Entries in use: a preallocated index ends in zeros, and only entry 0 may have relative offset 0. */
        private static int entries(byte[] data, int width, int relAt) {
            int lo = 0, hi = data.length / width;   // entries [0, lo) are in use, [hi, ...) are not
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                boolean used = mid == 0 ? !allZero(data, 0, width) : RecordBatch.getInt(data, mid * width + relAt) > 0;
                if (used) lo = mid + 1; else hi = mid;
            }
            return lo;
        }

        private static boolean allZero(byte[] data, int from, int n) {
            for (int i = from; i < from + n; i++) if (data[i] != 0) return false;
            return true;
        }

        /** {offset, position} of the last offset-index entry at or below `offset`; {base, 0} if none. */
        long[] indexLookup(long offset) {
            if (indexEntries < 0) {
                index = readAll(new File(dir, String.format("%020d.index", base)));
                indexEntries = index.length >= 8 ? Math.max(1, entries(index, 8, 0)) : 0;
            }
            int lo = 0, hi = indexEntries - 1, found = -1;
            while (lo <= hi) {
                int mid = (lo + hi) >>> 1;
                if (base + RecordBatch.getInt(index, mid * 8) <= offset) { found = mid; lo = mid + 1; } else hi = mid - 1;
            }
            if (found < 0) return new long[] {base, 0};
            return new long[] {base + RecordBatch.getInt(index, found * 8), RecordBatch.getInt(index, found * 8 + 4) & 0xFFFFFFFFL};
        }

        /** The offset of the last time-index entry whose timestamp is <= `ts` (the base offset if none). */
        long timeIndexLookup(long ts) {
            byte[] t = readAll(new File(dir, String.format("%020d.timeindex", base)));
            int n = entries(t, 12, 8);
            int lo = 0, hi = n - 1;
            long found = base;
            while (lo <= hi) {
                int mid = (lo + hi) >>> 1;
                if (RecordBatch.getLong(t, mid * 12) <= ts) { found = base + RecordBatch.getInt(t, mid * 12 + 8); lo = mid + 1; } else hi = mid - 1;
            }
            return found;
        }

        /** {position, last offset before it} of the batch where a walk to `offset` starts, from the index when its
         *  entry matches the batch it points at, else from the segment's start. */
        long[] locate(long offset) {
            long[] entry = indexLookup(offset);
            if (entry[1] > 0) {
                Walker w = walker(new long[] {entry[1], -1}, RecordBatch.HEADER);
                try {
                    if (w.next() && w.batch.lastOffset() == entry[0]) return new long[] {entry[1], w.batch.baseOffset() - 1};
                } catch (KafkalogError notABatch) {
                    // the entry points into the middle of a batch: scan instead
                } finally {
                    w.close();
                }
            }
            return new long[] {0, base - 1};
        }

        /** One past the last offset of the last whole batch (the base offset when there is none). */
        long nextOffset() {
            Walker w = walker(new long[] {indexLookup(Long.MAX_VALUE)[1], -1}, 1 << 20);
            long next = base;
            while (w.next()) next = w.batch.lastOffset() + 1;
            return next;
        }

        Walker walker(long[] from, int chunkBytes) {
            return new Walker(this, from[0], from[1], chunkBytes);
        }

        /** Whole batches from a position on, read a window at a time, each checked to follow the one before. */
        static final class Walker {
            final RecordBatch batch = new RecordBatch();
            private final Segment seg;
            private final int chunk;
            private byte[] win = new byte[0];
            private long winStart;
            private int winLen;
            private int i;
            private long prevLast;
            private RandomAccessFile file;

            Walker(Segment seg, long position, long prevLast, int chunkBytes) {
                this.seg = seg;
                this.chunk = chunkBytes;
                this.winStart = position;
                this.prevLast = prevLast;
            }

            boolean next() {
                String path = seg.log.getPath();
                if (!batch.at(win, i, winLen, path, winStart + i)) {
                    long at = winStart + i;
                    long avail = seg.size() - at;
                    if (avail <= 0) return end(at, avail);
                    long n = RecordBatch.entrySize(win, i, winLen);
                    fill(at, (int) Math.min(avail, Math.max(chunk, Math.max(n, RecordBatch.HEADER))));
                    n = RecordBatch.entrySize(win, 0, winLen);
                    if (n > winLen && n <= avail) fill(at, (int) n);
                    if (!batch.at(win, 0, winLen, path, at)) return end(at, avail);
                }
                long first = batch.baseOffset(), last = batch.lastOffset();
                if (first <= prevLast && prevLast >= 0 || last < first || (seg.nextBase >= 0 && last >= seg.nextBase)) {
                    throw batch.corrupt("batch offsets [" + first + ", " + last + "] do not follow offset " + prevLast
                            + (seg.nextBase >= 0 ? " and end below " + seg.nextBase : ""));
                }
                prevLast = last;
                i += batch.size;
                return true;
            }

            /** The end of the segment, or a partial batch: a write in progress at the log's tail, corruption before. */
            private boolean end(long at, long avail) {
                close();
                if (avail > 0 && seg.nextBase >= 0) {
                    throw KafkalogError.corrupt("a partial batch of " + avail + " bytes before the next segment",
                            seg.log.getPath(), at, prevLast + 1);
                }
                return false;
            }

            private void fill(long at, int length) {
                if (win.length < length) win = new byte[length];
                try {
                    if (file == null) file = new RandomAccessFile(seg.log, "r");
                    FileChannel ch = file.getChannel();
                    ByteBuffer bb = ByteBuffer.wrap(win, 0, length);
                    while (bb.hasRemaining()) {
                        if (ch.read(bb, at + bb.position()) < 0) break;
                    }
                    winStart = at;
                    winLen = bb.position();
                    i = 0;
                } catch (IOException e) {
                    throw KafkalogError.readFailed(seg.log.getPath(), e);
                }
            }

            void close() {
                if (file != null) {
                    try { file.close(); } catch (IOException ignored) { /* read-only: nothing to lose */ }
                    file = null;
                }
            }
        }
    }
}
