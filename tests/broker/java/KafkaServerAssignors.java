// Kafka's own server-side assignors (UniformAssignor, RangeAssignor) as a filter, for
// tests/broker/test_server_assignors.py. Each input line is a JSON group:
//   {"assignor": "uniform"|"range", "homogeneous": bool, "topics": {"<topic id>": partitions},
//    "members": [{"id": "...", "instance": "..."|null, "topics": ["<topic id>"], "assignment": {"<topic id>": [p]}}]}
// and each output line the assignment Kafka's class computes, {"<member id>": {"<topic id>": [p, ...]}}, or
// {"error": "..."}. Kafka's builders iterate hash sets where the order decides who gets what; so that they iterate
// in the order the test states (members as listed, topics in Uuid.compareTo order, a member's partitions ascending),
// members go in a LinkedHashMap, assignments are sorted maps of sorted sets, and every topic id is replaced by
// Uuid(0, rank + 1), rank being its place in Uuid.compareTo order: the order is kept, and small ids make a Java hash
// set iterate in it.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;
import org.apache.kafka.coordinator.group.modern.SubscribedTopicDescriberImpl;
import org.apache.kafka.coordinator.group.modern.TopicMetadata;

public class KafkaServerAssignors {
    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            try {
                System.out.println(json.writeValueAsString(assign(json, json.readTree(line))));
            } catch (Exception e) {
                ObjectNode error = json.createObjectNode();
                error.put("error", e.toString().replace('\n', ' '));
                System.out.println(json.writeValueAsString(error));
            }
        }
    }

    static ObjectNode assign(ObjectMapper json, JsonNode group) {
        // every topic id named anywhere, in Uuid.compareTo order, renamed to Uuid(0, rank + 1)
        TreeSet<Uuid> named = new TreeSet<>();
        group.get("topics").fieldNames().forEachRemaining(t -> named.add(Uuid.fromString(t)));
        for (JsonNode m : group.get("members")) {
            m.get("topics").forEach(t -> named.add(Uuid.fromString(t.asText())));
            m.get("assignment").fieldNames().forEachRemaining(t -> named.add(Uuid.fromString(t)));
        }
        if (named.size() > 15) {
            throw new IllegalArgumentException("more than 15 topics: a hash set of them would not iterate in order");
        }
        Map<Uuid, Uuid> small = new HashMap<>();
        Map<Uuid, Uuid> real = new HashMap<>();
        long rank = 1;
        for (Uuid id : named) {
            small.put(id, new Uuid(0, rank));
            real.put(new Uuid(0, rank++), id);
        }
        Map<Uuid, TopicMetadata> topics = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = group.get("topics").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            Uuid id = small.get(Uuid.fromString(e.getKey()));
            topics.put(id, new TopicMetadata(id, "topic-" + e.getKey(), e.getValue().asInt()));
        }
        Map<String, MemberSubscriptionAndAssignmentImpl> members = new LinkedHashMap<>();
        Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
        for (JsonNode m : group.get("members")) {
            String memberId = m.get("id").asText();
            Set<Uuid> subscribed = new HashSet<>();
            m.get("topics").forEach(t -> subscribed.add(small.get(Uuid.fromString(t.asText()))));
            Map<Uuid, Set<Integer>> held = new TreeMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = m.get("assignment").fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                Uuid id = small.get(Uuid.fromString(e.getKey()));
                TreeSet<Integer> partitions = new TreeSet<>();
                e.getValue().forEach(p -> partitions.add(p.asInt()));
                held.put(id, partitions);
                for (int p : partitions) {
                    inverted.computeIfAbsent(id, k -> new HashMap<>()).put(p, memberId);
                }
            }
            JsonNode instance = m.get("instance");
            members.put(memberId, new MemberSubscriptionAndAssignmentImpl(
                Optional.empty(),
                instance == null || instance.isNull() ? Optional.empty() : Optional.of(instance.asText()),
                subscribed,
                new Assignment(held)));
        }
        ConsumerGroupPartitionAssignor assignor =
            group.get("assignor").asText().equals("range") ? new RangeAssignor() : new UniformAssignor();
        GroupAssignment result = assignor.assign(
            new GroupSpecImpl(Collections.unmodifiableMap(members),
                group.get("homogeneous").asBoolean() ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS,
                inverted),
            new SubscribedTopicDescriberImpl(topics));
        ObjectNode out = json.createObjectNode();
        for (Map.Entry<String, MemberAssignment> e : result.members().entrySet()) {
            ObjectNode assignment = out.putObject(e.getKey());
            for (Map.Entry<Uuid, Set<Integer>> t : e.getValue().partitions().entrySet()) {
                if (t.getValue().isEmpty()) {
                    continue;
                }
                List<Integer> partitions = new ArrayList<>(new TreeSet<>(t.getValue()));
                partitions.forEach(assignment.putArray(real.get(t.getKey()).toString())::add);
            }
        }
        return out;
    }
}
