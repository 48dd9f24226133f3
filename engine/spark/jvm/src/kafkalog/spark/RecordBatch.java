package kafkalog.spark;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

/**
 * One RecordBatch (magic 2) in a byte array, as kafka-format.md lays it out (all big-endian):
 * baseOffset int64 @0, batchLength int32 @8, partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17
 * (CRC-32C of attributes..end), attributes int16 @21 (bits 0-2 codec, 3 LogAppendTime, 4 transactional,
 * 5 control), lastOffsetDelta int32 @23, baseTimestamp int64 @27, maxTimestamp int64 @35, producerId int64 @43,
 * producerEpoch int16 @51, baseSequence int32 @53, records count int32 @57, records @61 (compressed as a whole
 * by the codec). A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, key
 * (varint length, -1 null), value (likewise), header count varint, headers (key: varint length + UTF-8; value:
 * varint length, -1 null). Codecs come from the jars Spark ships (zstd-jni, lz4-java, snappy-java) and the JDK
 * (gzip); CRC-32C from java.util.zip.CRC32C.
 * A mutable cursor: `at` points it at a header, `records` gives its record bytes. Not thread-safe (one per task).
 */
final class RecordBatch {
    static final int HEADER = 61;
    static final int LOG_OVERHEAD = 12;
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

    /** Size of the whole batch starting at `i` (-1 when fewer than 12 bytes remain). */
    static int entrySize(byte[] b, int i, int limit) {
        return limit - i < LOG_OVERHEAD ? -1 : LOG_OVERHEAD + getInt(b, i + 8);
    }

    /** Point at the batch at b[i..]; false at a partial tail (the rest is a write in progress). */
    boolean at(byte[] b, int i, int limit, String file, long filePosition) {
        int n = entrySize(b, i, limit);
        if (n < 0 || i + n > limit) return false;
        this.buf = b;
        this.pos = i;
        this.size = n;
        this.file = file;
        this.filePosition = filePosition;
        if (n < HEADER) throw corrupt("batch length " + (n - LOG_OVERHEAD) + " is shorter than a header");
        if (b[i + 16] != 2) throw corrupt("magic " + b[i + 16] + " is not 2 (only RecordBatch v2 is read)");
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
    int count() { return getInt(buf, pos + 57); }

    KafkalogError corrupt(String why) {
        return KafkalogError.corrupt(why, file, filePosition, buf == null ? -1 : getLong(buf, pos));
    }

    void checkCrc() {
        CRC32C crc = new CRC32C();
        crc.update(buf, pos + 21, size - 21);
        long stored = getInt(buf, pos + 17) & 0xFFFFFFFFL;
        if (crc.getValue() != stored) {
            throw corrupt(String.format("CRC-32C mismatch: stored %08x, computed %08x", stored, crc.getValue()));
        }
    }

    /** The record bytes [0, length) of this batch: the batch's own array, or inflated (bounded by maxBytes). */
    byte[] records(int[] range, long maxBytes) {
        if (codec() == 0) {
            range[0] = pos + HEADER;
            range[1] = pos + size;
            return buf;
        }
        int codec = codec();
        try (InputStream in = inflater(codec, new ByteArrayInputStream(buf, pos + HEADER, size - HEADER))) {
            byte[] out = new byte[(int) Math.min(Math.max(4 * (size - HEADER), 1024), maxBytes + 1)];
            int n = 0;
            while (true) {
                if (n == out.length) {
                    if (n > maxBytes) {
                        throw KafkalogError.tooLarge("a " + codecName(codec) + " batch inflates past maxDecompressedBytes="
                                + maxBytes, file, filePosition, baseOffset());
                    }
                    byte[] grown = new byte[(int) Math.min((long) out.length * 2, maxBytes + 1)];
                    System.arraycopy(out, 0, grown, 0, n);
                    out = grown;
                }
                int r = in.read(out, n, out.length - n);
                if (r < 0) break;
                n += r;
            }
            if (n > maxBytes) {
                throw KafkalogError.tooLarge("a " + codecName(codec) + " batch inflates past maxDecompressedBytes="
                        + maxBytes, file, filePosition, baseOffset());
            }
            range[0] = 0;
            range[1] = n;
            return out;
        } catch (IOException | RuntimeException e) {
            if (e instanceof KafkalogError) throw (KafkalogError) e;
            throw corrupt("the " + codecName(codec) + " records do not decompress: " + e.getMessage());
        }
    }

    private InputStream inflater(int codec, InputStream raw) throws IOException {
        switch (codec) {
            case 1: return new GZIPInputStream(raw, 64 << 10);
            case 2: return new SnappyInputStream(raw);
            case 3: return new LZ4FrameInputStream(raw);
            case 4: return new ZstdInputStreamNoFinalizer(raw);
            default: throw corrupt("unknown compression codec " + codec);
        }
    }

    static String codecName(int codec) {
        String[] names = {"none", "gzip", "snappy", "lz4", "zstd"};
        return codec < names.length ? names[codec] : "codec " + codec;
    }

    /** The control type of a control batch's one record (-1 when it has none). */
    int controlType() {
        if (count() < 1) return -1;
        int[] range = new int[2];
        byte[] b = records(range, 1 << 20);
        Varints v = new Varints(b, range[0], range[1], this);
        v.varint();            // length
        v.pos += 1;            // attributes
        v.varlong();           // timestamp delta
        v.varint();            // offset delta
        int keyLength = v.varint();
        if (keyLength < 4) throw corrupt("a control record's key is " + keyLength + " bytes");
        return getShort(b, v.pos + 2);
    }

    /** Zig-zag varints over a byte range; a read past its end is corruption of `batch`. */
    static final class Varints {
        final byte[] b;
        final int end;
        final RecordBatch batch;
        int pos;

        Varints(byte[] b, int pos, int end, RecordBatch batch) {
            this.b = b;
            this.pos = pos;
            this.end = end;
            this.batch = batch;
        }

        long varlong() {
            long raw = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (pos >= end) throw batch.corrupt("a record runs past the end of its batch");
                byte x = b[pos++];
                raw |= (long) (x & 0x7F) << shift;
                if (x >= 0) return (raw >>> 1) ^ -(raw & 1);
            }
            throw batch.corrupt("a varint is longer than 10 bytes");
        }

        int varint() {
            long v = varlong();
            if (v != (int) v) throw batch.corrupt("a varint " + v + " does not fit 32 bits");
            return (int) v;
        }

        /** Start of `length` bytes here (checked against the end), moving past them. */
        int take(int length) {
            if (length < 0 || length > end - pos) throw batch.corrupt("a field of " + length + " bytes runs past its record");
            int at = pos;
            pos += length;
            return at;
        }
    }
}
