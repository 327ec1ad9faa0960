import java.io.OutputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java kafka-clients library driven from the compat tests.
 *
 * <p>Every command prints one JSON object per line on stdout; diagnostics go to stderr. Exit
 * code 0 on success, 1 on a client error, 2 on bad usage. Trailing KEY=VALUE arguments are
 * client properties that override the defaults below.
 */
public class KafkaTool {
    private static final String USAGE =
            "usage: KafkaTool <command> ...\n"
                    + "  create-topic BOOTSTRAP TOPIC PARTITIONS RF [k=v...]\n"
                    + "  list-topics BOOTSTRAP [k=v...]\n"
                    + "  describe-topic BOOTSTRAP TOPIC [k=v...]\n"
                    + "  produce BOOTSTRAP TOPIC COUNT [k=v...]\n"
                    + "  consume-assign BOOTSTRAP TOPIC PARTITION OFFSET|earliest|latest COUNT"
                    + " TIMEOUT_MS [k=v...]\n"
                    + "  consume-group BOOTSTRAP TOPIC GROUP COUNT TIMEOUT_MS [k=v...]\n";

    public static void main(String[] args) {
        silenceSlf4jWarning();
        if (args.length < 2) {
            System.err.print(USAGE);
            System.exit(2);
        }
        int code;
        try {
            code = run(args);
        } catch (UsageException e) {
            System.err.println(e.getMessage());
            System.err.print(USAGE);
            code = 2;
        } catch (Exception e) {
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    private static int run(String[] args) throws Exception {
        String command = args[0];
        String bootstrap = args[1];
        switch (command) {
            case "create-topic":
                need(args, 5);
                return createTopic(bootstrap, args[2], Integer.parseInt(args[3]),
                        Short.parseShort(args[4]), props(args, 5));
            case "list-topics":
                return listTopics(bootstrap, props(args, 2));
            case "describe-topic":
                need(args, 3);
                return describeTopic(bootstrap, args[2], props(args, 3));
            case "produce":
                need(args, 4);
                return produce(bootstrap, args[2], Integer.parseInt(args[3]), props(args, 4));
            case "consume-assign":
                need(args, 7);
                return consumeAssign(bootstrap, args[2], Integer.parseInt(args[3]), args[4],
                        Integer.parseInt(args[5]), Long.parseLong(args[6]), props(args, 7));
            case "consume-group":
                need(args, 6);
                return consumeGroup(bootstrap, args[2], args[3], Integer.parseInt(args[4]),
                        Long.parseLong(args[5]), props(args, 6));
            default:
                throw new UsageException("unknown command: " + command);
        }
    }

    // -- admin -------------------------------------------------------------------------------

    private static Admin admin(String bootstrap, Properties overrides) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.putAll(overrides);
        return Admin.create(props);
    }

    private static int createTopic(String bootstrap, String topic, int partitions, short rf,
            Properties overrides) throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all().get();
        }
        System.out.println("{\"topic\":" + str(topic) + ",\"partitions\":" + partitions
                + ",\"replication_factor\":" + rf + "}");
        return 0;
    }

    private static int listTopics(String bootstrap, Properties overrides) throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            Collection<String> names =
                    admin.listTopics(new ListTopicsOptions().listInternal(false)).names().get();
            for (String name : new TreeSet<>(names)) {
                System.out.println("{\"topic\":" + str(name) + "}");
            }
        }
        return 0;
    }

    private static int describeTopic(String bootstrap, String topic, Properties overrides)
            throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            Map<String, TopicDescription> descriptions =
                    admin.describeTopics(List.of(topic)).allTopicNames().get();
            TopicDescription description = descriptions.get(topic);
            String topicId = description.topicId() == null ? "null"
                    : str(description.topicId().toString());
            for (TopicPartitionInfo p : description.partitions()) {
                System.out.println("{\"topic\":" + str(topic) + ",\"topic_id\":" + topicId
                        + ",\"partition\":" + p.partition()
                        + ",\"leader\":" + (p.leader() == null ? -1 : p.leader().id())
                        + ",\"replicas\":" + nodeIds(p.replicas())
                        + ",\"isr\":" + nodeIds(p.isr()) + "}");
            }
        }
        return 0;
    }

    // -- producer ----------------------------------------------------------------------------

    private static int produce(String bootstrap, String topic, int count, Properties overrides)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.putAll(overrides);
        List<Future<RecordMetadata>> acks = new ArrayList<>(count);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata md = acks.get(i).get();
                System.out.println("{\"topic\":" + str(md.topic()) + ",\"partition\":"
                        + md.partition() + ",\"offset\":" + md.offset() + ",\"key\":"
                        + str("k" + i) + ",\"timestamp\":" + md.timestamp() + "}");
            }
        }
        return 0;
    }

    // -- consumers ---------------------------------------------------------------------------

    private static Properties consumerProps(String bootstrap, Properties overrides) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.putAll(overrides);
        return props;
    }

    private static int consumeAssign(String bootstrap, String topic, int partition,
            String offset, int count, long timeoutMs, Properties overrides) {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(consumerProps(bootstrap, overrides))) {
            consumer.assign(List.of(tp));
            if (offset.equals("earliest")) {
                consumer.seekToBeginning(List.of(tp));
            } else if (offset.equals("latest")) {
                consumer.seekToEnd(List.of(tp));
            } else {
                consumer.seek(tp, Long.parseLong(offset));
            }
            int got = pollAndPrint(consumer, count, timeoutMs, false);
            report(got, count);
        }
        return 0;
    }

    private static int consumeGroup(String bootstrap, String topic, String group, int count,
            long timeoutMs, Properties overrides) {
        Properties props = consumerProps(bootstrap, overrides);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.putAll(overrides);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            int got = pollAndPrint(consumer, count, timeoutMs, true);
            report(got, count);
        }
        return 0;
    }

    private static int pollAndPrint(KafkaConsumer<String, String> consumer, int count,
            long timeoutMs, boolean commit) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        int got = 0;
        while (got < count) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) {
                break;
            }
            ConsumerRecords<String, String> records =
                    consumer.poll(Duration.ofMillis(Math.min(left, 500)));
            for (ConsumerRecord<String, String> r : records) {
                if (got >= count) {
                    break;
                }
                System.out.println("{\"topic\":" + str(r.topic()) + ",\"partition\":"
                        + r.partition() + ",\"offset\":" + r.offset() + ",\"key\":"
                        + str(r.key()) + ",\"value\":" + str(r.value()) + ",\"timestamp\":"
                        + r.timestamp() + "}");
                got++;
            }
            if (commit && !records.isEmpty()) {
                // Commits the position after the whole poll, as an application would.
                consumer.commitSync();
            }
        }
        return got;
    }

    private static void report(int got, int wanted) {
        if (got < wanted) {
            System.err.println("KafkaTool: consumed " + got + " of " + wanted
                    + " records before the timeout");
        }
    }

    // -- helpers -----------------------------------------------------------------------------

    private static void need(String[] args, int n) {
        if (args.length < n) {
            throw new UsageException(args[0] + " needs " + (n - 1) + " arguments");
        }
    }

    private static Properties props(String[] args, int from) {
        Properties props = new Properties();
        for (int i = from; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                throw new UsageException("expected KEY=VALUE, got " + args[i]);
            }
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return props;
    }

    private static String nodeIds(List<Node> nodes) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < nodes.size(); i++) {
            out.append(i == 0 ? "" : ",").append(nodes.get(i).id());
        }
        return out.append(']').toString();
    }

    /** A JSON string literal, or null. */
    private static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }

    /** slf4j-api without a binding prints a three-line warning on first use; hide it. */
    private static void silenceSlf4jWarning() {
        PrintStream err = System.err;
        try {
            System.setErr(new PrintStream(OutputStream.nullOutputStream()));
            Class.forName("org.slf4j.LoggerFactory")
                    .getMethod("getLogger", String.class)
                    .invoke(null, "KafkaTool");
        } catch (ReflectiveOperationException | LinkageError e) {
            // No slf4j on the class path: nothing to silence.
        } finally {
            System.setErr(err);
        }
    }

    private static final class UsageException extends RuntimeException {
        UsageException(String message) {
            super(message);
        }
    }

    private KafkaTool() {}
}
