package kafkalog.spark;

import java.util.Arrays;
import org.apache.spark.sql.execution.vectorized.Dictionary;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;

/**
 * The key or value column of one ColumnarBatch, dictionary-encoded while its values repeat: a value equal to one
 * already in the batch's dictionary is stored as that entry's id, so Spark's getBinary returns the entry itself
 * instead of a copy per row (what Parquet's dictionary pages give it). Each value is still compared whole with its
 * entry. A batch whose values do not repeat (more than MAX_ENTRIES distinct) is turned back into plain bytes at once,
 * and the next SKIP batches start plain, so distinct values cost a few comparisons per batch, not per row.
 * Not thread-safe: one per task's reader.
 */
final class BinaryColumn implements Dictionary {
    static final int MAX_ENTRIES = 64;
    static final int SKIP = 16;
    private static final int SLOTS = 128;           // a power of two, at least 2 * MAX_ENTRIES

    final WritableColumnVector vector;
    private final byte[][] entries = new byte[MAX_ENTRIES][];
    private final int[] slots = new int[SLOTS];      // entry id + 1 by hash, 0: empty
    private WritableColumnVector ids;
    private int size;
    private int last = -1;                           // the entry the previous row used
    private boolean plain;
    private int plainBatches;                        // batches still to start plain

    BinaryColumn(WritableColumnVector vector) {
        this.vector = vector;
    }

    /** Start a batch. */
    void reset() {
        vector.reset();
        vector.setDictionary(null);
        Arrays.fill(entries, 0, size, null);
        Arrays.fill(slots, 0);
        size = 0;
        last = -1;
        plain = plainBatches > 0;
        if (plain) plainBatches--;
        else if (ids == null) ids = vector.reserveDictionaryIds(ColumnarReader.ROWS);
    }

    void putNull(int row) {
        vector.putNull(row);
    }

    /** Row `row` holds bytes [start, start + length) of `data`. */
    void put(int row, byte[] data, int start, int length) {
        if (plain) {
            vector.putByteArray(row, data, start, length);
            return;
        }
        if (last >= 0 && same(entries[last], data, start, length)) {
            ids.putInt(row, last);
            return;
        }
        int hash = length;
        if (length > 0) {
            hash = 31 * (31 * hash + data[start]) + data[start + length - 1] + 7 * data[start + (length >>> 1)];
        }
        for (int s = (hash * 0x9E3779B9) >>> 25 & (SLOTS - 1); ; s = (s + 1) & (SLOTS - 1)) {
            int id = slots[s] - 1;
            if (id < 0) {
                if (size == MAX_ENTRIES) {
                    toPlain(row);
                    vector.putByteArray(row, data, start, length);
                    return;
                }
                entries[size] = Arrays.copyOfRange(data, start, start + length);
                slots[s] = ++size;
                id = size - 1;
            } else if (!same(entries[id], data, start, length)) {
                continue;
            }
            ids.putInt(row, id);
            last = id;
            return;
        }
    }

    private static boolean same(byte[] entry, byte[] data, int start, int length) {
        return entry.length == length && Arrays.equals(entry, 0, length, data, start, start + length);
    }

    /** Too many distinct values: rows [0, rows) become plain bytes, and so do the next batches for a while. */
    private void toPlain(int rows) {
        for (int r = 0; r < rows; r++) {
            if (!vector.isNullAt(r)) {
                byte[] entry = entries[ids.getInt(r)];
                vector.putByteArray(r, entry, 0, entry.length);
            }
        }
        plain = true;
        plainBatches = SKIP;
    }

    /** End a batch: Spark reads it through the dictionary unless it went plain. */
    void finish() {
        if (!plain) vector.setDictionary(this);
    }

    @Override
    public byte[] decodeToBinary(int id) {
        return entries[id];
    }

    @Override
    public int decodeToInt(int id) {
        throw new UnsupportedOperationException("a binary column");
    }

    @Override
    public long decodeToLong(int id) {
        throw new UnsupportedOperationException("a binary column");
    }

    @Override
    public float decodeToFloat(int id) {
        throw new UnsupportedOperationException("a binary column");
    }

    @Override
    public double decodeToDouble(int id) {
        throw new UnsupportedOperationException("a binary column");
    }
}
