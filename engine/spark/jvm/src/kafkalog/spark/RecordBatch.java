package kafkalog.spark;

import java.util.zip.CRC32C;

/**
 * One RecordBatch (magic 2) in a byte array, as kafka-format.md lays it out (all big-endian):
 * baseOffset int64 @0, batchLength int32 @8, partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17
 * (CRC-32C of attributes..end), attributes int16 @21 (bits 0-2 codec, 3 LogAppendTime, 4 transactional,
 * 5 control), lastOffsetDelta int32 @23, baseTimestamp int64 @27, maxTimestamp int64 @35, producerId int64 @43,
 * producerEpoch int16 @51, baseSequence int32 @53, records count int32 @57, records @61 (compressed as a whole
 * by the codec). A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, key
 * (varint length, -1 null), value (likewise), header count varint, headers (key: varint length + UTF-8; value:
 * varint length, -1 null). Compression inflates a compressed section; CRC-32C from java.util.zip.CRC32C.
 * A mutable cursor: `at` points it at a header, `records` gives its record bytes. Not thread-safe (one per task).
 */
final class RecordBatch {
    static final int HEADER = 61;
    static final int LOG_OVERHEAD = 12;
    static final int UP_TO_MAGIC = 17;
    static final int MIN_ENTRY = 14;        // the smallest size field Kafka's file iterator accepts
    static final int MIN_RECORD_SIZE = 7;   // length, attributes, timestamp and offset deltas, key, value, headers
    static final int ABORT = 0;

    byte[] buf;
    int pos;
    int size;
    String file;
    long filePosition;

    static long getLong(byte[] b, int i) {
        return ((long) getInt(b, i) << 32) | (getInt(b, i + 4) & 0xFFFFFFFFL);
    }

    static int getInt(byte[] b, int i) {
        return (b[i] << 24) | ((b[i + 1] & 0xFF) << 16) | ((b[i + 2] & 0xFF) << 8) | (b[i + 3] & 0xFF);
    }

    static short getShort(byte[] b, int i) {
        return (short) ((b[i] << 8) | (b[i + 1] & 0xFF));
    }

    /** Size of the whole batch starting at `i` as its size field says (-1 when fewer than 12 bytes remain). */
    static long entrySize(byte[] b, int i, int limit) {
        return limit - i < LOG_OVERHEAD ? -1 : LOG_OVERHEAD + (long) getInt(b, i + 8);
    }

    /**
     * Point at the batch at b[i..]; false where Kafka's file iterator stops (fewer than 17 bytes, or a batch running
     * past `limit`: a write in progress). A size below 14 or a header that cannot be a RecordBatch v2 is refused, as
     * the Cython decoder refuses it.
     */
    boolean at(byte[] b, int i, int limit, String file, long filePosition) {
        if (limit - i < UP_TO_MAGIC) return false;
        this.buf = b;
        this.pos = i;
        this.file = file;
        this.filePosition = filePosition;
        int length = getInt(b, i + 8);
        if (length < MIN_ENTRY) throw corrupt("record size " + length + " is smaller than the minimum " + MIN_ENTRY);
        if (length > limit - i - LOG_OVERHEAD) return false;
        this.size = LOG_OVERHEAD + length;
        byte magic = b[i + 16];
        if (magic == 0 || magic == 1) {
            throw KafkalogError.unsupportedFormat("legacy message format (magic " + magic + ") is not supported", file,
                    filePosition, baseOffset());
        }
        if (magic != 2) throw corrupt("unknown magic (magic " + magic + ") is not supported");
        if (size < HEADER) throw corrupt("batch size " + size + " is below the 61-byte header");
        long base = baseOffset();
        int lastDelta = getInt(b, i + 23);
        if (base < 0 || lastDelta < 0 || base >= Long.MAX_VALUE - lastDelta) {
            throw corrupt("batch offsets are negative, or its next offset overflows int64");
        }
        return true;
    }

    long baseOffset() { return getLong(buf, pos); }
    int attributes() { return getShort(buf, pos + 21); }
    int codec() { return attributes() & 7; }
    boolean logAppendTime() { return (attributes() & 8) != 0; }
    boolean isTransactional() { return (attributes() & 16) != 0; }
    boolean isControl() { return (attributes() & 32) != 0; }
    long lastOffset() { return baseOffset() + getInt(buf, pos + 23); }
    long baseTimestamp() { return getLong(buf, pos + 27); }
    long maxTimestamp() { return getLong(buf, pos + 35); }
    long producerId() { return getLong(buf, pos + 43); }
    int lastOffsetDelta() { return getInt(buf, pos + 23); }
    int count() { return getInt(buf, pos + 57); }

