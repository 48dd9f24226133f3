// Kafka's own generated message classes as a filter, for tests/broker/test_kafka_messages.py: each input line is
// "request|response <api key> <version> <hex body>"; each output line is "<hex> <json>": the body as Kafka's class
// reads it and writes it back, and the JSON its generated converter makes of what it read ("error <text>" when it
// cannot read the body, or leaves bytes over; "newer <v>" when the version is past the highest, <v>, this Kafka build
// knows, unstable versions included; "newer -1" for an API it does not have; "older <v>" when the version is below
// the lowest, <v>, it still reads: Kafka 4 removed the oldest versions of many APIs).
import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

public class KafkaMessages {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        HexFormat hex = HexFormat.of();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ", -1);
            try {
                short key = Short.parseShort(f[1]);
                if (java.util.Arrays.stream(ApiMessageType.values()).noneMatch(t -> t.apiKey() == key)) {
                    System.out.println("newer -1");  // an API this Kafka build does not have at all
                    continue;
                }
                ApiMessageType type = ApiMessageType.fromApiKey(key);
                short version = Short.parseShort(f[2]);
                if (version > type.highestSupportedVersion(true)) {
                    System.out.println("newer " + type.highestSupportedVersion(true));
                    continue;
                }
                if (version < type.lowestSupportedVersion()) {  // (versions a later Kafka removed, KIP-896)
                    System.out.println("older " + type.lowestSupportedVersion());
                    continue;
                }
                ApiMessage msg = f[0].equals("request") ? type.newRequest() : type.newResponse();
                ByteBuffer buf = ByteBuffer.wrap(hex.parseHex(f[3]));
                msg.read(new ByteBufferAccessor(buf), version);
                if (buf.hasRemaining()) {
                    throw new IllegalStateException(buf.remaining() + " bytes left over");
                }
                ObjectSerializationCache cache = new ObjectSerializationCache();
                ByteBuffer out = ByteBuffer.allocate(msg.size(cache, version));
                msg.write(new ByteBufferAccessor(out), cache, version);
                Class<?> converter = Class.forName(msg.getClass().getName() + "JsonConverter");
                JsonNode json = (JsonNode) converter.getMethod("write", msg.getClass(), short.class)
                    .invoke(null, msg, version);
                System.out.println(hex.formatHex(out.array()) + " " + json);
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                System.out.println("error " + cause.toString().replace('\n', ' '));
            }
        }
    }
}
