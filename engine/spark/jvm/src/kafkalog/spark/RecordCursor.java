package kafkalog.spark;

/**
 * The records of one batch, one at a time (the layout is RecordBatch's): after `next()`, the fields of the
 * current record are the public members, keys, values and headers as ranges of `data`. Nothing is copied for
 * an uncompressed batch. Not thread-safe (one per task).
 */
final class RecordCursor {
    byte[] data;
    long offset;
    long timestamp;
    int keyStart;
    int keyLength;      // -1: null
    int valueStart;
    int valueLength;    // -1: null
    int headerCount;
    int headersStart;   // headers are parsed on demand by header()

    private RecordBatch batch;
    private RecordBatch.Varints v;
    private int remaining;
    private final int[] range = new int[2];
    private long baseOffset;
    private long baseTimestamp;
    private long logAppendTime;   // the batch's max timestamp when it is LogAppendTime, else Long.MIN_VALUE

    /** Start on `batch` (whose CRC the caller checked), inflating it within `maxBytes`. */
    void reset(RecordBatch batch, long maxBytes) {
        this.batch = batch;
        this.data = batch.records(range, maxBytes);
        this.v = new RecordBatch.Varints(data, range[0], range[1], batch);
        this.remaining = batch.count();
        if (remaining < 0) throw batch.corrupt("record count " + remaining + " is negative");
        this.baseOffset = batch.baseOffset();
        this.baseTimestamp = batch.baseTimestamp();
        this.logAppendTime = batch.logAppendTime() ? batch.maxTimestamp() : Long.MIN_VALUE;
    }

    boolean hasNext() {
        return remaining > 0;
    }

    void next() {
        remaining--;
        int length = v.varint();
        int end = v.pos + length;
        if (length < 0 || end > v.end) throw batch.corrupt("a record of " + length + " bytes runs past its batch");
        v.pos += 1;  // attributes (unused)
        long tsDelta = v.varlong();
        offset = baseOffset + v.varint();
        timestamp = logAppendTime != Long.MIN_VALUE ? logAppendTime : baseTimestamp + tsDelta;
        keyLength = v.varint();
        keyStart = keyLength < 0 ? 0 : v.take(keyLength);
        if (keyLength < -1) throw batch.corrupt("key length " + keyLength);
        valueLength = v.varint();
        valueStart = valueLength < 0 ? 0 : v.take(valueLength);
        if (valueLength < -1) throw batch.corrupt("value length " + valueLength);
        headerCount = v.varint();
        if (headerCount < 0) throw batch.corrupt("header count " + headerCount);
        headersStart = v.pos;
        for (int h = 0; h < headerCount; h++) {
            v.take(v.varint());
            int n = v.varint();
            if (n >= 0) v.take(n);
        }
        if (v.pos != end) throw batch.corrupt("a record's fields do not add up to its length " + length);
    }

    /** Header fields from `pos`: out = {keyStart, keyLength, valueStart, valueLength}; returns the next pos. */
    int header(int pos, int[] out) {
        RecordBatch.Varints h = new RecordBatch.Varints(data, pos, v.end, batch);
        out[1] = h.varint();
        out[0] = h.take(out[1]);
        out[3] = h.varint();
        out[2] = out[3] < 0 ? 0 : h.take(out[3]);
        return h.pos;
    }
}
