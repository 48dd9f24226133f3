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
    int keyLength;      // negative: null
    int valueStart;
    int valueLength;    // negative: null
    int headerCount;
    int headersStart;   // headers are parsed on demand by header()

    private RecordBatch batch;
    private RecordBatch.Varints v;
    private static final String SIZE_MISMATCH = "invalid record size: declared and read sizes differ";
    private static final int MAX_CONTROL_TYPE = 6;  // KRAFT_VOTERS: the last type Kafka names

    private int remaining;
    private int sectionEnd;
    private int lastOffsetDelta;
    private final int[] range = new int[2];
    private long baseOffset;
    private long baseTimestamp;
    private boolean logAppend;    // a LogAppendTime batch: every record's timestamp is the batch's max timestamp
    private long maxTimestamp;

    /** Start on `batch` (whose CRC the caller checked), inflating it within `maxBytes`. */
    void reset(RecordBatch batch, long maxBytes) {
        this.batch = batch;
        this.data = batch.records(range, maxBytes);
        this.v = new RecordBatch.Varints(data, range[0], range[1], batch);
        this.sectionEnd = range[1];
        this.remaining = batch.count();
        this.baseOffset = batch.baseOffset();
        this.baseTimestamp = batch.baseTimestamp();
        this.lastOffsetDelta = batch.lastOffsetDelta();
        this.logAppend = batch.logAppendTime();
        this.maxTimestamp = batch.maxTimestamp();
        if (remaining == 0) checkEnd();
    }

    private void checkEnd() {
        if (v.pos != sectionEnd) {
            throw batch.invalid("incorrect declared batch size: " + (sectionEnd - v.pos) + " bytes remain after "
                    + batch.count() + " records");
        }
    }

    boolean hasNext() {
        return remaining > 0;
    }

    /**
     * The next record, its framing checked in the Cython decoder's order (kafka-format.md §2); after the last one,
     * bytes left in the batch are an error. Every framing error is an InvalidRecordError.
     */
    void next() {
        remaining--;
        v.end = sectionEnd;
        int length = v.varint();
        if (length < 0 || length > sectionEnd - v.pos) throw batch.invalid("invalid record size: it overruns the batch");
        int end = v.pos + length;
        if (length < 1) throw batch.invalid(SIZE_MISMATCH);
        v.end = end;
        v.pos += 1;  // attributes (unused)
        long tsDelta = v.varlong();
        int offsetDelta = v.varint();
        if (offsetDelta < 0 || offsetDelta > lastOffsetDelta) {
            throw batch.invalid("record offset delta is outside [0, lastOffsetDelta]");
        }
        offset = baseOffset + offsetDelta;
        long stored = baseTimestamp + tsDelta;
        if (((baseTimestamp ^ stored) & (tsDelta ^ stored)) < 0) throw batch.invalid("record timestamp overflows int64");
        timestamp = logAppend ? maxTimestamp : stored;
        keyLength = v.varint();
        keyStart = v.field(keyLength);
        valueLength = v.varint();
        valueStart = v.field(valueLength);
        headerCount = v.varint();
        if (headerCount < 0) throw batch.invalid("invalid number of record headers");
        headersStart = v.pos;
        for (int h = 0; h < headerCount; h++) {
            int keySize = v.varint();
            v.field(keySize);
            if (keySize < 0) throw batch.invalid("invalid negative header key size");
            v.field(v.varint());
        }
        if (v.pos != end) throw batch.invalid(SIZE_MISMATCH);
        v.end = sectionEnd;
        if (remaining == 0) checkEnd();
    }

    /** Header fields from `pos`: out = {keyStart, keyLength, valueStart, valueLength (-1: null)}; returns the next pos. */
    int header(int pos, int[] out) {
        RecordBatch.Varints h = new RecordBatch.Varints(data, pos, sectionEnd, batch);
        out[1] = h.varint();
        out[0] = h.field(out[1]);
        out[3] = h.varint();
        out[2] = h.field(out[3]);
        if (out[3] < 0) out[3] = -1;
        return h.pos;
    }

    /**
     * The control type of the current record of a control batch, as Kafka parses it: the key's int16 version (not
     * negative) then its int16 type, -1 for a type Kafka does not know; an ABORT or COMMIT marker's value holds an
     * int16 version (not negative) and the coordinator epoch. Anything else is an InvalidRecordError.
     */
    int controlType() {
        if (keyLength < 4) throw batch.invalid("control record key is shorter than 4 bytes");
        int version = RecordBatch.getShort(data, keyStart);
        if (version < 0) throw batch.invalid("invalid control record key version " + version);
        int type = RecordBatch.getShort(data, keyStart + 2);
        if (type < 0 || type > MAX_CONTROL_TYPE) return -1;
        if (type <= 1) {
            if (valueLength < 6) throw batch.invalid("end transaction marker value is shorter than 6 bytes");
            int markerVersion = RecordBatch.getShort(data, valueStart);
            if (markerVersion < 0) throw batch.invalid("invalid end transaction marker version " + markerVersion);
        }
        return type;
    }
}
