package kafkalog.spark;

import java.io.IOException;
import java.io.OutputStream;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * One uncompressed RecordBatch v2 built in memory, as Kafka's producer builds one (its MemoryRecordsBuilder), for the
 * sink's tasks. The byte layout is RecordBatch's (kafka-format.md): the 61-byte header, then each record as a varint
 * length, attributes 0, varlong timestamp delta (from the batch's first timestamp), varint offset delta, key and value
 * (varint length, -1 null), varint header count and headers (UTF-8 key, value or -1). The header as built: base
 * offset 0, partition leader epoch -1, create-time timestamps, no producer (id -1, epoch -1, base sequence -1), the
 * CRC-32C of attributes..end. The committing producer sets its producer id, epoch, base sequence and transactional
 * bit and recomputes the CRC; the log assigns the offsets (engine.staged_writes.staged_batches).
 * A batch's records either all carry their own timestamps or all take the commit's (`stampedAtCommit`: written as
 * 0 here, every delta 0, set at commit).
 * Thread-safety: none; each belongs to one task's writer.
 */
final class MemoryRecordsBuilder {
    private byte[] buf;
    private int size = RecordBatch.HEADER;
    private int records;
    private long baseTimestamp, maxTimestamp;
    boolean stampedAtCommit;

    MemoryRecordsBuilder(int capacity) {
        buf = new byte[Math.max(capacity, RecordBatch.HEADER)];
    }

    int records() {
        return records;
    }

    /** The batch's size so far, in bytes, header included. */
    int sizeInBytes() {
        return size;
    }

    /** Bytes held (what this builder costs its task's memory). */
    int capacity() {
        return buf.length;
    }

    static int varintSize(int v) {
        int z = (v << 1) ^ (v >> 31);
        return (31 - Integer.numberOfLeadingZeros(z | 1)) / 7 + 1;
    }

    static int varlongSize(long v) {
        long z = (v << 1) ^ (v >> 63);
        return (63 - Long.numberOfLeadingZeros(z | 1)) / 7 + 1;
    }

    private static int fieldSize(int length) {
        return length < 0 ? 1 : varintSize(length) + length;
    }

    /**
     * The bytes of a record's body (all but its length prefix): lengths -1 for a null key or value; `headersSize` is
     * what headersSize() gave for its headers. `timestamp` is ignored when stamped at commit.
     */
    int bodySize(long timestamp, int keyLength, int valueLength, int headerCount, int headersSize) {
        long delta = records == 0 || stampedAtCommit ? 0 : timestamp - baseTimestamp;
        return 1 + varlongSize(delta) + varintSize(records) + fieldSize(keyLength) + fieldSize(valueLength)
                + varintSize(headerCount) + headersSize;
    }

    /** What a record of this body size adds to the batch. */
    static int recordSize(int bodySize) {
        return varintSize(bodySize) + bodySize;
    }

    /** The bytes of headers whose keys and values have these lengths (-1: a null value). */
    static int headersSize(int[] keyLengths, int[] valueLengths, int count) {
        int n = 0;
        for (int i = 0; i < count; i++) n += fieldSize(keyLengths[i]) + fieldSize(valueLengths[i]);
        return n;
    }

    private void ensure(int more) {
        if (size + more > buf.length) {
            long want = Math.max((long) buf.length * 2, (long) size + more);
            if (want > Integer.MAX_VALUE - 8) throw new IllegalStateException("a batch cannot exceed 2 GiB");
            buf = Arrays.copyOf(buf, (int) want);
        }
    }

    /**
     * Append one record: `bodySize` is what bodySize() gave for it; key and value are the `length` bytes of
     * their arrays from `offset` (length -1: null); header i is keys[i] and values[i] (null value: a null header).
     */
    void append(long timestamp, int bodySize, byte[] key, int keyOffset, int keyLength, byte[] value,
                int valueOffset, int valueLength, byte[][] headerKeys, byte[][] headerValues, int headerCount) {
        if (records == 0) {
            baseTimestamp = maxTimestamp = stampedAtCommit ? 0 : timestamp;
        } else if (!stampedAtCommit && timestamp > maxTimestamp) {
            maxTimestamp = timestamp;
        }
        ensure(recordSize(bodySize));
        size = putVarint(buf, size, bodySize);
        int bodyEnd = size + bodySize;
        buf[size++] = 0;
        size = putVarlong(buf, size, stampedAtCommit ? 0 : timestamp - baseTimestamp);
        size = putVarint(buf, size, records);
        size = putField(buf, size, key, keyOffset, keyLength);
        size = putField(buf, size, value, valueOffset, valueLength);
        size = putVarint(buf, size, headerCount);
        for (int i = 0; i < headerCount; i++) {
            size = putField(buf, size, headerKeys[i], 0, headerKeys[i].length);
            byte[] v = headerValues[i];
            size = putField(buf, size, v, 0, v == null ? -1 : v.length);
        }
        if (size != bodyEnd) throw new IllegalStateException("record body " + bodySize + " was not what was written");
        records++;
    }

    private static int putField(byte[] b, int i, byte[] src, int offset, int length) {
        if (length < 0) return putVarint(b, i, -1);
        i = putVarint(b, i, length);
        System.arraycopy(src, offset, b, i, length);
        return i + length;
    }

    static int putVarint(byte[] b, int i, int v) {
        int z = (v << 1) ^ (v >> 31);
        while ((z & ~0x7F) != 0) {
            b[i++] = (byte) ((z & 0x7F) | 0x80);
            z >>>= 7;
        }
        b[i++] = (byte) z;
        return i;
    }

    static int putVarlong(byte[] b, int i, long v) {
        long z = (v << 1) ^ (v >> 63);
        while ((z & ~0x7FL) != 0) {
            b[i++] = (byte) ((z & 0x7F) | 0x80);
            z >>>= 7;
        }
        b[i++] = (byte) z;
        return i;
    }

    private static void putInt(byte[] b, int i, int v) {
        b[i] = (byte) (v >>> 24);
        b[i + 1] = (byte) (v >>> 16);
        b[i + 2] = (byte) (v >>> 8);
        b[i + 3] = (byte) v;
    }

    private static void putLong(byte[] b, int i, long v) {
        putInt(b, i, (int) (v >>> 32));
        putInt(b, i + 4, (int) v);
    }

    /** Write the header (CRC included) and the batch to `out`, then start an empty batch in the same buffer. */
    void writeTo(OutputStream out) throws IOException {
        putLong(buf, 0, 0L);                          // base offset: the log assigns it
        putInt(buf, 8, size - RecordBatch.LOG_OVERHEAD);
        putInt(buf, 12, -1);                          // partition leader epoch: the log's
        buf[16] = 2;                                  // magic
        buf[21] = 0;                                  // attributes: no codec, create time, not (yet) transactional
        buf[22] = 0;
        putInt(buf, 23, records - 1);                 // last offset delta
        putLong(buf, 27, baseTimestamp);
        putLong(buf, 35, maxTimestamp);
        putLong(buf, 43, -1L);                        // producer id, epoch, base sequence: the committing producer's
        buf[51] = -1;
        buf[52] = -1;
        putInt(buf, 53, -1);
        putInt(buf, 57, records);
        CRC32C crc = new CRC32C();
        crc.update(buf, 21, size - 21);
        putInt(buf, 17, (int) crc.getValue());
        out.write(buf, 0, size);
        size = RecordBatch.HEADER;
        records = 0;
    }

    /** Give back a buffer grown past `keep` bytes (after a batch of large records). */
    void shrinkTo(int keep) {
        if (buf.length > keep && size <= keep) buf = Arrays.copyOf(buf, keep);
    }
}
