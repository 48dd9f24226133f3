package kafkalog.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.StringReader;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The offset checkpoint files of a log directory (`log-start-offset-checkpoint`, `replication-offset-checkpoint`),
 * read as Kafka reads them: the JVM twin of engine.segments.checkpoint_file and offset_checkpoint, held with it to
 * what Kafka's own reader makes of one corpus of files (tests/data/kafka-checkpoints).
 * Byte layout: UTF-8 lines ending in '\n', '\r\n' or '\r': a version line ("0"), a count line, then one
 * "topic partition offset" line per entry, fields separated by runs of whitespace. An empty file, or one with only its
 * version line, has no entries (a Kafka broker creates its checkpoint files empty at start-up and writes them later);
 * a partition listed twice has its last line's offset. Refused (KafkalogError storage, naming the file): bytes that
 * are not UTF-8, another version, a number Integer.parseInt/Long.parseLong refuses, a line that is not three fields,
 * an entry count other than the count line's.
 * Crash policy: read only (a writer replaces a checkpoint whole, by rename, so a read sees the old or the new file).
 * Thread-safety: stateless.
 */
final class CheckpointFile {
    private static final Pattern SPACES = Pattern.compile("\\s+");

    private CheckpointFile() {}

    /** The entries of the checkpoint file `f` by "topic-partition", null when there is no such file. */
    static Map<String, Long> offsets(File f) {
        byte[] data;
        try {
            data = Files.readAllBytes(f.toPath());
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException e) {
            throw KafkalogError.storage("cannot read the checkpoint file: " + e, f.getPath(), e);
        }
        try {
            return parse(data);
        } catch (IOException | RuntimeException e) {
            throw KafkalogError.storage("malformed checkpoint file: " + e.getMessage(), f.getPath(), e);
        }
    }

    /** The entries of a checkpoint file's bytes; IOException or NumberFormatException when they are refused. */
    static Map<String, Long> parse(byte[] data) throws IOException {
        String text;
        try {
            text = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(data)).toString();
        } catch (CharacterCodingException e) {
            throw new IOException("not UTF-8: " + e);
        }
        BufferedReader lines = new BufferedReader(new StringReader(text));
        Map<String, Long> found = new HashMap<>();
        String line = lines.readLine();
        if (line == null) return found;
        if (Integer.parseInt(line) != 0) throw new IOException("unsupported version " + line);
        line = lines.readLine();
        if (line == null) return found;
        int count = Integer.parseInt(line);
        if (count < 0) throw new IOException("a negative entry count " + count);
        int seen = 0;
        while ((line = lines.readLine()) != null) {
            String[] parts = SPACES.split(line);
            if (parts.length != 3) throw new IOException("malformed line '" + line + "'");
            found.put(parts[0] + "-" + Integer.parseInt(parts[1]), Long.parseLong(parts[2]));
            seen++;
        }
        if (seen != count) throw new IOException("expected " + count + " entries, found " + seen);
        return found;
    }
}