    KafkalogError corrupt(String why) {
        return KafkalogError.corrupt(why, file, filePosition, buf == null ? -1 : getLong(buf, pos));
    }

    KafkalogError invalid(String why) {
        return KafkalogError.invalidRecord(why, file, filePosition, getLong(buf, pos));
    }

    void checkCrc() {
        CRC32C crc = new CRC32C();
        crc.update(buf, pos + 21, size - 21);
        long stored = getInt(buf, pos + 17) & 0xFFFFFFFFL;
        if (crc.getValue() != stored) {
            throw corrupt(String.format("CRC-32C mismatch: stored %08x, computed %08x", stored, crc.getValue()));
        }
    }

    /**
     * The record bytes [range[0], range[1]) of this batch: the batch's own array, or inflated (bounded by maxBytes).
     * A negative record count is refused before any inflating, and a count that cannot fit the bytes after it.
     */
    byte[] records(int[] range, long maxBytes) {
        if (count() < 0) throw invalid("invalid record count " + count());
        byte[] out = section(range, maxBytes);
        if ((long) count() * MIN_RECORD_SIZE > range[1] - range[0]) {
            throw invalid("record count " + count() + " cannot fit in " + (range[1] - range[0]) + " bytes");
        }
        return out;
    }

    private byte[] section(int[] range, long maxBytes) {
        int codec = codec();
        if (codec == 0) {
            range[0] = pos + HEADER;
            range[1] = pos + size;
            return buf;
        }
        if (codec > 4) throw KafkalogError.unsupportedCodec("unknown compression codec id " + codec, file, filePosition, baseOffset());
        int[] n = new int[1];
        byte[] out = Compression.inflate(this, codec, buf, pos + HEADER, pos + size, maxBytes, n);
        range[0] = 0;
        range[1] = n[0];
        return out;
    }

    /** The control type of a control batch's first record (-1 when it has none), checked as RecordCursor checks it. */
    int controlType() {
        RecordCursor cursor = new RecordCursor();
        cursor.reset(this, 1 << 20);
        if (!cursor.hasNext()) return -1;
        cursor.next();
        return cursor.controlType();
    }

    /**
     * Zig-zag varints over a byte range, as Kafka reads them: a varint takes at most 5 bytes and a varlong 10, the
     * last byte holding no bits past the width. A read past the end, or a longer or wider one, is an invalid record.
     */
    static final class Varints {
        final byte[] b;
        final RecordBatch batch;
        int end;
        int pos;

        Varints(byte[] b, int pos, int end, RecordBatch batch) {
            this.b = b;
            this.pos = pos;
            this.end = end;
            this.batch = batch;
        }

        private long unsigned(int maxBytes) {
            long raw = 0;
            for (int i = 0, shift = 0; i < maxBytes; i++, shift += 7) {
                if (pos >= end) throw batch.invalid("varint is truncated");
                int x = b[pos++];
                raw |= (long) (x & 0x7F) << shift;
                if (x >= 0) {
                    if (i == maxBytes - 1 && (x >> (maxBytes == 10 ? 1 : 4)) != 0) break;
                    return raw;
                }
            }
            throw batch.invalid("varint is too long or overflows its width");
        }

        /** A varint of one to three bytes with no bound check per byte (most lengths and deltas); -1 when it is
         *  longer or too near the end, for `unsigned` to read with every check. */
        private int shortUnsigned() {
            int p = pos;
            if (end - p < 3) return -1;
            int x = b[p];
            if (x >= 0) {
                pos = p + 1;
                return x;
            }
            int y = b[p + 1];
            if (y >= 0) {
                pos = p + 2;
                return (x & 0x7F) | y << 7;
            }
            int z = b[p + 2];
            if (z >= 0) {
                pos = p + 3;
                return (x & 0x7F) | (y & 0x7F) << 7 | z << 14;
            }
            return -1;
        }

        long varlong() {
            int fast = shortUnsigned();
            if (fast >= 0) return (fast >>> 1) ^ -(fast & 1);
            long raw = unsigned(10);
            return (raw >>> 1) ^ -(raw & 1);
        }

        int varint() {
            int fast = shortUnsigned();
            if (fast >= 0) return (fast >>> 1) ^ -(fast & 1);
            int raw = (int) unsigned(5);
            return (raw >>> 1) ^ -(raw & 1);
        }

        /** Start of a field of `length` bytes here (none for a negative length: a null), moving past it. */
        int field(int length) {
            if (length < 0) return 0;
            if (length > end - pos) throw batch.invalid("a field overruns the record");
            int at = pos;
            pos += length;
            return at;
        }
    }
}
