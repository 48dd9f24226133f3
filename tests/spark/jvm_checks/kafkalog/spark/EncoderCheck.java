package kafkalog.spark;

import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.PrintStream;

/**
 * The sink's batch encoder on its own, for the tests that hold it to Kafka's bytes and the Cython encoder's:
 * `kafkalog.spark.EncoderCheck CASES` (compiled and run by tests/spark/jvm_checks.py) reads CASES (each case an int32
 * record count, then each record as int64 timestamp, key and value as int32 length (-1 null) and bytes, int32 header
 * count and each header's key and value likewise) and prints, per case, the batch MemoryRecordsBuilder builds of them,
 * in hex. Stateless; one thread.
 */
public final class EncoderCheck {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private EncoderCheck() {}

    private static byte[] field(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0) return null;
        byte[] b = new byte[n];
        in.readFully(b);
        return b;
    }

    public static void main(String[] args) throws IOException {
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, "UTF-8");
        try (DataInputStream in = new DataInputStream(new FileInputStream(args[0]))) {
            while (true) {
                int records;
                try {
                    records = in.readInt();
                } catch (EOFException end) {
                    break;
                }
                MemoryRecordsBuilder b = new MemoryRecordsBuilder(16);
                for (int r = 0; r < records; r++) {
                    long timestamp = in.readLong();
                    byte[] key = field(in), value = field(in);
                    int count = in.readInt();
                    byte[][] keys = new byte[count][], values = new byte[count][];
                    int[] keyLengths = new int[count], valueLengths = new int[count];
                    for (int h = 0; h < count; h++) {
                        keys[h] = field(in);
                        values[h] = field(in);
                        keyLengths[h] = keys[h].length;
                        valueLengths[h] = values[h] == null ? -1 : values[h].length;
                    }
                    int keyLength = key == null ? -1 : key.length, valueLength = value == null ? -1 : value.length;
                    int body = b.bodySize(timestamp, keyLength, valueLength, count,
                            MemoryRecordsBuilder.headersSize(keyLengths, valueLengths, count));
                    b.append(timestamp, body, key, 0, keyLength, value, 0, valueLength, keys, values, count);
                }
                ByteArrayOutputStream batch = new ByteArrayOutputStream();
                b.writeTo(batch);
                StringBuilder s = new StringBuilder();
                for (byte x : batch.toByteArray()) s.append(HEX[(x >> 4) & 15]).append(HEX[x & 15]);
                out.println(s);
            }
        }
        out.flush();
    }
}
