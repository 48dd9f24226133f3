package kafkalog.spark;

import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.PrintStream;

/**
 * The reader's decoder on its own, for the tests that hold it to the Cython one: `kafkalog.spark.DecoderCheck CASES`
 * (compiled and run by tests/spark/jvm_checks.py) reads CASES (each case an int32 big-endian length, then that many
 * bytes of a log: batches back to back) and prints one line per case: "ok" then every record as the reader walks the
 * case (" R offset timestamp key value headers", fields in hex, "-" for null, headers as key=value joined by ","; a
 * control record as " C offset type", -1 for a type Kafka does not name), or "error " and the error's report ("kind:
 * message"). A batch is checked and decoded as ColumnarReader does (CRC, then its records inflated within 1 MiB); a
 * partial batch at the end is the end, as in a segment. Stateless; one thread.
 */
public final class DecoderCheck {
    private static final long MAX_BYTES = 1 << 20;
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private DecoderCheck() {}

    public static void main(String[] args) throws IOException {
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, "UTF-8");
        try (DataInputStream in = new DataInputStream(new FileInputStream(args[0]))) {
            for (int k = 0; ; k++) {
                int n;
                try {
                    n = in.readInt();
                } catch (EOFException end) {
                    break;
                }
                byte[] data = new byte[n];
                in.readFully(data);
                out.println(verdict(data, "case-" + k));
            }
        }
        out.flush();
    }

    static String verdict(byte[] data, String name) {
        StringBuilder s = new StringBuilder("ok");
        RecordBatch batch = new RecordBatch();
        RecordCursor cursor = new RecordCursor();
        int[] header = new int[4];
        try {
            for (int i = 0; batch.at(data, i, data.length, name, i); i += batch.size) {
                batch.checkCrc();
                cursor.reset(batch, MAX_BYTES);
                while (cursor.hasNext()) {
                    cursor.next();
                    if (batch.isControl()) {
                        s.append(" C ").append(cursor.offset).append(' ').append(cursor.controlType());
                        continue;
                    }
                    s.append(" R ").append(cursor.offset).append(' ').append(cursor.timestamp).append(' ');
                    hex(s, cursor.data, cursor.keyStart, cursor.keyLength).append(' ');
                    hex(s, cursor.data, cursor.valueStart, cursor.valueLength).append(' ');
                    int pos = cursor.headersStart;
                    for (int h = 0; h < cursor.headerCount; h++) {
                        pos = cursor.header(pos, header);
                        if (h > 0) s.append(',');
                        hex(s, cursor.data, header[0], header[1]).append('=');
                        hex(s, cursor.data, header[2], header[3]);
                    }
                    if (cursor.headerCount == 0) s.append('-');
                }
            }
        } catch (KafkalogError e) {
            return "error " + e.getMessage();
        }
        return s.toString();
    }

    private static StringBuilder hex(StringBuilder s, byte[] b, int start, int length) {
        if (length < 0) return s.append('-');
        if (length == 0) return s.append("''");
        for (int i = start; i < start + length; i++) s.append(HEX[(b[i] >> 4) & 15]).append(HEX[b[i] & 15]);
        return s;
    }
}
