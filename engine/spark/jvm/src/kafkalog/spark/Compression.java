package kafkalog.spark;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;
import net.jpountz.xxhash.XXHash32;
import net.jpountz.xxhash.XXHashFactory;
import org.xerial.snappy.Snappy;
import org.xerial.snappy.SnappyError;

/**
 * A batch's records section inflated, as engine/record/compression.py inflates it (the framing rules are its own):
 * gzip members as Kafka's reader reads them (java.util.zip.GZIPInputStream); snappy in xerial framing (16-byte header
 * `82 'SNAPPY' 00`, version, compat, then `[int32 BE length][raw block]`...) or one raw block (also a stream shorter
 * than the header); one LZ4 frame of independent blocks (magic, FLG version 01, BD, xxh32 header checksum, `[int32 LE
 * size][block]`... up to an end mark of 0; bit 31 of a size: stored); zstd frames. No more than maxBytes come out:
 * past that RecordTooLargeError, undecodable bytes CorruptRecordError. Stateless; thread-safe.
 */
final class Compression {
    private static final byte[] XERIAL_MAGIC = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
    private static final int XERIAL_HEADER = 16;
    private static final int LZ4_MAGIC = 0x184D2204;
    private static final int ZSTD_MAGIC = 0x28B52FFD;  // (big-endian view of the little-endian 0xFD2FB528)
    private static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();
    private static final XXHash32 XXH32 = XXHashFactory.fastestInstance().hash32();

    private Compression() {}

    /** The bytes b[from..to) inflated by `codec` (1-4); out[0] is how many of the returned array hold them. */
    static byte[] inflate(RecordBatch batch, int codec, byte[] b, int from, int to, long maxBytes, int[] out) {
        if (from == to) throw batch.corrupt("the " + codecName(codec) + " records are empty: no stream to inflate");
        try {
            switch (codec) {
                case 2: return snappy(batch, b, from, to, maxBytes, out);
                case 3: return lz4(batch, b, from, to, maxBytes, out);
                case 1: return stream(batch, codec, new GZIPInputStream(new ByteArrayInputStream(b, from, to - from),
                        64 << 10), to - from, maxBytes, out);
                default: return zstd(batch, b, from, to, maxBytes, out);
            }
        } catch (IOException | RuntimeException | SnappyError e) {  // (snappy-java reports a bad block as an Error)
            if (e instanceof KafkalogError) throw (KafkalogError) e;
            throw batch.corrupt("the " + codecName(codec) + " records do not decompress: " + e.getMessage());
        }
    }

    static String codecName(int codec) {
        String[] names = {"none", "gzip", "snappy", "lz4", "zstd"};
        return codec < names.length ? names[codec] : "codec " + codec;
    }

    private static KafkalogError tooLarge(RecordBatch batch, int codec, long maxBytes) {
        return KafkalogError.tooLarge("a " + codecName(codec) + " batch inflates past maxDecompressedBytes=" + maxBytes,
                batch.file, batch.filePosition, batch.baseOffset());
    }

    private static byte[] stream(RecordBatch batch, int codec, InputStream in, int inputSize, long maxBytes, int[] out)
            throws IOException {
        try (InputStream stream = in) {
            byte[] dst = new byte[(int) Math.min(Math.max(4L * inputSize, 1024), maxBytes + 1)];
            int n = 0;
            while (true) {
                if (n == dst.length) {
                    if (n > maxBytes) throw tooLarge(batch, codec, maxBytes);
                    byte[] grown = new byte[(int) Math.min((long) dst.length * 2, maxBytes + 1)];
                    System.arraycopy(dst, 0, grown, 0, n);
                    dst = grown;
                }
                int r = stream.read(dst, n, dst.length - n);
                if (r < 0) break;
                n += r;
            }
            if (n > maxBytes) throw tooLarge(batch, codec, maxBytes);
            out[0] = n;
            return dst;
        }
    }

    /** zstd frames; a first frame that records its content size is refused before inflating when that is too large. */
    private static byte[] zstd(RecordBatch batch, byte[] b, int from, int to, long maxBytes, int[] out) throws IOException {
        long declared = zstdContentSize(b, from, to);
        if (declared > maxBytes) throw tooLarge(batch, 4, maxBytes);
        byte[] dst = stream(batch, 4, new ZstdInputStreamNoFinalizer(new ByteArrayInputStream(b, from, to - from)),
                to - from, maxBytes, out);
        if (declared >= 0 && out[0] < declared) {
            throw batch.corrupt("zstd frame declares " + declared + " bytes but holds " + out[0]);
        }
        return dst;
    }

    /** Frame_Content_Size of the first frame's header, -1 when the writer recorded none (or there is no header). */
    private static long zstdContentSize(byte[] b, int from, int to) {
        if (to - from < 6 || RecordBatch.getInt(b, from) != ZSTD_MAGIC) return -1;
        int fhd = b[from + 4] & 0xFF;
        int fcsFlag = fhd >> 6, singleSegment = (fhd >> 5) & 1, dictFlag = fhd & 3;
        int p = from + 5 + (singleSegment == 1 ? 0 : 1) + new int[] {0, 1, 2, 4}[dictFlag];
        int width = new int[] {singleSegment, 2, 4, 8}[fcsFlag];
        if (width == 0 || to - p < width) return -1;
        long value = 0;
        for (int i = width - 1; i >= 0; i--) value = (value << 8) | (b[p + i] & 0xFF);
        return width == 2 ? value + 256 : (value < 0 ? Long.MAX_VALUE : value);
    }

