package kafkalog.spark;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.nio.channels.ClosedByInterruptException;

/**
 * kafkalog's typed errors on the JVM, named and coded as Kafka's (and as engine.common.errors names them), each
 * naming where it happened. The message is the whole report: no stack trace is kept, so a failed Spark task says
 * one line ("CorruptRecordError: ... (file f, position p, offset o)") instead of a page of JVM frames.
 */
public final class KafkalogError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public final String kind;
    public final int code;
    public final boolean retriable;

    private KafkalogError(String kind, int code, boolean retriable, String message) {
        this(kind, code, retriable, message, null);
    }

    private KafkalogError(String kind, int code, boolean retriable, String message, Throwable cause) {
        super(kind + ": " + message, cause, false, false);
        this.kind = kind;
        this.code = code;
        this.retriable = retriable;
    }

    static String where(String message, String file, long position, long offset) {
        StringBuilder at = new StringBuilder();
        if (file != null) at.append("file ").append(file);
        if (position >= 0) at.append(at.length() > 0 ? ", " : "").append("position ").append(position);
        if (offset >= 0) at.append(at.length() > 0 ? ", " : "").append("offset ").append(offset);
        return at.length() == 0 ? message : message + " (" + at + ")";
    }

    /** CORRUPT_MESSAGE (2): bad CRC, bad framing, truncated or undecodable bytes. */
    public static KafkalogError corrupt(String message, String file, long position, long offset) {
        return new KafkalogError("CorruptRecordError", 2, true, where(message, file, position, offset));
    }

    /** INVALID_RECORD (87): a record whose framing breaks Kafka's rules (its batch's CRC matched). */
    public static KafkalogError invalidRecord(String message, String file, long position, long offset) {
        return new KafkalogError("InvalidRecordError", 87, false, where(message, file, position, offset));
    }

    /** UNSUPPORTED_MESSAGE_FORMAT (43): a legacy (magic 0 or 1) message set. */
    public static KafkalogError unsupportedFormat(String message, String file, long position, long offset) {
        return new KafkalogError("UnsupportedMessageFormatError", 43, false, where(message, file, position, offset));
    }

    /** UNSUPPORTED_COMPRESSION_TYPE (76): a codec id outside 0-4. */
    public static KafkalogError unsupportedCodec(String message, String file, long position, long offset) {
        return new KafkalogError("UnsupportedCompressionTypeError", 76, false, where(message, file, position, offset));
    }

    /** MESSAGE_TOO_LARGE (10): a batch that inflates past maxDecompressedBytes. */
    public static KafkalogError tooLarge(String message, String file, long position, long offset) {
        return new KafkalogError("RecordTooLargeError", 10, false, where(message, file, position, offset));
    }

    /** OFFSET_OUT_OF_RANGE (1): offsets outside the log (failOnDataLoss). */
    public static KafkalogError outOfRange(String message, String file, long offset) {
        return new KafkalogError("OffsetOutOfRangeError", 1, false, where(message, file, -1, offset));
    }

    /** UNKNOWN_TOPIC_OR_PARTITION (3): a write to a topic or partition the directory does not have. */
    public static KafkalogError unknownTopic(String message) {
        return new KafkalogError("UnknownTopicOrPartitionError", 3, true, message);
    }

    /** INVALID_TIMESTAMP (32): a row's timestamp that Kafka cannot store (before 1970). */
    public static KafkalogError invalidTimestamp(String message) {
        return new KafkalogError("InvalidTimestampError", 32, false, message);
    }

    /** INVALID_CONFIG (40): an unknown option or a bad value, naming the option. */
    public static KafkalogError badOption(String option, String why) {
        return new KafkalogError("InvalidConfigurationError", 40, false, "kafkalog option '" + option + "': " + why);
    }

    /** INVALID_CONFIG (40) for the sink: what is wrong with the write. */
    public static KafkalogError badWrite(String what, String why) {
        return new KafkalogError("InvalidConfigurationError", 40, false, "kafkalog sink: " + what + " " + why);
    }

    /** KAFKA_STORAGE_ERROR (56): a file that cannot be read. */
    public static KafkalogError storage(String message, String file, Throwable cause) {
        return new KafkalogError("KafkaStorageError", 56, true, where(message, file, -1, -1), cause);
    }

    /**
     * A read of `file` that failed: KAFKA_STORAGE_ERROR (56), unless the reading thread was interrupted (a stopped
     * query, a cancelled task). That stays an interruption, which Spark recognizes and does not report as a failure.
     */
    public static RuntimeException readFailed(String file, IOException cause) {
        if (cause instanceof ClosedByInterruptException || cause instanceof InterruptedIOException) {
            return new UncheckedIOException(cause);
        }
        return storage("cannot read: " + cause, file, cause);
    }
}