    private static boolean xerial(byte[] b, int from, int to) {
        if (to - from < XERIAL_HEADER) return false;
        for (int i = 0; i < XERIAL_MAGIC.length; i++) {
            if (b[from + i] != XERIAL_MAGIC[i]) return false;
        }
        return true;
    }

    private static byte[] snappy(RecordBatch batch, byte[] b, int from, int to, long maxBytes, int[] out)
            throws IOException {
        int[] blocks = new int[8];  // (start, length) pairs
        int count = 0;
        if (!xerial(b, from, to)) {
            blocks[0] = from;
            blocks[1] = to - from;
            count = 1;
        } else {
            for (int p = from + XERIAL_HEADER; p < to; count++) {
                if (p + 4 > to) throw batch.corrupt("xerial snappy block length is truncated");
                int n = RecordBatch.getInt(b, p);
                if (n < 0 || n > to - p - 4) throw batch.corrupt("xerial snappy block of " + n + " bytes overruns the stream");
                if (2 * count + 2 > blocks.length) blocks = Arrays.copyOf(blocks, blocks.length * 2);
                blocks[2 * count] = p + 4;
                blocks[2 * count + 1] = n;
                p += 4 + n;
            }
        }
        long total = 0;
        int[] sizes = new int[count];
        for (int i = 0; i < count; i++) {
            sizes[i] = Snappy.uncompressedLength(b, blocks[2 * i], blocks[2 * i + 1]);
            if (sizes[i] < 0) throw batch.corrupt("a snappy block declares a negative length");
            total += sizes[i];
        }
        if (total > maxBytes) throw tooLarge(batch, 2, maxBytes);
        byte[] dst = new byte[(int) total];
        int at = 0;
        for (int i = 0; i < count; i++) {
            if (Snappy.uncompress(b, blocks[2 * i], blocks[2 * i + 1], dst, at) != sizes[i]) {
                throw batch.corrupt("snappy block decompressed to the wrong length");
            }
            at += sizes[i];
        }
        out[0] = at;
        return dst;
    }

    private static byte[] lz4(RecordBatch batch, byte[] b, int from, int to, long maxBytes, int[] out) {
        if (to - from < 7 || Integer.reverseBytes(RecordBatch.getInt(b, from)) != LZ4_MAGIC) {
            throw batch.corrupt("lz4 stream does not start with an LZ4 frame magic");
        }
        int flg = b[from + 4] & 0xFF, bd = b[from + 5] & 0xFF;
        if (flg >> 6 != 1) throw batch.corrupt("lz4 frame version " + (flg >> 6) + " is not supported");
        if ((flg & 0x20) == 0) throw batch.corrupt("lz4 frame uses dependent blocks, which Kafka does not support");
        if ((flg & 0x03) != 0 || (bd & 0x8F) != 0) throw batch.corrupt("lz4 frame descriptor has reserved bits set");
        int code = (bd >> 4) & 7;
        if (code < 4) throw batch.corrupt("lz4 frame block size code " + code + " is invalid");
        int blockMax = 1 << (2 * code + 8);  // 4: 64 KiB ... 7: 4 MiB
        boolean blockChecksum = (flg & 0x10) != 0, contentChecksum = (flg & 0x04) != 0;
        int descEnd = from + 6 + ((flg & 0x08) != 0 ? 8 : 0);
        if (to < descEnd + 1) throw batch.corrupt("lz4 frame descriptor is truncated");
        if ((b[descEnd] & 0xFF) != ((XXH32.hash(b, from + 4, descEnd - from - 4, 0) >> 8) & 0xFF)) {
            throw batch.corrupt("lz4 frame header checksum mismatch");
        }
        int p = descEnd + 1;
        byte[] dst = new byte[(int) Math.min(Math.max(4L * (to - from), 1024), maxBytes + 1)];
        byte[] scratch = null;
        int n = 0;
        while (true) {
            if (p + 4 > to) throw batch.corrupt("lz4 frame is truncated (no end mark)");
            int word = Integer.reverseBytes(RecordBatch.getInt(b, p));
            p += 4;
            if (word == 0) break;
            boolean stored = word < 0;
            int size = word & 0x7FFFFFFF;
            if (size > blockMax || size > to - p) throw batch.corrupt("lz4 block of " + size + " bytes is invalid or truncated");
            if ((long) dst.length - n < blockMax && dst.length <= maxBytes) {
                byte[] grown = new byte[(int) Math.min(Math.max((long) dst.length * 2, (long) n + blockMax), maxBytes + 1)];
                System.arraycopy(dst, 0, grown, 0, n);
                dst = grown;
            }
            int got;
            if (stored) {
                got = size;
                if (n + got > maxBytes) throw tooLarge(batch, 3, maxBytes);
                System.arraycopy(b, p, dst, n, got);
            } else {
                if (scratch == null) scratch = new byte[blockMax];
                got = LZ4.decompress(b, p, size, scratch, 0, blockMax);
                if (n + (long) got > maxBytes) throw tooLarge(batch, 3, maxBytes);
                System.arraycopy(scratch, 0, dst, n, got);
            }
            n += got;
            p += size + (blockChecksum ? 4 : 0);
        }
        if (contentChecksum && p + 4 > to) throw batch.corrupt("lz4 frame content checksum is truncated");
        out[0] = n;
        return dst;
    }
}
